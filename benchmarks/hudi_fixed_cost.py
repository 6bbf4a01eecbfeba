"""``python -m benchmarks.hudi_fixed_cost``: Hudi sink fixed cost per run, and 100k transactions.

Starts its own stack on free ports, then measures in one process: Spark session start, the first
commit of a new table (1k records), a run with nothing to do, and two transactions of ``--records``
records each (the first on a cold JIT, the second warm). Prints one JSON line. Issue 4's closing
note reports these figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession

from benchmarks.local_stack import private_stack
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.adapters.spark import spark_conf
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import OneCluster

SCHEMA = TableSchema.from_mapping(
    {"id": "Int64", "name": "String", "score": "Float64", "action": "String", "page": "String"}
)


def _records(count: int, base: int, partitions: int) -> list[tuple[int, None, bytes]]:
    return [
        (
            i % partitions,
            None,
            json.dumps(
                {
                    "id": base + i,
                    "name": f"user-{i % 997}",
                    "score": i * 0.5,
                    "action": "view",
                    "page": f"/p/{i % 113}",
                }
            ).encode(),
        )
        for i in range(count)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.hudi_fixed_cost", description=__doc__
    )
    parser.add_argument("--records", type=int, default=100_000, help="records per transaction")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--operation", choices=("upsert", "insert", "bulk_insert"), default="upsert"
    )
    parser.add_argument("--quick-start", action="store_true", help="JVM on its fast-start JIT tier")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="eos-hudi-bench-"))
    with private_stack(work) as config:
        kafka = KafkaSettings(config.kafka_bootstrap)
        create_topic(kafka, "bench", args.partitions)
        producer = idempotent_producer(kafka)
        produce_all(producer, "bench", _records(1000, 0, args.partitions))
        began = time.monotonic()
        builder = SparkSession.builder
        for key, value in spark_conf("local[2]", quick_start=args.quick_start).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        started = time.monotonic()
        spec = HudiTableSpec(
            "bench",
            "bench",
            str(work / "table"),
            "bench",
            SCHEMA,
            operation=args.operation,
            hudi_options=SMALL_TABLE_OPTIONS,
        )
        sync = HudiTableSync(
            spec, OneCluster(kafka), spark, DeadLetterWriter(kafka, "bench.dlq", "bench")
        )
        sync.run()
        first = time.monotonic()
        sync.run()
        empty = time.monotonic()
        result: dict[str, object] = {
            "operation": args.operation,
            "quick_start": args.quick_start,
            "spark_start_s": round(started - began, 1),
            "first_commit_1k_s": round(first - started, 1),
            "empty_run_s": round(empty - first, 2),
        }
        for n in (1, 2):
            produce_all(producer, "bench", _records(args.records, n * 10_000_000, args.partitions))
            t0 = time.monotonic()
            report = sync.run()
            seconds = time.monotonic() - t0
            result[f"tx{n}_s"] = round(seconds, 1)
            result[f"tx{n}_records_per_s"] = round(report.total_records_read / seconds)
        print(json.dumps(result))
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
