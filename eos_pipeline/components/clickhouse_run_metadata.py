"""What a ClickHouse run reports: its partitions' numbers as Dagster metadata.

The run-wide numbers, a markdown table of every partition, and each partition's own numbers
(partition-scoped metadata, with its rows in the table as ``dagster/row_count``).
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from eos_pipeline.components.metadata import ROW_COUNT_KEY, markdown_table, quiet_when_idle
from eos_pipeline.components.partitions import partition_key
from eos_pipeline.core.offsets import OffsetRange
from eos_pipeline.core.positions import lag
from eos_pipeline.sinks.clickhouse_reports import case_summary

__all__ = ["TABLE_ROWS_KEY", "clickhouse_run_metadata"]

#: Rows in the whole table (all partitions), beside each partition's ``dagster/row_count``.
TABLE_ROWS_KEY = "table_row_count"


def _width(ranges: list[OffsetRange]) -> int:
    return sum(r.width for r in ranges)


def clickhouse_run_metadata(
    reports: Sequence[Any],
    row_counts: Mapping[str, int],
    *,
    clustered: bool,
    table_rows: int | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The run's metadata and each partition's (none for a run over several clusters).

    ``reports``: one :class:`~eos_pipeline.sinks.clickhouse_reports.PartitionReport` per
    partition synced; ``row_counts``: rows in the table per partition key; ``table_rows``: rows
    in the whole table, shown beside the partition's own ``dagster/row_count`` (the asset's
    overview shows the latest partition's numbers: without it "row count" reads as the
    table's).
    """
    rows = []
    for r in reports:
        skipped = sum(_width(b.skipped) for b in r.batches)
        cropped = sum(b.cropped.width for b in r.batches if b.cropped is not None)
        rows.append(
            [
                partition_key(r.tp),
                f"[{r.start}, {r.end})",
                r.records_read,
                r.rows_sent,
                skipped,
                cropped,
                r.dead_letters,
                case_summary(r.cases) or "caught up",
                lag(r.end, r.target_end),
                r.epoch,
            ]
        )
    header = [
        "partition",
        "offset range",
        "read",
        "inserted",
        "skipped",
        "cropped",
        "DLQ",
        "case",
        "lag after",
        "epoch",
    ]
    metadata: dict[str, Any] = {
        "offset_range": ", ".join(f"{row[0]} {row[1]}" for row in rows),
        "records_read": sum(r.records_read for r in reports),
        "inserted": sum(r.rows_sent for r in reports),
        "skipped": sum(row[4] for row in rows),
        "cropped": sum(row[5] for row in rows),
        "dead_letters": sum(r.dead_letters for r in reports),
        "case": "; ".join(f"{row[0]}: {row[7]}" for row in rows),
        "lag_after": sum(row[8] for row in rows),
        "partitions": dg.MetadataValue.md(markdown_table(header, rows)),
    }
    partition_values = {
        row[0]: {
            "offset_range": row[1],
            "records_read": row[2],
            "inserted": row[3],
            "skipped": row[4],
            "cropped": row[5],
            "dead_letters": row[6],
            "case": row[7],
            "lag_after": row[8],
            ROW_COUNT_KEY: row_counts[row[0]],
        }
        for row in rows
    }
    if table_rows is not None:
        metadata[TABLE_ROWS_KEY] = table_rows
        for values in partition_values.values():
            values[TABLE_ROWS_KEY] = table_rows
    if clustered:
        # Physical topics are not Dagster partitions: the run-wide numbers stand for each.
        metadata["cluster"] = reports[0].cluster if reports else ""
        metadata["reread_after_switch"] = sum(r.reread for r in reports)
        metadata["skipped_after_switch"] = sum(r.skipped for r in reports)
        partition_values = {}
    return quiet_when_idle(metadata, partition_values)
