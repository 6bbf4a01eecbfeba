"""Peak memory of one exactly-once catch-up, measured in a fresh process.

Each probe is its own process with its own chDB engine (on its own data path), so nothing else
of the benchmark sits in its memory. It records the resident set size after start-up, samples it
every few milliseconds while it catches the topic up, and reports the peak growth next to the
Python heap peak (tracemalloc) and Arrow's memory pool peak. (``ru_maxrss`` alone is useless
here: chDB's start-up already sets a high-water mark above what a batch adds.) Prints one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import threading
import time
import tracemalloc
import uuid
from pathlib import Path

import clickhouse_connect
import pyarrow as pa

from benchmarks.data import SCHEMA
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.kafka import KafkaSettings, end_offsets
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_mb() -> float:
    """Current resident set size (Linux), or the high-water mark where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 1e6
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = _rss_mb()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, _rss_mb())
            time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kafka-bootstrap", required=True)
    parser.add_argument("--zookeeper-hosts", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    kafka = KafkaSettings(args.kafka_bootstrap)
    client = clickhouse_connect.get_client(interface="chdb", path=str(args.workdir / "chdb"))
    sink = ClickHouseSink(client)
    table = f"mem_{args.batch}"
    sink.ensure_table("bench", table, SCHEMA)
    suffix = uuid.uuid4().hex[:8]
    store = KeeperStateStore(KeeperSettings(hosts=args.zookeeper_hosts, root=f"/mem_{suffix}"))
    store.start()
    pipeline = f"mem-{suffix}"
    spec = ClickHouseTableSpec(pipeline, "bench", table, SCHEMA, max_records=args.batch)
    sync = ClickHousePartitionSync(
        spec,
        kafka,
        store,
        sink,
        DeadLetterWriter(kafka, f"{args.topic}.dlq", pipeline),
        fault=lambda _step: None,
    )
    before = _rss_mb()
    sampler = _Sampler()
    sampler.start()
    tracemalloc.start()
    for p in range(args.partitions):
        sync.run(TopicPartition(args.topic, p))
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sampler.done.set()
    sampler.join()
    after = max(sampler.peak, _rss_mb())
    ends = end_offsets(kafka, args.topic)
    exact = all(
        len(stored := sink.offsets_in_table("bench", table, args.topic, p)) == ends[p]
        and all(n == 1 for _, n in stored)
        for p in range(args.partitions)
    )
    store.close()
    client.close()
    print(
        json.dumps(
            {
                "rss_before_mb": round(before, 1),
                "rss_peak_mb": round(after, 1),
                "rss_growth_mb": round(after - before, 1),
                "tracemalloc_peak_mb": round(py_peak / 1e6, 1),
                "arrow_peak_mb": round(pa.default_memory_pool().max_memory() / 1e6, 1),
                "exact": exact,
            }
        )
    )


if __name__ == "__main__":
    main()
