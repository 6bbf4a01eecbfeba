"""Helpers that shape run and check results for the Dagster UI."""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

#: Dagster's standard key for a table's row count (plotted over time on the asset page).
ROW_COUNT_KEY = "dagster/row_count"


def markdown_table(header: list[str], rows: Iterable[Iterable[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def per_partition(
    context: dg.AssetExecutionContext, values: Mapping[str, Mapping[str, Any]]
) -> None:
    """Give each partition of the run its own numbers (they override the run-wide ones).

    Dagster records one materialization per partition of a run, all with the run's metadata;
    partition-scoped asset metadata replaces the run-wide values on that partition's event.
    """
    for key, metadata in values.items():
        context.add_asset_metadata(dict(metadata), partition_key=key)


#: Numbers that count what a run did (plotted over time on the asset page).
ACTIVITY_KEYS = (
    "records_read",
    "inserted",
    "skipped",
    "cropped",
    "dead_letters",
    "commit_records_read",
    "commit_inserted",
    "commit_dead_letters",
)
IDLE_CASE = (
    "caught up: nothing to read, nothing written (a backfill or run of a caught-up partition "
    "does nothing; the last write is in an earlier materialization)"
)


def quiet_when_idle(
    metadata: dict[str, Any], partitions: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A run that read nothing records its state (position, lag, rows) but no activity numbers.

    Dagster turns every run into a materialization; zeros from a backfill of a caught-up
    partition would be plotted next to real runs and read as a collapse. Without the keys, the
    plots keep only real points and the event says plainly that nothing happened. A run that
    did anything keeps its zeros per partition (a partition's numbers override the run's, they
    cannot remove them).
    """
    if any(metadata.get(key) for key in ACTIVITY_KEYS):
        return metadata, partitions
    quiet = {k: v for k, v in metadata.items() if k not in ACTIVITY_KEYS}
    quiet["case"] = IDLE_CASE
    return quiet, {
        key: {k: v for k, v in values.items() if k not in ACTIVITY_KEYS} | {"case": IDLE_CASE}
        for key, values in partitions.items()
    }
