"""Self-healing after a kill: a caught-up partition whose newest run failed gets a run that
records its true state, without a person.

A run killed after its data landed (the keeper moved, the rows are in the table) leaves Dagster
showing the partition "failed" and its check "execution failed", while nothing is wrong and no
lag asks for another run. The lag sensor then asks for one run of that partition, asset and
check: it reads nothing (caught up), records a materialization with the partition's position
and row count, and evaluates the check on the data. Once per failed run (its run key), and at
most :data:`MAX_HEALS` heal runs in a row for one partition (a heal run that fails is itself
the newest failed run), so a partition that keeps failing is left to the retry rules and a
person.
"""

# No `from __future__ import annotations`: kept like the other Dagster modules.
from collections.abc import Callable, Mapping, Sequence

import dagster as dg

from eos_pipeline.core.planning import PARTITION_TAG, RANGE_END_TAG, RANGE_START_TAG, RunInfo

__all__ = ["HEAL_TAG", "MAX_HEALS", "heal_requests", "run_partitions"]

#: Tag of a heal run: the failed run whose partition it records again.
HEAL_TAG = "eos_pipeline/heals"
#: Tag of a heal run: how many heal runs in a row this partition has had.
HEAL_DEPTH_TAG = "eos_pipeline/heal_depth"
MAX_HEALS = 3
#: Failed runs older than this are not healed (the UI's history has moved on).
HEAL_WINDOW_SECONDS = 24 * 3600.0


def run_partitions(tags: Mapping[str, str], ordered: Sequence[str]) -> list[str]:
    """The partition keys a run targeted, from its tags (a single key or a key range)."""
    key = tags.get(PARTITION_TAG)
    if key:
        return [key]
    start, end = tags.get(RANGE_START_TAG), tags.get(RANGE_END_TAG)
    if start in ordered and end in ordered:
        first, last = ordered.index(start), ordered.index(end)
        return list(ordered[first : last + 1])
    return []


def heal_requests(
    instance: dg.DagsterInstance,
    asset: dg.AssetKey,
    check: dg.AssetCheckKey,
    failed: Sequence[RunInfo],
    ordered: Sequence[str],
    skip: set[str],
    tags_for: Callable[[str], dict[str, str]],
    now: float,
) -> list[dg.RunRequest]:
    """Runs for the partitions whose newest failed run (``failed``: newest first) ended after
    their latest materialization (made by that run or before it), except those in ``skip``
    (lagging or in flight). One materialization query per such partition."""
    newest: dict[str, RunInfo] = {}
    for run in failed:
        if run.ended_at is None or now - run.ended_at > HEAL_WINDOW_SECONDS:
            continue
        for key in run_partitions(run.tags, ordered):
            newest.setdefault(key, run)
    requests = []
    for key, run in sorted(newest.items()):
        depth = int(run.tags.get(HEAL_DEPTH_TAG, "0") or 0)
        if key in skip or depth >= MAX_HEALS:
            continue
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[key]), limit=1
        ).records
        if records and records[0].timestamp >= (run.ended_at or 0.0):
            continue  # materialized since that run ended: Dagster shows it as it is
        # A materialization by the failed run itself (a following run records its partitions
        # as it goes) does not clear it: its check did not run and shows "failed".
        requests.append(
            dg.RunRequest(
                run_key=f"heal:{run.run_id}:{key}",
                partition_key=key,
                asset_selection=[asset],
                asset_check_keys=[check],
                tags={**tags_for(key), HEAL_TAG: run.run_id, HEAL_DEPTH_TAG: str(depth + 1)},
            )
        )
    return requests
