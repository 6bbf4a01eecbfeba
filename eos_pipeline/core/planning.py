"""Which runs the sensors ask for, and what a run reads: pure, from plain state to plain run
requests (:mod:`eos_pipeline.components.sensors` reads the state and makes the Dagster objects).

* **Keys.** One Dagster partition per Kafka partition, ``<topic>__p0007``. Run keys hold the ends
  asked for and the sink's position, so a tick with nothing new launches nothing.
* **Failures.** A failed run that did not move the position would ask for the same run key, which
  Dagster never launches twice; so failures are counted per partition and start state
  (:data:`START_STATE_TAG`) and the count goes into the key. :mod:`eos_pipeline.core.retries`
  decides whether to retry (after a backoff), give up, or stop for a person.
* **ClickHouse**: on a server one run per lagging partition, ``BEFORE`` ones first; on a chDB path
  (one process at a time) one key-range run, from which a partition that needs a person is set
  aside (:data:`NEEDS_PERSON_TAG`) while it stays in the state it failed from.
* **Hudi**: one table, one writer: one key-range run, one commit. Exactly once rests on the
  checkpoint and the fence, not on upsert, so ``auto`` lets a large transaction ``bulk_insert``.
* **Following runs** keep polling and writing once caught up, until idle, too long, or another run
  needs the table or path: a queue wait and a process start saved per trickle of records.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.errors import LogChanged
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.positions import (
    Reset,
    Standing,
    check_same_log,
    checkpoint_state,
    needs_log_start,
    standing,
    start_offset,
)
from eos_pipeline.core.retries import (
    DEFAULT_BACKOFF,
    Backoff,
    Failures,
    RetryDecision,
    decide_retry,
)


def partition_key(tp: TopicPartition) -> str:
    """No characters Dagster's UI or CLI treat specially; sorts in partition order."""
    return f"{tp.topic}__p{tp.partition:04d}"


def parse_partition_key(key: str) -> TopicPartition:
    topic, _, number = key.rpartition("__p")
    if not topic or not number.isdigit():
        raise ValueError(f"partition key {key!r} is not of the form <topic>__p<NNNN>")
    return TopicPartition(topic, int(number))


def keys_for(topic: str, count: int) -> list[str]:
    return [partition_key(TopicPartition(topic, p)) for p in range(count)]


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Partition keys to add, and to remove (added by hand, a typo), or why none."""

    keys: tuple[str, ...] = ()
    skip_reason: str | None = None
    remove: tuple[str, ...] = ()
    remove_reason: str | None = None


#: Most valid keys a removal message lists one by one (more are summarised per topic).
MAX_KEYS_NAMED = 20


def _valid_keys_text(counts: Mapping[str, int]) -> str:
    keys = [k for topic, n in counts.items() for k in keys_for(topic, n)]
    if len(keys) <= MAX_KEYS_NAMED:
        return ", ".join(keys) if keys else "none"
    return "; ".join(
        f"{keys_for(topic, n)[0]} .. {keys_for(topic, n)[-1]} ({n} keys)"
        for topic, n in counts.items()
        if n
    )


def stray_keys(
    existing: Iterable[str], counts: Mapping[str, int], missing_topics: Sequence[str] = ()
) -> list[str]:
    """Keys of ``existing`` naming no partition the topics have; a topic that could not be read
    (``missing_topics``) keeps its keys: only what Kafka said is judged."""
    stray = []
    for key in existing:
        try:
            tp = parse_partition_key(key)
        except ValueError:
            stray.append(key)
            continue
        if tp.topic in missing_topics and partition_key(tp) == key:
            continue
        if partition_key(tp) != key or tp.partition >= counts.get(tp.topic, 0):
            stray.append(key)
    return sorted(stray)


def plan_new_partitions(
    existing: Collection[str], counts: Mapping[str, int], missing_topics: Sequence[str] = ()
) -> NewPartitions:
    """The keys of ``counts`` (topic -> partition count) to add, and :func:`stray_keys` to remove,
    naming the valid ones."""
    wanted = [k for topic, n in counts.items() for k in keys_for(topic, n) if k not in existing]
    remove = tuple(stray_keys(existing, counts, missing_topics))
    reason = None
    if remove:
        topics = [*counts, *missing_topics]
        reason = (
            f"removing partition key(s) {list(remove)}: they match no Kafka partition of "
            f"topic(s) {topics}. Valid keys: {_valid_keys_text(counts)}"
        )
    if wanted or remove:
        return NewPartitions(tuple(wanted), remove=remove, remove_reason=reason)
    note = f"; topics not found: {list(missing_topics)}" if missing_topics else ""
    return NewPartitions(skip_reason=f"{len(existing)} partitions, none new{note}")


#: An operation Hudi runs for one data commit.
WriteOperation = Literal["upsert", "insert", "bulk_insert"]
#: What a pipeline configures: one of those, or ``auto`` (chosen per transaction).
ConfiguredOperation = Literal["upsert", "insert", "bulk_insert", "auto"]

#: ``auto``'s operation below the threshold: upsert keeps merging records into small files.
AUTO_STEADY_OPERATION: Final[WriteOperation] = "upsert"
#: ``auto``'s threshold: from this many planned records on, a transaction bulk-inserts. At
#: 100,000 records bulk_insert used half of upsert's CPU (benchmarks/README.md, issue 14); below
#: some ten thousand records a run's fixed costs dominate either way, and a bulk insert adds a
#: file per Kafka partition that later upserts must fill. A judgement, not a measured crossover.
DEFAULT_BULK_INSERT_MIN_RECORDS: Final = 20_000


def planned_records(ranges: Iterable[OffsetRange]) -> int:
    """An upper bound on a plan's records, known before reading."""
    return sum(r.width for r in ranges)


