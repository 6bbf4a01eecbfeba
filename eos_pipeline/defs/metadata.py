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
