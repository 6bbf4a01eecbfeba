"""Failed runs: a transient fault (ask again after a growing, capped wait) or one for a person.

The lag sensors ask for a run again after a failure (see :mod:`eos_pipeline.core.planning`).
What they do next depends on why the run failed, told apart here from plain facts that the
sensor reads from Dagster (the run's status, its failure events and the error chain of its
failed step):

* transient (a killed run process, an unreachable broker or keeper, a timeout): ask again,
  after :meth:`Backoff.delay` seconds, and keep asking, saying so in the skip reason
  ("retrying in 8s after 3 failures: <cause>");
* needs a person (bad config or credentials, offsets deleted by retention, a recreated topic,
  a fenced keeper writer, a keeper record that does not fit): stop at once and name the cause;
  re-running cannot fix these, and going on could skip or mix data;
* fenced by another Hudi writer (``HudiFencedError``: another commit landed between this run's
  plan and its commit): ask again with the same backoff, up to ``retry.max_attempts`` runs from
  the same state, then stop naming the cause (see below);
* unknown (anything else, a run canceled by hand): ask again with the same backoff, up to
  ``retry.max_attempts`` runs from the same state, then stop and say so.

Why a fenced Hudi run is retried. Nothing is written by a fenced run, and the fence only
refuses a commit when another commit landed after the one the run planned from. The usual
other writer is a zombie: an earlier run of the same pipeline, killed while its write executed
on a long-lived Spark Connect server, whose write went on there. Its commit moves the table's
checkpoint, so the next run starts from a new state (failures are counted per start state) and
plans after it: it succeeds. Only a writer that keeps landing commits without moving the
checkpoint (a table service such as clustering run by another tool, whose commit conflicts
under Hudi's optimistic concurrency) or a second deployment racing this one fences run after
run from the same state: those are given up on after ``retry.max_attempts`` and named.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "DEFAULT_BACKOFF",
    "Backoff",
    "Diagnosis",
    "FailureFacts",
    "Failures",
    "Fault",
    "Verdict",
    "diagnose",
    "given_up_message",
    "judge",
]


class Fault(StrEnum):
    TRANSIENT = "transient"
    NEEDS_PERSON = "needs a person"
    UNKNOWN = "unknown"
    #: Another writer committed first (a Hudi fence): retried a bounded number of times.
    RACE = "fenced by another writer"


@dataclass(frozen=True, slots=True)
class FailureFacts:
    """What Dagster recorded about one failed run."""

    #: ``(error class name, message)`` of the failed step's error and its causes, outer first.
    errors: tuple[tuple[str, str], ...] = ()
    #: Messages of the run's failure and engine events (a dead run process shows up only here).
    run_messages: tuple[str, ...] = ()
    #: Dagster's ``RunFailureReason`` value, if the run failure carried one.
    failure_reason: str | None = None
    canceled: bool = False


@dataclass(frozen=True, slots=True)
class Diagnosis:
    fault: Fault
    #: One line for a person: what went wrong, as the error said it.
    cause: str


#: Error classes no retry can fix: configuration, credentials, a fenced writer, a keeper
#: record or checkpoint that does not fit the log.
_PERSON_CLASSES = frozenset(
    {
        "ConfigError",
        "MissingSecretError",
        "SchemaError",
        "ValidationError",
        "DagsterInvalidConfigError",
        "KeeperAuthError",
        "NoAuthError",
        "AuthFailedError",
        "FencedError",
        "ConflictError",
        "CorruptRecordError",
        "InvalidKeyError",
        "OffsetRegressionError",
        "CheckpointError",
        "RegistryAccessError",
    }
)
#: Words of messages no retry can fix (checked before the transient ones: a read refused
#: because offsets were deleted by retention is a Kafka error too).
_PERSON_WORDS = (
    "deleted by retention",
    "no longer in the log",
    "recreated",
    "offset_out_of_range",
    "offset out of range",
    "fenced",
    "authentication failed",
    "sasl authentication",
    "not authorized",
    "authorization failed",
    "does not exist",
    "invalid url",
    "names no host",
    "must not carry",
)
#: Error classes of a writer that lost a race for the table's commit (see the module docstring).
_RACE_CLASSES = frozenset({"HudiFencedError"})
_RACE_HINT = (
    "another writer keeps committing to this table: a zombie write (an earlier run's, still "
    "executing on the Spark Connect server) ends by itself and moves the checkpoint; a second "
    "deployment, HoodieStreamer or a table service writing the same table needs a person"
)
_TRANSIENT_CLASSES = frozenset(
    {
        "KeeperUnavailableError",
        "ConnectionLoss",
        "SessionExpiredError",
        "ConnectionClosedError",
        "OperationTimeoutError",
        "KazooTimeoutError",
        "ConnectionError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "TimeoutError",
        "NewConnectionError",
        "MaxRetryError",
        "OperationalError",
    }
)
_TRANSIENT_WORDS = (
    "_transport",
    "all_brokers_down",
    "broker transport failure",
    "connection refused",
    "connection reset",
    "timed out",
    "_timed_out",
    "could not be reached",
    "unreachable",
    "connection loss",
    "session expired",
    "stalled after",
    "coordinator load in progress",
    "leader_not_available",
    "not_leader",
)
#: Dagster's reasons for a run that ended without its step failing: the process died.
_DEAD_PROCESS_REASONS = frozenset({"UNEXPECTED_TERMINATION", "RUN_WORKER_RESTART", "START_TIMEOUT"})
_DEAD_PROCESS_WORDS = (
    "terminated by signal",  # Dagster: "Run execution process for <id> was terminated by ..."
    "unexpectedly exited with code",
    "detected run worker status",
    "marked as failed from outside the execution context",
)


def _first_line(text: str, limit: int = 300) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _said(cls: str, message: str) -> str:
    """``<class>: <first line>``; Dagster's messages often start with the class already."""
    line = _first_line(message)
    return line if line.startswith(f"{cls}:") else f"{cls}: {line}"