def transaction_operation(
    configured: ConfiguredOperation,
    planned: int,
    *,
    bulk_insert_min_records: int = DEFAULT_BULK_INSERT_MIN_RECORDS,
    unique_keys: bool = True,
) -> WriteOperation:
    """``configured``, or under ``auto`` ``bulk_insert`` for a large transaction when the keys are
    the source coordinates (``unique_keys``): a business key always upserts."""
    if bulk_insert_min_records < 1:
        raise ValueError(f"bulk_insert_min_records must be at least 1: {bulk_insert_min_records}")
    if planned < 0:
        raise ValueError(f"planned records cannot be negative: {planned}")
    if configured == "auto":
        large = unique_keys and planned >= bulk_insert_min_records
        return "bulk_insert" if large else AUTO_STEADY_OPERATION
    if configured not in ("upsert", "insert", "bulk_insert"):
        raise ValueError(f"operation must be upsert, insert, bulk_insert or auto: {configured!r}")
    return configured


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
    """A run as the planner sees it; ``ended_at`` (epoch seconds): the backoff counts from there."""

    run_id: str
    tags: Mapping[str, str] = field(default_factory=dict)
    ended_at: float | None = None


def asked_ends(runs: Iterable[RunInfo]) -> dict[str, int] | None:
    """The highest end per partition key running range runs were asked for (None: none says)."""
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
    """Failed runs (newest first) counted per ``(partition key or "*", start state)``; a run
    without a start state was launched by hand and does not count."""
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
    return f":retry{failed.count}" if failed else ""


# ------------------------------------------------------------------------------- plans


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """A single-partition run (``partition_key``) or a range run (tags)."""

    run_key: str
    tags: dict[str, str]
    partition_key: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """What one sensor evaluation asks for, or why nothing; ``given_up`` and ``waiting`` (backing
    off) have a line per partition or table, for the log."""

    runs: tuple[PlannedRun, ...] = ()
    given_up: tuple[str, ...] = ()
    skip_reason: str | None = None
    waiting: tuple[str, ...] = ()


def plan_of(
    runs: Sequence[PlannedRun], given_up: Sequence[str], idle: str, waiting: Sequence[str] = ()
) -> Plan:
    if runs:
        return Plan(tuple(runs), tuple(given_up), waiting=tuple(waiting))
    said = [*given_up, *waiting]
    return Plan((), tuple(given_up), " ".join(said) if said else idle, tuple(waiting))


def stopped(verdict: RetryDecision, given_up: list[str], waiting: list[str]) -> bool:
    """Whether no run is asked for, noting why (backing off, or given up)."""
    if verdict.run:
        return False
    (waiting if verdict.waiting else given_up).append(str(verdict.message))
    return True


