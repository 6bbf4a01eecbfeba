"""Run tags, the runs a planner sees, and the plans it returns (shared by both sinks)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from eos_pipeline.core.retries import (
    Failures,
    RetryDecision,
)

# ------------------------------------------------------------------------------- run tags

#: The sink a run writes, ``<pipeline>.<sink>``: the runs of one sink are queried by it.
SINK_TAG = "eos_pipeline/sink"
#: ``<sink>.<partition key>``: ``dagster.yaml`` allows one run per value at a time.
SINK_PARTITION_TAG = "eos_pipeline/sink_partition"
#: The Hudi table's path: ``dagster.yaml`` allows one run per table at a time.
HUDI_TABLE_TAG = "eos_pipeline/hudi_table"
#: The embedded chDB data path: ``dagster.yaml`` allows one run per path at a time.
CHDB_PATH_TAG = "eos_pipeline/chdb_path"
#: The sink state a run starts from (ClickHouse: ``<phase>:<position>``; Hudi: a digest of the
#: checkpoint): failed runs are counted per partition and start state.
START_STATE_TAG = "eos_pipeline/start_state"
#: The Kafka end offsets a chDB range run was asked for, ``<partition key>=<end>,...``: while
#: it runs, a next run is asked for only once some end moved beyond them.
ENDS_TAG = "eos_pipeline/ends"
#: Dagster's own tags: a run's partition, its priority, and a partition-key-range run's bounds
#: (the values of dagster's ``ASSET_PARTITION_RANGE_START_TAG``/``_END_TAG``).
PARTITION_TAG = "dagster/partition"
PRIORITY_TAG = "dagster/priority"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"

#: Priority of a ClickHouse run that resolves a ``BEFORE`` range, and of any other run.
RECOVERY_PRIORITY = "10"
NORMAL_PRIORITY = "0"
#: Most runs one ClickHouse sensor evaluation asks for (the rest come on the next tick).
MAX_RUNS_PER_TICK = 200
#: The partition key under which a run without one (a range run) is counted.
ANY_PARTITION = "*"


# ------------------------------------------------------------------------------- runs


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run as the planner sees it: its id and tags."""

    run_id: str
    tags: Mapping[str, str] = field(default_factory=dict)
    #: When a failed run ended (epoch seconds): the backoff counts from there.
    ended_at: float | None = None


def asked_ends(runs: Iterable[RunInfo]) -> dict[str, int] | None:
    """The highest end per partition key that ``runs`` (running range runs) were asked for, or
    None when none of them says (no run, or runs launched by hand)."""
    ends: dict[str, int] | None = None
    for run in runs:
        text = run.tags.get(ENDS_TAG)
        if not text:
            continue
        ends = {} if ends is None else ends
        for item in text.split(","):
            key, _, end = item.rpartition("=")
            ends[key] = max(ends.get(key, -1), int(end))
    return ends


def in_flight_keys(runs: Iterable[RunInfo]) -> set[str]:
    """Partition keys with a run queued or running; :data:`ANY_PARTITION` for a range run."""
    busy: set[str] = set()
    for run in runs:
        key = run.tags.get(PARTITION_TAG)
        if key:
            busy.add(key)
        if RANGE_START_TAG in run.tags:
            busy.add(ANY_PARTITION)  # a range run: the whole table is being written
    return busy


def failures_by_start(runs: Iterable[RunInfo]) -> dict[tuple[str, str], Failures]:
    """``(partition key or "*", start state) -> Failures`` of failed runs given newest first.

    Runs without a start state were launched by hand (the UI, a backfill): not counted.
    """
    out: dict[tuple[str, str], Failures] = {}
    for run in runs:
        start = run.tags.get(START_STATE_TAG)
        if start is None:
            continue
        key = (run.tags.get(PARTITION_TAG, ANY_PARTITION), start)
        if key in out:
            out[key].count += 1
        else:
            out[key] = Failures(1, run.run_id, run.ended_at)
    return out


def retry_suffix(failed: Failures | None) -> str:
    """The run-key suffix that makes each retry from one start state a new key."""
    return f":retry{failed.count}" if failed else ""


# ------------------------------------------------------------------------------- plans


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """One run request: a single-partition run (``partition_key``) or a range run (tags)."""

    run_key: str
    tags: dict[str, str]
    partition_key: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """What one sensor evaluation asks for; ``skip_reason`` is set when it asks for nothing."""

    runs: tuple[PlannedRun, ...] = ()
    #: One line per partition (or table) given up on: the sensor logs them as warnings.
    given_up: tuple[str, ...] = ()
    skip_reason: str | None = None
    #: One line per partition (or table) waiting out its backoff after transient failures.
    waiting: tuple[str, ...] = ()


def plan_of(
    runs: Sequence[PlannedRun], given_up: Sequence[str], idle: str, waiting: Sequence[str] = ()
) -> Plan:
    """The plan of one evaluation: its runs, or why it asks for none (``idle`` if nothing)."""
    if runs:
        return Plan(tuple(runs), tuple(given_up), waiting=tuple(waiting))
    said = [*given_up, *waiting]
    return Plan((), tuple(given_up), " ".join(said) if said else idle, tuple(waiting))


def stopped(verdict: RetryDecision, given_up: list[str], waiting: list[str]) -> bool:
    """Note why no run is asked for (if so): backing off, or given up."""
    if verdict.run:
        return False
    (waiting if verdict.waiting else given_up).append(str(verdict.message))
    return True


def digest(text: str) -> str:
    """A short stable hash for run keys (the same state gives the same key)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