def _matches(words: Iterable[str], text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in words)


def diagnose(facts: FailureFacts) -> Diagnosis:
    """Why one run failed, and which kind of fault that is (see the module docstring)."""
    for cls, message in reversed(facts.errors):  # its message says "fenced": checked first
        if cls in _RACE_CLASSES:
            return Diagnosis(Fault.RACE, _said(cls, message))
    for cls, message in reversed(facts.errors):  # the innermost cause names the fault best
        if cls in _PERSON_CLASSES or _matches(_PERSON_WORDS, message):
            return Diagnosis(Fault.NEEDS_PERSON, _said(cls, message))
    for cls, message in reversed(facts.errors):
        if cls in _TRANSIENT_CLASSES or _matches(_TRANSIENT_WORDS, message):
            return Diagnosis(Fault.TRANSIENT, _said(cls, message))
    if facts.errors:
        cls, message = facts.errors[-1]
        return Diagnosis(Fault.UNKNOWN, _said(cls, message))
    if facts.canceled:
        return Diagnosis(Fault.UNKNOWN, "the run was canceled")
    died = [m for m in facts.run_messages if _matches(_DEAD_PROCESS_WORDS, m)]
    if facts.failure_reason in _DEAD_PROCESS_REASONS or died:
        detail = _first_line(died[0]) if died else str(facts.failure_reason)
        return Diagnosis(Fault.TRANSIENT, f"the run's process died ({detail})")
    if facts.run_messages:
        return Diagnosis(Fault.UNKNOWN, _first_line(facts.run_messages[-1]))
    return Diagnosis(Fault.UNKNOWN, "no failure recorded")


@dataclass(frozen=True, slots=True)
class Backoff:
    """The wait before asking again after ``n`` failures: ``base * 2**(n-1)``, at most ``cap``."""

    base_s: float = 2.0
    cap_s: float = 60.0

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return min(self.cap_s, self.base_s * 2 ** min(failures - 1, 62))


#: The lag sensors' default: 2, 4, 8, ... seconds, at most a minute.
DEFAULT_BACKOFF = Backoff()


@dataclass(slots=True)
class Failures:
    """Failed runs that started from one state of one partition (or table): how many, the
    newest one's id, when it ended (epoch seconds) and why it failed."""

    count: int
    last_run_id: str
    last_failed_at: float | None = None
    diagnosis: Diagnosis | None = None


def given_up_message(what: str, state: str, failed: Failures, attempts: int) -> str:
    cause = f" Last failure: {failed.diagnosis.cause}." if failed.diagnosis else ""
    if failed.diagnosis and failed.diagnosis.fault is Fault.RACE:
        cause += f" The runs were fenced at their commit: {_RACE_HINT}."
    return (
        f"{what}: {failed.count} runs started from {state} failed (last: run "
        f"{failed.last_run_id}); retry.max_attempts is {attempts}, so no more runs are "
        "requested for it. Fix the cause (see that run's logs), then launch a run from the UI "
        f"or a backfill.{cause}"
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether to ask for a run now; if not, why (``waiting``: asked again later; else: stop)."""

    run: bool
    message: str | None = None
    waiting: bool = False


RUN = Verdict(run=True)


def judge(
    what: str,
    start: str,
    failed: Failures | None,
    *,
    max_attempts: int,
    backoff: Backoff,
    now: float | None,
    shown_start: str | None = None,
) -> Verdict:
    """What to do about ``what`` (a partition, a table) after the ``failed`` runs that started
    from ``start`` (``shown_start``: the same, as a person reads it).

    ``now`` None: no waiting (the backoff is not applied).
    """
    if failed is None or failed.count <= 0:
        return RUN
    found = failed.diagnosis or Diagnosis(Fault.UNKNOWN, "no failure recorded")
    state = shown_start or start
    if found.fault is Fault.NEEDS_PERSON:
        return Verdict(
            run=False,
            message=(
                f"{what}: stopped, this needs a person: {found.cause} (run "
                f"{failed.last_run_id}, started from {state}). Fix the cause, then launch a "
                "run from the UI or a backfill."
            ),
        )
    if found.fault in (Fault.UNKNOWN, Fault.RACE) and failed.count >= max_attempts:
        return Verdict(run=False, message=given_up_message(what, state, failed, max_attempts))
    if now is not None and failed.last_failed_at is not None:
        remaining = failed.last_failed_at + backoff.delay(failed.count) - now
        if remaining > 0:
            n = failed.count
            return Verdict(
                run=False,
                waiting=True,
                message=(
                    f"{what}: retrying in {math.ceil(remaining)}s after {n} "
                    f"failure{'s' if n > 1 else ''}: {found.cause}"
                ),
            )
    return RUN
