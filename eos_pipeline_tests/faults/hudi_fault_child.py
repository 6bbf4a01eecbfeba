"""Child process for the Hudi fault tests: one ``HudiTableSync.run()``, reporting how it ended.

Run as ``python -m eos_pipeline_tests.faults.hudi_fault_child '<json job>'`` (the job of
:meth:`FaultRig.job`, plus ``spark_conf``, ``max_record_bytes``, ``operation``,
``bulk_insert_min_records``). Unlike ``child.py``'s ``hudi``
command, a run that raises is not a crash here: the exception's class and message are printed
as the result, because a fenced or failing writer is the outcome under test. ``EOS_FAULT_STEP``,
``EOS_FAULT_PAUSE_STEP`` and ``EOS_FAULT_PAUSE_FILE`` work as in ``child.py``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from eos_pipeline_tests.faults.child import _counting_fault, _emit, _setup_logging, _spark
from eos_pipeline_tests.support.faults import hudi_fault


def run(job: dict[str, Any]) -> dict[str, Any]:
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
    from eos_pipeline.adapters.kafka import KafkaSettings
    from eos_pipeline.core.schema import TableSchema
    from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
    from eos_pipeline.sinks.source import OneCluster
    from eos_pipeline_tests.support.spark_faults import fail_armed_tasks

    kafka = KafkaSettings(job["bootstrap"])
    spec = HudiTableSpec(
        pipeline=job["pipeline"],
        topic=job["topic"],
        table_path=job["table_path"],
        table_name=job["table_name"],
        schema=TableSchema.from_mapping(job["schema"]),
        hudi_options={**SMALL_TABLE_OPTIONS, **(job.get("hudi_options") or {})},
        max_record_bytes=job.get("max_record_bytes"),
        operation=job.get("operation", "upsert"),
        bulk_insert_min_records=job.get("bulk_insert_min_records", 1),
    )
    spark = _spark(job)
    try:
        sync = HudiTableSync(
            spec,
            OneCluster(kafka),
            spark,
            DeadLetterWriter(kafka, job["hudi_dlq_topic"], job["pipeline"]),
            fault=hudi_fault(spec.table_path, _counting_fault()),
            source_hook=fail_armed_tasks,
        )
        try:
            report = sync.run()
        except Exception as exc:  # the outcome under test, not a crash of the child
            return {"ok": False, "error": type(exc).__name__, "message": str(exc)}
        return {
            "ok": True,
            "instant": report.instant_time,
            "rows": report.total_rows_written,
            "dead": report.total_dead_letters,
            "operation": report.operation,
        }
    finally:
        spark.stop()


def main(argv: list[str]) -> None:
    _setup_logging()
    _emit(run(json.loads(argv[-1])))  # argv: [prog, (command,) job]


if __name__ == "__main__":
    main(sys.argv)
