"""``python -m benchmarks.hudi_commit_floor``: the product's Hudi commit time for small steady
transactions, with nothing else on the path (no Kafka, no Dagster, no Connect, a warm session).

Why: a following Hudi run commits one transaction per cycle, and a record waits on average half a
cycle for the next read and then a whole cycle, so produce-to-visible p50 is at least 1.5 x the
commit alone. This measures that commit (``write_transaction``: the checkpoint read before, the
write, the check after) back to back into one table, so a latency goal can be set against it.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession

from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS, write_transaction
from eos_pipeline.adapters.spark import spark_conf
from eos_pipeline.core.offsets import TopicPartition

ROWS = "_topic string, _partition int, _offset long, name string, score double"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hudi_commit_floor")
    parser.add_argument("--commits", type=int, default=12, help="the first 3 are not counted")
    parser.add_argument("--records", type=int, default=70, help="per partition and commit")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--small-table", action="store_true", help="SMALL_TABLE_OPTIONS (no metadata table)"
    )
    args = parser.parse_args(argv)
    builder = SparkSession.builder
    for key, value in spark_conf("local[2]").items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    path = str(Path(tempfile.mkdtemp(prefix="eos-hudi-floor-")) / "t")
    ends = {TopicPartition("t", p): 0 for p in range(args.partitions)}
    options = dict(SMALL_TABLE_OPTIONS) if args.small_table else {}
    seconds = []
    for i in range(args.commits):
        rows = [
            ("t", tp.partition, end + j, f"v{i}-{j}", float(j))
            for tp, end in ends.items()
            for j in range(args.records)
        ]
        df = spark.createDataFrame(rows, ROWS)
        ends = {tp: end + args.records for tp, end in ends.items()}
        began = time.monotonic()
        write_transaction(df, path, "t", ends, options=options, partition_count=args.partitions)
        seconds.append(round(time.monotonic() - began, 2))
    warm = seconds[3:]
    median = statistics.median(warm)
    result = {
        "small_table": args.small_table,
        "records_per_commit": args.records * args.partitions,
        "commit_s": seconds,
        "warm_median_s": median,
        "p50_floor_s": round(1.5 * median, 2),
    }
    print(json.dumps(result))
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