def digest(text: str) -> str:
    """A short stable hash for run keys (the same state gives the same key)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: Set on runs the lag sensor asks to follow: runs launched by hand (the UI, backfills) end as
#: soon as they have caught up.
FOLLOW_TAG = "eos_pipeline/follow"


@dataclass(frozen=True, slots=True)
class FollowPolicy:
    """How long a following run goes on (``idle_seconds`` 0: runs do not follow), and the pause
    between two looks at Kafka's ends when nothing new arrived."""

    idle_seconds: float = 0.0
    max_seconds: float = 300.0
    poll_seconds: float = 0.2

    @property
    def enabled(self) -> bool:
        return self.idle_seconds > 0


def stop_reason(
    policy: FollowPolicy, *, started: float, last_data: float, now: float, others_waiting: bool
) -> str | None:
    """Why a following run ends now, or None to keep following."""
    if others_waiting:
        return "another run waits for the table: handing it over"
    if now - started >= policy.max_seconds:
        return f"followed for {policy.max_seconds:g} s (the most a run follows)"
    if now - last_data >= policy.idle_seconds:
        return f"no new records for {policy.idle_seconds:g} s"
    return None


def yields_to(
    sink: str,
    held: str | None,
    queued: Iterable[Mapping[str, str]],
    partition: str | None = None,
    *,
    held_tag: str = CHDB_PATH_TAG,
) -> bool:
    """Whether a ``queued`` run may need what a following run holds alone (``held`` under
    ``held_tag``, or on a server its ``partition``); a run launched by hand may need anything."""
    for tags in queued:
        other = tags.get(SINK_TAG)
        if held is None:
            if partition is not None and tags.get(PARTITION_TAG) == partition:
                return True
            if other is None and RANGE_START_TAG in tags:
                return True
            continue
        if other is None or other == sink:
            return True
        if tags.get(held_tag) == held:
            return True
    return False


def follows(policy: FollowPolicy, run_tags: Mapping[str, str], clustered: bool) -> bool:
    """Only sensor runs tagged to follow, never on a clustered pipeline (whose runs end once
    caught up, so a switch finds none in flight)."""
    return policy.enabled and run_tags.get(FOLLOW_TAG) == "true" and not clustered


def pending(ends: Mapping[str, int], positions: Mapping[str, int]) -> list[str]:
    return sorted(key for key, end in ends.items() if end > positions.get(key, end))


#: Set by a range run on itself: the partitions it set aside (see the module docstring).
NEEDS_PERSON_TAG = "eos_pipeline/needs_person"
#: Longest cause kept per partition (Dagster shows tags in full in the run's page).
_CAUSE_CHARS = 300


def state_label(state: SinkState | None) -> str:
    if state is None:
        return "none"
    return f"{state.phase.value}:{state.range.start}-{state.range.end}"


def encode(stuck: Mapping[str, tuple[str, str]]) -> str:
    """The tag value of ``{key: (state label, cause)}``."""
    return json.dumps(
        {k: [label, cause[:_CAUSE_CHARS]] for k, (label, cause) in sorted(stuck.items())},
        separators=(",", ":"),
    )


def decode(value: str) -> dict[str, tuple[str, str]]:
    """The inverse of :func:`encode`; a malformed value (edited by hand) sets nothing aside."""
    try:
        raw = json.loads(value)
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {
        str(k): (str(v[0]), str(v[1]))
        for k, v in raw.items()
        if isinstance(v, list) and len(v) == 2
    }


def stuck_partitions(failed_newest_first: Iterable[RunInfo]) -> dict[str, tuple[str, str]]:
    """From failed runs' tags; the newest run's word counts."""
    out: dict[str, tuple[str, str]] = {}
    for run in failed_newest_first:
        value = run.tags.get(NEEDS_PERSON_TAG)
        if value:
            for key, entry in decode(value).items():
                out.setdefault(key, entry)
    return out


