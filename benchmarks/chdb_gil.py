"""How much a busy Python thread slows a chDB insert in the same process (issue 15).

``python -m benchmarks.chdb_gil [--records N] [--rounds R]``: inserts N JSON records of 1.5 KB
from a ``/dev/shm`` file (``INSERT ... SELECT FROM file(JSONEachRow)``, one thread, as the
native path does), alone and with a second Python thread spinning, and prints the insert's time
both ways and the spinning thread's rate against its idle rate. A read-ahead thread in the
sink's process is such a thread: when the insert slows by what the reader gains, reading ahead
cannot use the second core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

import clickhouse_connect

COLUMNS = "id UInt64, name String, v Float64, tags String"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    client = clickhouse_connect.get_client(interface="chdb", path=tempfile.mkdtemp())
    client.command(f"CREATE TABLE t ({COLUMNS}) ENGINE = MergeTree ORDER BY id")
    path = f"/dev/shm/eos-gil-probe-{os.getpid()}.json"
    with open(path, "w") as out:
        for i in range(args.records):
            row = {"id": i, "name": f"n{i}", "v": i / 2, "tags": "x" * 1500}
            out.write(json.dumps(row) + "\n")
    query = (
        f"INSERT INTO t SELECT * FROM file('{path}', JSONEachRow, '{COLUMNS}') "
        "SETTINGS max_threads = 1"
    )
    try:
        idle = _spin_rate(lambda: time.sleep(0.5))
        alone, busy, rates = [], [], []
        for _ in range(args.rounds):
            began = time.perf_counter()
            client.command(query)
            alone.append(time.perf_counter() - began)
            began = time.perf_counter()
            rates.append(_spin_rate(lambda: client.command(query)) / idle)
            busy.append(time.perf_counter() - began)
    finally:
        os.unlink(path)
    print(
        json.dumps(
            {
                "insert_alone_s": round(statistics.median(alone), 3),
                "insert_beside_a_busy_thread_s": round(statistics.median(busy), 3),
                "slowdown": round(statistics.median(busy) / statistics.median(alone), 2),
                "busy_thread_rate_vs_idle": round(statistics.median(rates), 2),
            }
        )
    )


def _spin_rate(work: Callable[[], object]) -> float:
    """Loop iterations per second of a spinning thread while ``work()`` runs."""
    stop = threading.Event()
    count = [0]

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1
        count[0] = n

    thread = threading.Thread(target=spin)
    began = time.perf_counter()
    thread.start()
    work()
    stop.set()
    thread.join()
    return count[0] / (time.perf_counter() - began)


if __name__ == "__main__":
    main()
