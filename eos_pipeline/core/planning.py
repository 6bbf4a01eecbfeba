"""Which runs the sensors ask for: a pure planner, from plain state to plain run requests.

The sensors (:mod:`eos_pipeline.defs.sensors`) read the state through the adapters (Kafka's
end offsets, the keeper records, the Hudi checkpoint copy, the runs in flight and the failed
runs) and turn the plans made here into Dagster objects. Everything they decide is decided here.

Run keys contain the end offsets asked for and the sink's position, so re-evaluating with
nothing new yields the same keys and Dagster launches nothing; partitions with a run already
queued or running are left alone.

A run that fails (or is killed) without moving the position would leave the sensor asking for
the same run key, which Dagster never launches twice: the partition would be stuck. So each run
is tagged with the state it starts from (:data:`START_STATE_TAG`), the failed and canceled runs
are counted per partition and start state (:func:`failures_by_start`), and the count goes into
the run key: each failure yields a fresh key. Why the newest run failed decides what comes next
(:mod:`eos_pipeline.core.retries`): a transient fault is retried after a growing, capped wait,
without limit, and the skip reason says so; a fault that needs a person stops the requests at
once, naming the cause; any other is retried up to ``max_attempts`` runs from the same state,
then given up (a warning naming the partition, the position and the last failed run), so a
permanent error never becomes a crash loop.

* ClickHouse (:func:`plan_clickhouse`): on a server, one run per lagging partition, side by
  side; partitions left in ``BEFORE`` (a run died mid-step) first, with a higher
  ``dagster/priority``, so they recover first; at most :data:`MAX_RUNS_PER_TICK` runs per
  evaluation. On an embedded chDB path (one process at a time), ONE key-range run over all
  lagging partitions (:func:`clickhouse_range_run`), which handles ``BEFORE`` ones first.
* Hudi (:func:`plan_hudi`): one table takes one writer at a time, so all lagging partitions go
  into ONE run over a key range of the dynamic partitions (Dagster's range tags), which the
  asset turns into one commit.
* Partitions (:func:`plan_new_partitions`, in :mod:`eos_pipeline.core.partition_plan`): one
  key per Kafka partition not yet known; keys that match no Kafka partition are removed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.partition_keys import partition_key
from eos_pipeline.core.partition_plan import NewPartitions, plan_new_partitions, stray_keys
from eos_pipeline.core.positions import (
    Reset,
    Standing,
    checkpoint_state,
    needs_log_start,
    standing,
)
from eos_pipeline.core.retries import (
    DEFAULT_BACKOFF,
    Backoff,
    Failures,
    Verdict,
    given_up_message,
    judge,
)

__all__ = [
    "ANY_PARTITION",
    "CHDB_PATH_TAG",
    "HUDI_TABLE_TAG",
    "MAX_RUNS_PER_TICK",
    "NORMAL_PRIORITY",
    "PARTITION_TAG",
    "PRIORITY_TAG",
    "RANGE_END_TAG",
    "RANGE_START_TAG",
    "RECOVERY_PRIORITY",
    "SINK_PARTITION_TAG",
    "SINK_TAG",
    "START_STATE_TAG",
    "Backoff",
    "Failures",
    "NewPartitions",
    "Plan",
    "PlannedRun",
    "RunInfo",
    "TopicState",
    "clickhouse_needs_log_starts",
    "clickhouse_range_run",
    "failures_by_start",
    "given_up_message",
    "hudi_blocked",
    "hudi_needs_log_starts",
    "in_flight_keys",
    "plan_clickhouse",
    "plan_hudi",
    "plan_new_partitions",
    "recovery_order",
    "stray_keys",
]

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


def _retry_suffix(failed: Failures | None) -> str:
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


def _plan(
    runs: Sequence[PlannedRun], given_up: Sequence[str], idle: str, waiting: Sequence[str] = ()
) -> Plan:
    if runs:
        return Plan(tuple(runs), tuple(given_up), waiting=tuple(waiting))
    said = [*given_up, *waiting]
    return Plan((), tuple(given_up), " ".join(said) if said else idle, tuple(waiting))


def _stopped(verdict: Verdict, given_up: list[str], waiting: list[str]) -> bool:
    """Note why no run is asked for (if so): backing off, or given up."""
    if verdict.run:
        return False
    (waiting if verdict.waiting else given_up).append(str(verdict.message))
    return True


# ------------------------------------------------------------------------------- ClickHouse


@dataclass(frozen=True, slots=True)
class TopicState:
    """One topic as the ClickHouse sensor reads it."""

    topic: str
    #: Kafka's last stable offset per partition.
    ends: Mapping[int, int]
    #: Partitions with a keeper record, and the position it holds (None: a record without
    #: state yet). A partition missing here has no record at all.
    records: Mapping[int, SinkState | None] = field(default_factory=dict)
    #: Kafka's first offset per partition: only needed where
    #: :func:`clickhouse_needs_log_starts` says so.
    log_starts: Mapping[int, int] | None = None


def _clickhouse_candidates(
    topic: TopicState, known: Collection[str], busy: Collection[str]
) -> Iterator[tuple[int, int, str]]:
    """``(partition, end, key)`` of the known partitions without a run in flight, in order."""
    for p, end in sorted(topic.ends.items()):
        key = partition_key(TopicPartition(topic.topic, p))
        if key in known and key not in busy:
            yield p, end, key


def clickhouse_needs_log_starts(
    topic: TopicState, known: Collection[str], busy: Collection[str], reset: Reset
) -> bool:
    """Whether :func:`plan_clickhouse` needs ``topic.log_starts`` (one Kafka request)."""
    return any(
        needs_log_start(topic.records.get(p), reset)
        for p, _, _ in _clickhouse_candidates(topic, known, busy)
    )


def plan_clickhouse(
    sink: str,
    topics: Iterable[TopicState],
    *,
    known: Collection[str],
    busy: Collection[str],
    failures: Mapping[tuple[str, str], Failures],
    max_attempts: int,
    reset: Reset,
    chdb_path: str | None = None,
    ordered_keys: Sequence[str] | None = None,
    queued: bool = False,
    max_runs: int = MAX_RUNS_PER_TICK,
    backoff: Backoff = DEFAULT_BACKOFF,
    now: float | None = None,
) -> Plan:
    """The runs that catch the lagging partitions of ``topics`` up; ``BEFORE`` partitions first.

    On a ClickHouse server (no ``chdb_path``): one run per lagging partition, side by side.
    On an embedded chDB path runs are serialized anyway, so a run per partition would only add
    a queue wait and a process start per partition: ONE run over a key range of the dynamic
    partitions (:func:`clickhouse_range_run`), needing ``ordered_keys`` and ``queued`` (a run
    of the sink waits in Dagster's queue).

    Left alone: partitions not (yet) known as Dagster partitions, with a run in flight
    (``busy``), caught up, or given up after ``max_attempts`` failed runs from their current
    state. With ``reset: latest`` a partition whose keeper record holds no state yet is left
    alone too: a run has taken it and pins its start with its first write.
    """
    if chdb_path is not None and ordered_keys is not None:
        return clickhouse_range_run(
            sink,
            topics,
            ordered_keys=ordered_keys,
            busy=busy,
            failures=failures,
            max_attempts=max_attempts,
            reset=reset,
            chdb_path=chdb_path,
            queued=queued,
            backoff=backoff,
            now=now,
        )
    recover: list[PlannedRun] = []
    behind: list[PlannedRun] = []
    given_up: list[str] = []
    waiting: list[str] = []
    for key, end, where in _clickhouse_lagging(topics, known, busy, reset):
        start = f"{where.phase}:{where.position}"
        failed = failures.get((key, start))
        verdict = judge(
            f"{key} ({sink})", start, failed, max_attempts=max_attempts, backoff=backoff, now=now
        )
        if _stopped(verdict, given_up, waiting):
            continue
        tags = {
            SINK_TAG: sink,
            SINK_PARTITION_TAG: f"{sink}.{key}",
            PRIORITY_TAG: RECOVERY_PRIORITY if where.recovering else NORMAL_PRIORITY,
            START_STATE_TAG: start,
        }
        if chdb_path:
            tags[CHDB_PATH_TAG] = chdb_path
        run = PlannedRun(
            run_key=f"{sink}:{key}:{start}:{end}{_retry_suffix(failed)}",
            tags=tags,
            partition_key=key,
        )
        (recover if where.recovering else behind).append(run)
    runs = (recover + behind)[:max_runs]
    return _plan(runs, given_up, "every partition is caught up (or has a run in flight)", waiting)


def _clickhouse_lagging(
    topics: Iterable[TopicState], known: Collection[str], busy: Collection[str], reset: Reset
) -> Iterator[tuple[str, int, Standing]]:
    """``(key, end, standing)`` of every lagging known partition without a run in flight."""
    for topic in topics:
        lows = topic.log_starts or {}
        for p, end, key in _clickhouse_candidates(topic, known, busy):
            state = topic.records.get(p)
            if state is None and reset == "latest" and p in topic.records:
                continue
            where = standing(state, reset, end=end, log_start=lows.get(p))
            if where.lagging:
                yield key, end, where


def clickhouse_range_run(
    sink: str,
    topics: Iterable[TopicState],
    *,
    ordered_keys: Sequence[str],
    busy: Collection[str],
    failures: Mapping[tuple[str, str], Failures],
    max_attempts: int,
    reset: Reset,
    chdb_path: str,
    queued: bool = False,
    backoff: Backoff = DEFAULT_BACKOFF,
    now: float | None = None,
) -> Plan:
    """ONE run over every lagging partition of a chDB-backed table, or a skip reason.

    A Dagster key range is contiguous in ``ordered_keys`` (the order partitions were added),
    while lagging partitions need not be: the run covers the range from the first to the last
    lagging one, and the caught-up partitions in between cost one keeper read and one offset
    request each, no insert (one run is much cheaper than a process start per gap). Inside
    the run, partitions in ``BEFORE`` are caught up first (:func:`recovery_order`), and the
    run gets the recovery priority if any partition recovers.

    The chDB path takes one process at a time. While a run of the sink waits in the queue
    (``queued``) nothing is asked for: it reads whatever arrived when it starts. While one
    runs, the next one is asked for and waits behind it (``dagster.yaml``'s chDB limit), so it
    starts as soon as the path is free rather than a sensor tick later. Partitions with a
    single-partition run of their own in flight (launched by hand) are left to it.

    Failed range runs are counted under :data:`ANY_PARTITION` and a digest of the lagging
    partitions' states, like Hudi's table runs. A run planned while another one ran carries
    the states seen then; if it fails, the next plan starts from the real states and counts
    afresh: at most one extra attempt, never a skipped offset (a run always starts from the
    keeper's position).
    """
    if queued:
        return Plan(skip_reason=f"a run of {sink} is queued: it reads what arrived meanwhile")
    order = {key: i for i, key in reversed(list(enumerate(ordered_keys)))}
    lagging = list(_clickhouse_lagging(topics, order, busy, reset))
    if not lagging:
        return Plan(skip_reason="every partition is caught up (or has a run in flight)")
    lagging.sort(key=lambda item: order[item[0]])
    state = ",".join(f"{key}={where.phase}:{where.position}" for key, _, where in lagging)
    wanted = ",".join(f"{key}={end}" for key, end, _ in lagging)
    start = "range:" + _digest(state)
    failed = failures.get((ANY_PARTITION, start))
    verdict = judge(
        f"{sink} partitions {state}",
        start,
        failed,
        max_attempts=max_attempts,
        backoff=backoff,
        now=now,
    )
    given_up: list[str] = []
    waiting: list[str] = []
    if _stopped(verdict, given_up, waiting):
        return _plan((), given_up, "", waiting)
    recovering = any(where.recovering for _, _, where in lagging)
    tags = {
        SINK_TAG: sink,
        CHDB_PATH_TAG: chdb_path,
        RANGE_START_TAG: lagging[0][0],
        RANGE_END_TAG: lagging[-1][0],
        PRIORITY_TAG: RECOVERY_PRIORITY if recovering else NORMAL_PRIORITY,
        START_STATE_TAG: start,
    }
    run_key = f"{sink}:{lagging[0][0]}..{lagging[-1][0]}:{_digest(state + '/' + wanted)}"
    return Plan(runs=(PlannedRun(run_key + _retry_suffix(failed), tags),))


def recovery_order(keys: Iterable[str], states: Mapping[str, SinkState | None]) -> list[str]:
    """The order a multi-partition run catches its partitions up: those left in ``BEFORE``
    (a run died mid-step) first, then the rest; each group in key order."""
    ordered = sorted(keys)
    before = [k for k in ordered if (s := states.get(k)) is not None and s.phase is Phase.BEFORE]
    return before + [k for k in ordered if k not in set(before)]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------- Hudi


def hudi_blocked(busy: Collection[str], table: str) -> str | None:
    """Why no Hudi run may be asked for now (a run writing the table), else None."""
    return f"a run writing {table} is queued or running" if busy else None


def _hudi_candidates(
    topic: str, ends: Mapping[int, int], known: Collection[str]
) -> Iterator[tuple[TopicPartition, int, str]]:
    for p, end in sorted(ends.items()):
        tp = TopicPartition(topic, p)
        key = partition_key(tp)
        if key in known:
            yield tp, end, key


def hudi_needs_log_starts(
    topic: str,
    ends: Mapping[int, int],
    checkpoint: Mapping[TopicPartition, int],
    known: Collection[str],
    reset: Reset,
) -> bool:
    """Whether :func:`plan_hudi` needs ``log_starts`` (one Kafka request)."""
    return any(
        needs_log_start(checkpoint_state(checkpoint.get(tp)), reset)
        for tp, _, _ in _hudi_candidates(topic, ends, known)
    )


def plan_hudi(
    sink: str,
    table: str,
    topic: str,
    *,
    ends: Mapping[int, int],
    ordered_keys: Sequence[str],
    checkpoint: Mapping[TopicPartition, int],
    busy: Collection[str],
    failures: Mapping[tuple[str, str], Failures],
    max_attempts: int,
    reset: Reset,
    log_starts: Mapping[int, int] | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
    now: float | None = None,
) -> Plan:
    """ONE run (one Hudi commit) over every lagging partition of ``topic``, or a skip reason.

    ``ordered_keys`` are the dynamic partitions in the order they were added: the run covers
    the key range from the first to the last lagging one (partitions in between that are caught
    up are read as empty ranges, harmless). ``checkpoint`` is the table's position (the copy
    the asset records; it can only lag behind the table, never run ahead of it).
    """
    blocked = hudi_blocked(busy, table)
    if blocked:
        return Plan(skip_reason=blocked)
    lows = log_starts or {}
    known = set(ordered_keys)
    lagging: list[str] = []
    for tp, end, key in _hudi_candidates(topic, ends, known):
        state = checkpoint_state(checkpoint.get(tp))
        if standing(state, reset, end=end, log_start=lows.get(tp.partition)).lagging:
            lagging.append(key)
    if not lagging:
        return Plan(skip_reason="the Hudi table is caught up")
    order = {key: i for i, key in reversed(list(enumerate(ordered_keys)))}
    first, last = min(lagging, key=order.__getitem__), max(lagging, key=order.__getitem__)
    state = ",".join(f"{p}:{checkpoint.get(TopicPartition(topic, p), '-')}" for p in ends)
    wanted = ",".join(str(e) for _, e in sorted(ends.items()))
    # the checkpoint can be long (one entry per partition): the tag holds a digest of it
    start = "checkpoint:" + hashlib.sha256(state.encode()).hexdigest()[:16]
    failed = failures.get((ANY_PARTITION, start))
    verdict = judge(
        f"Hudi table {table}",
        start,
        failed,
        max_attempts=max_attempts,
        backoff=backoff,
        now=now,
        shown_start=f"checkpoint {state}",
    )
    given_up: list[str] = []
    waiting: list[str] = []
    if _stopped(verdict, given_up, waiting):
        return _plan((), given_up, "", waiting)
    tags = {
        SINK_TAG: sink,
        HUDI_TABLE_TAG: table,
        RANGE_START_TAG: first,
        RANGE_END_TAG: last,
        START_STATE_TAG: start,
    }
    run = PlannedRun(run_key=f"{sink}:{state}:{wanted}{_retry_suffix(failed)}", tags=tags)
    return Plan(runs=(run,))
