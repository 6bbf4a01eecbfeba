"""What Dagster recorded about a sink's failed runs, as plain facts for the retry rules
(:mod:`eos_pipeline.core.retries`); a group's newest cause is read from the event log only when
the planner asks for it (:class:`DiagnosedFailures`).

Self-healing (:func:`heal_requests`): a run killed after its data landed leaves the partition
"failed" in the UI while no lag asks for another run; the lag sensor asks for one run that reads
nothing and records its true state and check: once per failed run, at most :data:`MAX_HEALS` in
a row, so a partition that keeps failing is left to the retry rules and a person.
"""

# No `from __future__ import annotations`: kept like the other Dagster modules.
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import dagster as dg

from eos_pipeline.core.planning import (
    PARTITION_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    SINK_TAG,
    RunInfo,
    failures_by_start,
    stuck_partitions,
)
from eos_pipeline.core.retries import FailureFacts, Failures, diagnose

_FAILED = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
_EVENTS = {
    dg.DagsterEventType.STEP_FAILURE,
    dg.DagsterEventType.RUN_FAILURE,
    dg.DagsterEventType.ENGINE_EVENT,
}


#: How many of a sink's most recent failed runs one evaluation looks at.
FAILED_RUNS_LOOKBACK = 1000


def failed_runs(instance: dg.DagsterInstance, sink: str) -> "DiagnosedFailures":
    """``sink``'s failed and canceled runs, newest first, with their end times (one run-storage
    query), grouped for the planner (:class:`DiagnosedFailures`)."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(statuses=_FAILED, tags={SINK_TAG: sink}), limit=FAILED_RUNS_LOOKBACK
    )
    infos = [
        RunInfo(r.dagster_run.run_id, dict(r.dagster_run.tags), ended_at=r.end_time)
        for r in records
    ]
    canceled = {
        r.dagster_run.run_id
        for r in records
        if r.dagster_run.status == dg.DagsterRunStatus.CANCELED
    }
    return DiagnosedFailures(instance, infos, canceled)


def _chain(error: Any) -> list[tuple[str, str]]:
    """``(class, message)`` of an error and its causes, outer first."""
    out: list[tuple[str, str]] = []
    while error is not None and len(out) < 20:
        out.append((str(error.cls_name or ""), str(error.message or "")))
        error = error.cause or error.context
    return out


def failure_facts(instance: dg.DagsterInstance, run_id: str, canceled: bool) -> FailureFacts:
    """The failed step's error chain and the run's failure messages (one event-log query)."""
    errors: list[tuple[str, str]] = []
    messages: list[str] = []
    reason = None
    for entry in instance.all_logs(run_id, of_type=_EVENTS):
        event = entry.dagster_event
        if event is None:
            continue
        data = event.event_specific_data
        if event.event_type == dg.DagsterEventType.STEP_FAILURE:
            errors.extend(_chain(getattr(data, "error", None)))
        elif event.event_type == dg.DagsterEventType.RUN_FAILURE:
            messages.append(event.message or "")
            if getattr(data, "failure_reason", None) is not None:
                reason = data.failure_reason.value
            if not errors:
                errors.extend(_chain(getattr(data, "error", None)))
        elif event.message:
            messages.append(event.message)
    return FailureFacts(tuple(errors), tuple(messages), reason, canceled)


class DiagnosedFailures(Mapping[tuple[str, str], Failures]):
    """``(partition key or "*", start state) -> Failures``, each with the diagnosis of its
    newest run, read from the event log the first time the planner asks for it."""

    def __init__(
        self, instance: dg.DagsterInstance, runs: list[RunInfo], canceled: set[str]
    ) -> None:
        self._instance = instance
        #: The failed and canceled runs read, newest first (self-healing reads them too).
        self.runs = runs
        self._canceled = canceled
        self._groups = failures_by_start(runs)
        #: Partitions the newest range runs set aside for a person (``core.planning``).
        self.stuck = stuck_partitions(runs)
        self._read: set[tuple[str, str]] = set()

    def __getitem__(self, key: tuple[str, str]) -> Failures:
        failed = self._groups[key]
        if key not in self._read:
            self._read.add(key)
            run_id = failed.last_run_id
            facts = failure_facts(self._instance, run_id, run_id in self._canceled)
            failed.diagnosis = diagnose(facts)
        return failed

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)


# -------------------------------------------------------------------------------- self-healing

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