def set_aside(
    key: str, state: SinkState | None, stuck: Mapping[str, tuple[str, str]]
) -> str | None:
    """A warning if ``key`` is still stuck in the state it failed from, else None."""
    entry = stuck.get(key)
    if entry is None or entry[0] != state_label(state):
        return None
    return (
        f"{key} is left out of the runs until a person acts: it failed from {entry[0]} with "
        f"{entry[1]} (fix the cause, then launch a run of {key} by hand)"
    )


CAUGHT_UP = "every partition is caught up (or has a run in flight)"


@dataclass(frozen=True, slots=True)
class TopicState:
    """One topic as the ClickHouse sensor reads it. ``records``: the position of each partition
    with a keeper record (None: no state yet); ``log_starts`` only where
    :func:`clickhouse_needs_log_starts` says so."""

    topic: str
    ends: Mapping[int, int]
    records: Mapping[int, SinkState | None] = field(default_factory=dict)
    log_starts: Mapping[int, int] | None = None


def _candidates(
    topic: str, ends: Mapping[int, int], known: Collection[str], busy: Collection[str] = ()
) -> Iterator[tuple[int, int, str]]:
    """``(partition, end, key)`` of each partition with a known key and no run in flight."""
    for p, end in sorted(ends.items()):
        key = partition_key(TopicPartition(topic, p))
        if key in known and key not in busy:
            yield p, end, key


def clickhouse_needs_log_starts(
    topic: TopicState, known: Collection[str], busy: Collection[str], reset: Reset
) -> bool:
    """Whether :func:`plan_clickhouse` needs ``topic.log_starts`` (a Kafka request)."""
    return any(
        needs_log_start(topic.records.get(p), reset)
        for p, _, _ in _candidates(topic.topic, topic.ends, known, busy)
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
    running_ends: Mapping[str, int] | None = None,
    follow: bool = False,
    following: bool = False,
    stuck: Mapping[str, tuple[str, str]] | None = None,
    max_runs: int = MAX_RUNS_PER_TICK,
    backoff: Backoff = DEFAULT_BACKOFF,
    now: float | None = None,
) -> Plan:
    """One run per lagging partition, ``BEFORE`` ones first, at most ``max_runs``; on a chDB path
    (runs serialized anyway) :func:`clickhouse_range_run`. Under ``reset: latest`` a partition
    taken by a run pins its start with its first write: left alone."""
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
            running_ends=running_ends,
            follow=follow,
            following=following,
            stuck=stuck,
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
        verdict = decide_retry(
            f"{key} ({sink})", start, failed, max_attempts=max_attempts, backoff=backoff, now=now
        )
        if stopped(verdict, given_up, waiting):
            continue
        tags = {
            SINK_TAG: sink,
            SINK_PARTITION_TAG: f"{sink}.{key}",
            PRIORITY_TAG: RECOVERY_PRIORITY if where.recovering else NORMAL_PRIORITY,
            START_STATE_TAG: start,
        }
        if chdb_path:
            tags[CHDB_PATH_TAG] = chdb_path
        if follow:
            tags[FOLLOW_TAG] = "true"
        run = PlannedRun(
            run_key=f"{sink}:{key}:{start}:{end}{retry_suffix(failed)}",
            tags=tags,
            partition_key=key,
        )
        (recover if where.recovering else behind).append(run)
    runs = (recover + behind)[:max_runs]
    return plan_of(runs, given_up, CAUGHT_UP, waiting)


