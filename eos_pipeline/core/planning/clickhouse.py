"""ClickHouse runs: one per lagging partition on a server, one key-range run on chDB."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.partition_keys import partition_key
from eos_pipeline.core.planning.follow import FOLLOW_TAG
from eos_pipeline.core.planning.runs import (
    ANY_PARTITION,
    CHDB_PATH_TAG,
    ENDS_TAG,
    MAX_RUNS_PER_TICK,
    NORMAL_PRIORITY,
    PRIORITY_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RECOVERY_PRIORITY,
    SINK_PARTITION_TAG,
    SINK_TAG,
    START_STATE_TAG,
    Plan,
    PlannedRun,
    digest,
    plan_of,
    retry_suffix,
    stopped,
)
from eos_pipeline.core.planning.stuck import set_aside
from eos_pipeline.core.positions import (
    Reset,
    Standing,
    needs_log_start,
    standing,
)
from eos_pipeline.core.retries import (
    DEFAULT_BACKOFF,
    Backoff,
    Failures,
    decide_retry,
)

# ------------------------------------------------------------------------------- ClickHouse

CAUGHT_UP = "every partition is caught up (or has a run in flight)"


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
    running_ends: Mapping[str, int] | None = None,
    follow: bool = False,
    following: bool = False,
    stuck: Mapping[str, tuple[str, str]] | None = None,
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

    ``follow``: the runs asked for go on writing new records once caught up
    (:mod:`eos_pipeline.core.planning.follow`); ``following``: such a run of the sink is in
    flight on the chDB path, where it covers every partition. ``stuck``: see
    :func:`clickhouse_range_run` (single-partition runs have their own failure counts).
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
    running_ends: Mapping[str, int] | None = None,
    follow: bool = False,
    following: bool = False,
    stuck: Mapping[str, tuple[str, str]] | None = None,
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
    starts as soon as the path is free rather than a sensor tick later; but only once some
    lagging partition's end moved beyond what the running run was asked for (``running_ends``,
    from its :data:`ENDS_TAG`): it reads each partition to the end it finds, so a run queued for
    those same records would start only to find nothing to do. Partitions with a
    single-partition run of their own in flight (launched by hand) are left to it.

    Failed range runs are counted under :data:`ANY_PARTITION` and a digest of the lagging
    partitions' states, like Hudi's table runs. A run planned while another one ran carries
    the states seen then; if it fails, the next plan starts from the real states and counts
    afresh: at most one extra attempt, never a skipped offset (a run always starts from the
    keeper's position).

    A following run (``follow``) covers every known partition, not only the lagging ones: it
    goes on writing whatever arrives anywhere, and while it is in flight (``following``)
    nothing else is asked for.

    ``stuck``: partitions an earlier range run set aside because they need a person
    (:mod:`eos_pipeline.core.planning.stuck`): left out, with a warning, while their state is
    the one they failed from, so the healthy partitions go on.
    """
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
        kept = []
        for item in lagging:
            line = set_aside(item[0], states.get(item[0]), stuck)
            if line is None:
                kept.append(item)
            else:
                set_aside_lines.append(line)
        lagging = kept
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
    """The order a multi-partition run catches its partitions up: those left in ``BEFORE``
    (a run died mid-step) first, then the rest; each group in key order."""
    ordered = sorted(keys)
    before = [k for k in ordered if (s := states.get(k)) is not None and s.phase is Phase.BEFORE]
    return before + [k for k in ordered if k not in set(before)]
