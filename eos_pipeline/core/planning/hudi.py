"""Hudi runs: one table, one writer, so one key-range run over every lagging partition; and
which offset ranges that run's transaction reads (:func:`plan_ranges`), a pure rule with Kafka's
offsets passed in.

The table's checkpoint (its latest completed commit) holds the next offset of every partition it
has seen; a partition it has not seen starts from the reset policy (the one rule of
:mod:`eos_pipeline.core.positions`). Each chosen partition gets ``[start, min(end, start + batch
limit))``, capped further by ``until`` where a caller fixed the ends. Anything that would skip or
repeat records stops the plan with :class:`TransactionRefused`, saying what happened and what to
do: a checkpoint of another topic, partitions that disappeared (a topic recreated smaller), a
checkpoint past the log's end (recreated or truncated), offsets deleted before the table read
them (retention).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.errors import LogChanged
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.partition_keys import partition_key
from eos_pipeline.core.planning.follow import FOLLOW_TAG
from eos_pipeline.core.planning.runs import (
    ANY_PARTITION,
    HUDI_TABLE_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    SINK_TAG,
    START_STATE_TAG,
    Plan,
    PlannedRun,
    plan_of,
    retry_suffix,
    stopped,
)
from eos_pipeline.core.positions import (
    Reset,
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
    decide_retry,
)


class TransactionRefused(ValueError):
    """The next transaction cannot be planned without losing or repeating records."""


class PlanLogChanged(LogChanged, TransactionRefused):
    """The table's checkpoint is not from the log Kafka holds now."""


@dataclass(frozen=True, slots=True)
class TransactionRanges:
    """One transaction's positions: before it, the ranges it reads, and after its commit."""

    #: Position of every partition before (stored, or from the reset policy).
    start: Checkpoint
    #: The partitions of this transaction.
    ranges: dict[TopicPartition, OffsetRange]
    #: Position of every partition after the commit (those not read carried forward).
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
    """Plan one transaction of ``topic`` into ``table`` (named in the errors).

    ``ends``/``lows``: Kafka's last stable offset and log start per partition, fixed now;
    ``partitions`` default to all of the topic's.
    """
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
    """Why no Hudi run may be asked for now (a run writing the table), else None.

    ``following``: the run in flight follows the stream (it writes what arrives).
    """
    if not busy:
        return None
    if following:
        return f"a following run is writing {table}: it writes what arrives"
    return f"a run writing {table} is queued or running"


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
    follow: bool = False,
    following: bool = False,
) -> Plan:
    """ONE run (one Hudi commit) over every lagging partition of ``topic``, or a skip reason.

    ``ordered_keys`` are the dynamic partitions in the order they were added: the run covers
    the key range from the first to the last lagging one (partitions in between that are caught
    up are read as empty ranges, harmless). ``checkpoint`` is the table's position (the copy
    the asset records; it can only lag behind the table, never run ahead of it).

    ``follow``: the run asked for goes on committing new records once caught up
    (:mod:`eos_pipeline.core.planning.follow`), so it covers every known partition of the
    topic, not only the lagging ones; ``following``: such a run is in flight (the skip reason
    says so).
    """
    blocked = hudi_blocked(busy, table, following)
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
    covered = [key for _, _, key in _hudi_candidates(topic, ends, known)] if follow else lagging
    first, last = min(covered, key=order.__getitem__), max(covered, key=order.__getitem__)
    state = ",".join(f"{p}:{checkpoint.get(TopicPartition(topic, p), '-')}" for p in ends)
    wanted = ",".join(str(e) for _, e in sorted(ends.items()))
    # the checkpoint can be long (one entry per partition): the tag holds a digest of it
    start = "checkpoint:" + hashlib.sha256(state.encode()).hexdigest()[:16]
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


__all__ = [
    "PlanLogChanged",
    "TransactionRanges",
    "TransactionRefused",
    "plan_ranges",
]
