"""What Dagster recorded about a sink's failed runs, as plain facts for the retry rules.

Wiring only: the rules (transient or not, how long to wait, when to stop) live in
:mod:`eos_pipeline.core.retries`. The sensors count failed runs per partition and start state
from one run-storage query; the cause of a group's newest run is read from its event log only
when the planner asks for that group (:class:`DiagnosedFailures`), so an evaluation reads the
logs of the few runs that matter, not of every failed run in storage.
"""

# No `from __future__ import annotations`: kept like the other Dagster modules.
from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg

from eos_pipeline.core.planning import RunInfo, failures_by_start, stuck_partitions
from eos_pipeline.core.retries import FailureFacts, Failures, diagnose

__all__ = ["DiagnosedFailures", "failed_run_infos", "failure_facts"]

_FAILED = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
_EVENTS = {
    dg.DagsterEventType.STEP_FAILURE,
    dg.DagsterEventType.RUN_FAILURE,
    dg.DagsterEventType.ENGINE_EVENT,
}


def failed_run_infos(
    instance: dg.DagsterInstance, tags: Mapping[str, str], limit: int
) -> tuple[list[RunInfo], set[str]]:
    """Failed and canceled runs with ``tags``, newest first, with their end times; and the ids
    of the canceled ones (one run-storage query)."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(statuses=_FAILED, tags=dict(tags)), limit=limit
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
    return infos, canceled


def _chain(error: Any) -> list[tuple[str, str]]:
    """``(class, message)`` of an error and its causes, outer first."""
    out: list[tuple[str, str]] = []
    seen = 0
    while error is not None and seen < 20:
        out.append((str(error.cls_name or ""), str(error.message or "")))
        error = error.cause or error.context
        seen += 1
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
