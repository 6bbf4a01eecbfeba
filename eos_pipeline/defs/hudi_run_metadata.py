"""Hudi run results the asset reports beyond the plain sink's: a clustered run's metadata and
the rows per partition in the table after a commit."""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from typing import Any

import dagster as dg

from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.defs.config import Pipeline
from eos_pipeline.defs.metadata import markdown_table, quiet_when_idle
from eos_pipeline.defs.partitions import partition_key
from eos_pipeline.sinks.hooks import SinkHooks

#: Metadata key under which the Hudi asset records the table's checkpoint after its run (for
#: the UI; the sensors read the table's own timeline).
HUDI_CHECKPOINT_KEY = "checkpoint_after"


def clustered_hudi_result(
    context: dg.AssetExecutionContext, report: Any, hooks: SinkHooks
) -> dg.MaterializeResult:
    """A clustered Hudi run's metadata: the cluster read and the exact resume after a switch.

    Physical topics (``T``, ``B.T``) are not Dagster partitions: the run-wide numbers stand.
    """
    lag = report.lag_after
    rows = [
        [
            f"{report.cluster}:{partition_key(tp)}",
            str(r),
            report.records_read.get(tp, 0),
            report.rows_written.get(tp, 0),
            report.dead_letters.get(tp, 0),
            report.checkpoint_after.get(tp),
            lag.get(tp, 0),
        ]
        for tp, r in sorted(report.ranges.items())
    ]
    header = ["partition", "offset range", "read", "written", "DLQ", "to", "lag after"]
    metadata: dict[str, Any] = {
        "cluster": report.cluster or "",
        "offset_range": ", ".join(f"{row[0]} {row[1]}" for row in rows),
        "records_read": report.total_records_read,
        "inserted": report.total_rows_written,
        "dead_letters": report.total_dead_letters,
        "reread_after_switch": report.reread,
        "skipped_after_switch": report.skipped,
        "case": f"commit {report.instant_time}" if report.instant_time else "caught up: no commit",
        "instant_time": report.instant_time or "",
        "lag_after": sum(lag.values()),
        "seconds": round(report.seconds, 2),
        HUDI_CHECKPOINT_KEY: dg.MetadataValue.json(
            {partition_key(tp): off for tp, off in sorted(report.checkpoint_after.items())}
        ),
        "partitions": dg.MetadataValue.md(markdown_table(header, rows)),
    }
    metadata, _ = quiet_when_idle(metadata, {})
    hooks.fault("before_materialization_event")
    return dg.MaterializeResult(metadata=metadata)


def hudi_row_counts(
    spark: Any, path: str, pipeline: Pipeline, tps: list[TopicPartition]
) -> dict[TopicPartition, int] | None:
    """Rows per partition of the run in the table after the commit: one Spark aggregation over
    the source columns (no payload column is read)."""
    from pyspark.sql import functions as F

    if not tps:
        return {}
    source = pipeline.table_schema.source
    rows = (
        spark.read.format("hudi")
        .load(path)
        .where(F.col(source.topic) == tps[0].topic)
        .where(F.col(source.partition).isin([tp.partition for tp in tps]))
        .groupBy(source.partition)
        .count()
        .collect()
    )
    found = {int(row[0]): int(row[1]) for row in rows}
    return {tp: found.get(tp.partition, 0) for tp in tps}


__all__ = ["HUDI_CHECKPOINT_KEY", "clustered_hudi_result", "hudi_row_counts"]
