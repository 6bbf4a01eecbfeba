"""Child process for the Hudi kill tests: one transaction, with ``EOS_FAULT_STEP`` armed.

Run as ``python -m eos_pipeline_tests.sinks.hudi_child '<json>'``. It starts its own Spark
session (a SIGKILL must take the driver JVM's work down with it, as a lost machine would), or with
``spark_remote`` in the job is a thin client of that Spark Connect server (for kills after the
write, where no driver work is left to take down), and runs one :class:`HudiTableSync`
transaction with the fault suite's hooks (:mod:`eos_pipeline_tests.support.faults`). Exit code 0
means the transaction committed; a kill shows up to the parent as -SIGKILL.
"""

from __future__ import annotations

import json
import logging
import sys

from pyspark.sql import SparkSession

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.spark import spark_conf
from eos_pipeline.adapters.spark_remote import connect
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import OneCluster
from eos_pipeline_tests.support.faults import hudi_fault
from eos_pipeline_tests.support.spark_faults import fail_armed_tasks


def main(argv: list[str]) -> int:
    args = json.loads(argv[1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.get("spark_remote"):
        spark = connect(args["spark_remote"])
    else:
        builder = SparkSession.builder
        for key, value in spark_conf("local[2]", quick_start=True).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    kafka = KafkaSettings(args["bootstrap"])
    spec = HudiTableSpec(
        pipeline=args["pipeline"],
        topic=args["topic"],
        table_path=args["table_path"],
        table_name=args["table_name"],
        schema=TableSchema.from_mapping(args["schema"]),
        table_type=args.get("table_type", "COPY_ON_WRITE"),
        max_records_per_partition=args.get("max_records", 1_000_000),
        hudi_options=SMALL_TABLE_OPTIONS,
    )
    sync = HudiTableSync(
        spec,
        OneCluster(kafka),
        spark,
        DeadLetterWriter(kafka, args["dlq"], spec.pipeline),
        fault=hudi_fault(spec.table_path),
        source_hook=fail_armed_tasks,
    )
    report = sync.run()
    print(json.dumps({"instant": report.instant_time}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
