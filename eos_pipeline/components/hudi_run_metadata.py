"""What a Hudi run reports as Dagster metadata: a run's (one commit's) numbers, a clustered run's,
and the rows per partition in the table after a commit."""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Collection, Mapping
from typing import Any

import dagster as dg

from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.metadata import ROW_COUNT_KEY, markdown_table, quiet_when_idle
from eos_pipeline.components.partitions import partition_key
from eos_pipeline.core.offsets import TopicPartition
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
        "operation": report.operation or "",
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


def hudi_run_metadata(
    report: Any, row_counts: Mapping[TopicPartition, int] | None, keys: Collection[str]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A Hudi run's metadata: the commit's numbers, and each partition of ``keys`` its own.

    Each partition's event overrides the unprefixed numbers with its share; the ``commit_*``
    ones stay. ``row_counts``: rows per partition in the table (None: no table yet).
    """
    before = report.checkpoint_before or {}
    lag = report.lag_after
    rows = [
        [
            partition_key(tp),
            str(r),
            report.records_read.get(tp, 0),
            report.rows_written.get(tp, 0),
            report.dead_letters.get(tp, 0),
            before.get(tp, "new"),
            report.checkpoint_after.get(tp),
            lag.get(tp, 0),
        ]
        for tp, r in sorted(report.ranges.items())
    ]
    header = ["partition", "offset range", "read", "written", "DLQ", "from", "to", "lag after"]
    if report.instant_time is None:
        case = "caught up: no commit"
    elif report.checkpoint_before is None:
        case = f"new table: first commit {report.instant_time}"
    else:
        case = f"commit {report.instant_time} on top of the table's last checkpoint"
    cropped = {
        tp: max(0, report.end_offsets[tp] - r.end) if tp in report.end_offsets else 0
        for tp, r in report.ranges.items()
    }
    metadata: dict[str, Any] = {
        "offset_range": ", ".join(f"{row[0]} {row[1]}" for row in rows),
        # the whole commit's numbers; each partition's event overrides the unprefixed ones
        # with its own share (see defs.metadata.per_partition), the commit_* ones stay
        "records_read": report.total_records_read,
        "inserted": report.total_rows_written,
        "skipped": 0,  # the checkpoint decides the start: nothing already written is read
        "cropped": sum(cropped.values()),
        "dead_letters": report.total_dead_letters,
        "commit_records_read": report.total_records_read,
        "commit_inserted": report.total_rows_written,
        "commit_dead_letters": report.total_dead_letters,
        "commit_partitions": len(report.ranges),
        "case": case,
        "instant_time": report.instant_time or "",
        # the Hudi operation of the commit (``auto`` resolved by the plan's size)
        "operation": report.operation or "",
        "lag_after": sum(lag.values()),
        "seconds": round(report.seconds, 2),
        HUDI_CHECKPOINT_KEY: dg.MetadataValue.json(
            {str(tp.partition): off for tp, off in sorted(report.checkpoint_after.items())}
        ),
        "partitions": dg.MetadataValue.md(markdown_table(header, rows)),
    }
    return quiet_when_idle(
        metadata,
        {
            partition_key(tp): {
                "offset_range": str(r),
                "records_read": report.records_read.get(tp, 0),
                "inserted": report.rows_written.get(tp, 0),
                "cropped": cropped[tp],
                "dead_letters": report.dead_letters.get(tp, 0),
                "lag_after": lag.get(tp, 0),
                **({ROW_COUNT_KEY: row_counts[tp]} if row_counts is not None else {}),
            }
            for tp, r in sorted(report.ranges.items())
            if partition_key(tp) in keys
        },
    )


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


__all__ = ["HUDI_CHECKPOINT_KEY", "clustered_hudi_result", "hudi_row_counts", "hudi_run_metadata"]