def _clickhouse_lagging(
    topics: Iterable[TopicState], known: Collection[str], busy: Collection[str], reset: Reset
) -> Iterator[tuple[str, int, Standing]]:
    for topic in topics:
        lows = topic.log_starts or {}
        for p, end, key in _candidates(topic.topic, topic.ends, known, busy):
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
    running_ends: Mapping[str, int] | None = None,
    follow: bool = False,
    following: bool = False,
    stuck: Mapping[str, tuple[str, str]] | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
    now: float | None = None,
) -> Plan:
    """ONE run over the key range of every lagging partition of a chDB-backed table (a caught-up
    one between costs a keeper read, less than a process start), or a skip reason. The path takes
    one process at a time: nothing is asked while a run is ``queued`` (it reads what arrived), and
    while one runs only once some end moved past its ``running_ends``, to queue behind it."""
    if queued:
        return Plan(skip_reason=f"a run of {sink} is queued: it reads what arrived meanwhile")
    if following:
        return Plan(skip_reason=f"a run of {sink} follows the stream: it writes what arrives")
    order = {key: i for i, key in reversed(list(enumerate(ordered_keys)))}
    topics = list(topics)
    lagging = list(_clickhouse_lagging(topics, order, busy, reset))
    set_aside_lines: list[str] = []
    if stuck:
        states = {
            partition_key(TopicPartition(t.topic, p)): state
            for t in topics
            for p, state in t.records.items()
        }
        lines = {key: set_aside(key, states.get(key), stuck) for key, _, _ in lagging}
        set_aside_lines = [line for line in lines.values() if line is not None]
        lagging = [item for item in lagging if lines[item[0]] is None]
    if not lagging:
        return plan_of((), set_aside_lines, CAUGHT_UP)
    if running_ends is not None and all(
        end <= running_ends.get(key, -1) for key, end, _ in lagging
    ):
        return plan_of(
            (), set_aside_lines, f"a run of {sink} is writing up to these ends: nothing newer"
        )
    lagging.sort(key=lambda item: order[item[0]])
    state = ",".join(f"{key}={where.phase}:{where.position}" for key, _, where in lagging)
    wanted = ",".join(f"{key}={end}" for key, end, _ in lagging)
    start = "range:" + digest(state)
    failed = failures.get((ANY_PARTITION, start))
    verdict = decide_retry(
        f"{sink} partitions {state}",
        start,
        failed,
        max_attempts=max_attempts,
        backoff=backoff,
        now=now,
    )
    given_up: list[str] = list(set_aside_lines)
    waiting: list[str] = []
    if stopped(verdict, given_up, waiting):
        return plan_of((), given_up, "", waiting)
    recovering = any(where.recovering for _, _, where in lagging)
    first, last = lagging[0][0], lagging[-1][0]
    if follow:
        first, last = ordered_keys[0], ordered_keys[-1]
    tags = {
        SINK_TAG: sink,
        CHDB_PATH_TAG: chdb_path,
        RANGE_START_TAG: first,
        RANGE_END_TAG: last,
        PRIORITY_TAG: RECOVERY_PRIORITY if recovering else NORMAL_PRIORITY,
        START_STATE_TAG: start,
        ENDS_TAG: wanted,
    }
    if follow:
        tags[FOLLOW_TAG] = "true"
    run_key = f"{sink}:{lagging[0][0]}..{lagging[-1][0]}:{digest(state + '/' + wanted)}"
    return Plan(runs=(PlannedRun(run_key + retry_suffix(failed), tags),), given_up=tuple(given_up))


def recovery_order(keys: Iterable[str], states: Mapping[str, SinkState | None]) -> list[str]:
    """Those left in ``BEFORE`` (a run died mid-step) first, each group in key order."""
    ordered = sorted(keys)
    before = [k for k in ordered if (s := states.get(k)) is not None and s.phase is Phase.BEFORE]
    return before + [k for k in ordered if k not in set(before)]


class TransactionRefused(ValueError):
    """The next transaction cannot be planned without losing or repeating records."""


class PlanLogChanged(LogChanged, TransactionRefused):
    """The table's checkpoint is not from the log Kafka holds now."""


@dataclass(frozen=True, slots=True)
class TransactionRanges:
    """Every partition's position before a transaction, the ranges it reads, and every partition's
    position after its commit."""

    start: Checkpoint
    ranges: dict[TopicPartition, OffsetRange]
    checkpoint: Checkpoint


