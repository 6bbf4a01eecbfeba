"""Which offset ranges one Hudi transaction reads: a pure rule, Kafka's offsets passed in.

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

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.errors import LogChanged
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.positions import Reset, check_same_log, checkpoint_state, start_offset

__all__ = ["PlanLogChanged", "TransactionRanges", "TransactionRefused", "plan_ranges"]


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
