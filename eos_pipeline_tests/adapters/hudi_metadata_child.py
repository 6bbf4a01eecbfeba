"""One Hudi transaction in a fresh process (and so a fresh JVM), for ``test_hudi_metadata_table``.

Usage: ``python -m eos_pipeline_tests.adapters.hudi_metadata_child '<json job>'``. The job names
the table, the offsets to write (``{partition: [start, end)}``), the checkpoint after them and
the Hudi options. The write goes through the product's ``write_transaction``; the outcome is
printed as one ``HUDI-CHILD-RESULT {json}`` line (``ok``, ``instant`` or ``error``), and the exit
code is 0 either way so the test can read a failed write's Java cause.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

RESULT_PREFIX = "HUDI-CHILD-RESULT "


def rows_for(topic: str, ranges: dict[str, list[int]]) -> list[tuple[str, int, int, int, str]]:
    """``(_topic, _partition, _offset, id, name)`` for every offset of ``ranges``."""
    return [
        (topic, int(p), offset, int(p) * 1_000_000 + offset, f"e{p}-{offset}")
        for p, (start, end) in sorted(ranges.items())
        for offset in range(start, end)
    ]


ROW_SCHEMA = "_topic string, _partition int, _offset long, id long, name string"


def main(job: dict[str, Any]) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    from eos_pipeline.adapters.hudi import write_transaction
    from eos_pipeline.adapters.spark import spark_conf
    from eos_pipeline.core.offsets import TopicPartition

    builder = SparkSession.builder.appName("eos-hudi-metadata-child")
    for key, value in spark_conf(job.get("master", "local[1]"), quick_start=True).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    began = time.monotonic()
    try:
        df = spark.createDataFrame(rows_for(job["topic"], job["ranges"]), ROW_SCHEMA)
        checkpoint = {TopicPartition(job["topic"], int(p)): o for p, o in job["after"].items()}
        try:
            commit = write_transaction(
                df, job["table_path"], job["table_name"], checkpoint, options=job["options"]
            )
        except Exception as exc:  # the test wants the cause, not a traceback
            return {"ok": False, "seconds": time.monotonic() - began, "error": str(exc)[-20_000:]}
        return {"ok": True, "seconds": time.monotonic() - began, "instant": commit.instant_time}
    finally:
        spark.stop()


if __name__ == "__main__":
    outcome = main(json.loads(sys.argv[1]))
    print(RESULT_PREFIX + json.dumps(outcome), flush=True)
