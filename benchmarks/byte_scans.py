"""``python -m benchmarks.byte_scans``: the native JSON path's byte scans in Python against the
same counts done by chDB, on one chunk.

Issue 30 asked to move the scans :func:`eos_pipeline.core.decode.native_payload` does in Python
(framing, control bytes, escapes, the count of quoted values) into the checked INSERT. ClickHouse's
JSONEachRow parse keeps no raw text, so a check inside the INSERT has to read the staged file a
second time, as one blob (``RawBLOB``) or as lines (``LineAsString``). This times, by CPU and best
of ``--repeat``, on one chunk of benchmark records in ``/dev/shm``:

* the product's scans over a memory map of the chunk (what a chunk costs now);
* chDB reading the chunk as a blob, and as lines, with nothing counted (what any check in the
  INSERT pays first);
* chDB counting the quoted values (``:"`` and ``: "``) over each read.

Every count must equal the product's, or the benchmark fails. No stack needed. Prints one JSON
document (also written to ``benchmarks/results/byte_scans.json``, not committed).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.data import make_values
from eos_pipeline.core.decode import native_payload


def best_cpu_ms(work: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The least CPU time of ``repeat`` calls (this process, chDB's threads included), in ms."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        result = work()
        best = min(best, time.process_time() - start)
    return round(best * 1000, 2), result


def measure(records: int, record_bytes: int, repeat: int, client: Any = None) -> dict[str, Any]:
    """The figures on one chunk, with ``client`` (chDB; default: a fresh engine of its own)."""
    import clickhouse_connect

    owned = client is None
    if owned:
        client = clickhouse_connect.get_client(
            interface="chdb", path=tempfile.mkdtemp(prefix="eos-scan-chdb-")
        )
    values = make_values(records, record_bytes)
    directory = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    fd, path = tempfile.mkstemp(prefix="eos-scan-", suffix=".jsonl", dir=directory)
    try:
        size = os.write(fd, b"\n".join(values))
        view = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)

        def sql(text: str) -> Callable[[], Any]:
            return lambda: client.command(text, parameters={"path": path})

        blob = "FROM file({path:String}, 'RawBLOB')"
        lines = "FROM file({path:String}, 'LineAsString')"
        count = "countSubstrings({x}, ':\"') + countSubstrings({x}, ': \"')"
        rows = {
            "python scans (the product)": lambda: native_payload(values, view).quoted,  # type: ignore[union-attr]
            "chDB reads the blob": sql(f"SELECT length(raw_blob) {blob}"),
            "chDB reads the lines": sql(f"SELECT sum(length(line)) {lines}"),
            "chDB counts over the blob": sql(f"SELECT {count.format(x='raw_blob')} {blob}"),
            "chDB counts over the lines": sql(f"SELECT sum({count.format(x='line')}) {lines}"),
        }
        figures = {name: best_cpu_ms(work, repeat) for name, work in rows.items()}
        quoted = figures["python scans (the product)"][1]
        for name in ("chDB counts over the blob", "chDB counts over the lines"):
            if int(figures[name][1]) != quoted:
                raise SystemExit(f"{name}: {figures[name][1]} quoted values, Python {quoted}")
        view.close()
    finally:
        os.close(fd)
        os.unlink(path)
        if owned:
            client.close()
    return {
        "benchmark": "byte_scans",
        "command": " ".join(["python -m benchmarks.byte_scans", *sys.argv[1:]]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "chunk_mb": round(size / 1e6, 1),
        "records": records,
        "quoted_values": quoted,
        "cpu_ms_best": {name: ms for name, (ms, _) in figures.items()},
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.byte_scans", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--records", type=int, default=25_000, help="one chunk (the batch)")
    parser.add_argument("--record-bytes", type=int, default=1600)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/byte_scans.json"))
    args = parser.parse_args(argv)
    doc = measure(args.records, args.record_bytes, args.repeat)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