def plan_ranges(
    table: str,
    topic: str,
    stored: Checkpoint,
    ends: Mapping[int, int],
    lows: Mapping[int, int],
    *,
    reset: Reset,
    max_records: int,
    partitions: Collection[int] | None = None,
    until: Mapping[int, int] | None = None,
) -> TransactionRanges:
    """``[start, min(end, start + max_records))`` per partition from the table's checkpoint and
    Kafka's ends and log starts; refuses whatever would skip or repeat records."""
    foreign = sorted({tp.topic for tp in stored} - {topic})
    if foreign:
        raise TransactionRefused(
            f"{table}: the table's checkpoint is for topic(s) {foreign}, "
            f"not {topic!r}; one Hudi table follows one topic"
        )
    start: Checkpoint = {}
    for p in sorted(ends):
        tp = TopicPartition(topic, p)
        state = checkpoint_state(stored.get(tp))
        start[tp] = start_offset(state, reset, end=ends[p], log_start=lows.get(p))
    check_same_log(
        table,
        topic=topic,
        stored_partitions=[tp.partition for tp in stored],
        present=ends,
        error=PlanLogChanged,
    )
    chosen = sorted(ends) if partitions is None else sorted(set(partitions))
    unknown = [p for p in chosen if p not in ends]
    if unknown:
        raise TransactionRefused(
            f"partition(s) {unknown} do not exist in topic {topic!r} "
            f"(it has {len(ends)}: 0..{len(ends) - 1})"
        )
    ranges: dict[TopicPartition, OffsetRange] = {}
    for p in chosen:
        tp = TopicPartition(topic, p)
        begin = start[tp]
        check_same_log(
            f"{table}: {tp}",
            topic=topic,
            position=begin,
            log_end=ends[p],
            log_start=lows[p],
            error=PlanLogChanged,
        )
        end = min(ends[p], begin + max_records)
        if until is not None and p in until:
            end = max(begin, min(end, until[p]))
        ranges[tp] = OffsetRange(begin, end)
    checkpoint = dict(start)
    checkpoint.update({tp: r.end for tp, r in ranges.items()})
    return TransactionRanges(start, ranges, checkpoint)


def hudi_blocked(busy: Collection[str], table: str, following: bool = False) -> str | None:
    """Why no Hudi run may be asked for now (a run writing the table), else None."""
    if not busy:
        return None
    if following:
        return f"a following run is writing {table}: it writes what arrives"
    return f"a run writing {table} is queued or running"


def hudi_needs_log_starts(
    topic: str,
    ends: Mapping[int, int],
    checkpoint: Mapping[TopicPartition, int],
    known: Collection[str],
    reset: Reset,
) -> bool:
    """Whether :func:`plan_hudi` needs ``log_starts`` (one Kafka request)."""
    return any(
        needs_log_start(checkpoint_state(checkpoint.get(TopicPartition(topic, p))), reset)
        for p, _, _ in _candidates(topic, ends, known)
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
    follow: bool = False,
    following: bool = False,
) -> Plan:
    """ONE run (one commit) over the key range of every lagging partition, or a skip reason;
    ``checkpoint`` is the asset's copy: it may lag the table, never run ahead."""
    blocked = hudi_blocked(busy, table, following)
    if blocked:
        return Plan(skip_reason=blocked)
    lows = log_starts or {}
    known = set(ordered_keys)
    lagging: list[str] = []
    for p, end, key in _candidates(topic, ends, known):
        state = checkpoint_state(checkpoint.get(TopicPartition(topic, p)))
        if standing(state, reset, end=end, log_start=lows.get(p)).lagging:
            lagging.append(key)
    if not lagging:
        return Plan(skip_reason="the Hudi table is caught up")
    order = {key: i for i, key in reversed(list(enumerate(ordered_keys)))}
    covered = [key for _, _, key in _candidates(topic, ends, known)] if follow else lagging
    first, last = min(covered, key=order.__getitem__), max(covered, key=order.__getitem__)
    state = ",".join(f"{p}:{checkpoint.get(TopicPartition(topic, p), '-')}" for p in ends)
    wanted = ",".join(str(e) for _, e in sorted(ends.items()))
    start = "checkpoint:" + digest(state)  # a long checkpoint: the tag holds its digest
    failed = failures.get((ANY_PARTITION, start))
    verdict = decide_retry(
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
    if stopped(verdict, given_up, waiting):
        return plan_of((), given_up, "", waiting)
    tags = {
        SINK_TAG: sink,
        HUDI_TABLE_TAG: table,
        RANGE_START_TAG: first,
        RANGE_END_TAG: last,
        START_STATE_TAG: start,
    }
    if follow:
        tags[FOLLOW_TAG] = "true"
    run = PlannedRun(run_key=f"{sink}:{state}:{wanted}{retry_suffix(failed)}", tags=tags)
    return Plan(runs=(run,))
