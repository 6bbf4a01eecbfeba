"""Where a sink starts and stands on one topic-partition: one rule for every caller. Pure (the
log start is passed in, asked only where :func:`needs_log_start` says).

A position is the keeper record's state (ClickHouse; ``AFTER [s, e)``: all below ``e`` written;
``BEFORE [s, e)``: ``[s, e)`` in flight, re-read exactly first) or a Hudi checkpoint's next
offset, read as the ``AFTER`` state it amounts to (:func:`checkpoint_state`).

With nothing stored, the reset policy: ``earliest`` is the log start; ``latest`` the end when
first seen, *pinned* by the first run (an ``AFTER [end, end)`` record, a commit carrying it),
else each run would start at the then-latest offset and skip what came between. So under
``latest`` a partition with nothing stored always has work.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.errors import LogChanged
from eos_pipeline.core.keeper import KeeperRecord
from eos_pipeline.core.offsets import OffsetRange

Reset = Literal["earliest", "latest"]
#: The phase of a partition with no stored position.
NEW = "new"


def sink_state(record: KeeperRecord | None) -> SinkState | None:
    """None for no record, or one that only holds the epoch of the writer that took the partition:
    nothing stored either way."""
    if record is None or not record.has_state:
        return None
    assert record.range_start is not None and record.range_end is not None
    return SinkState(OffsetRange(record.range_start, record.range_end), Phase(record.phase))


def checkpoint_state(offset: int | None) -> SinkState | None:
    return None if offset is None else SinkState(OffsetRange(offset, offset), Phase.AFTER)


def committed(state: SinkState | None) -> int | None:
    """The next offset the sink writes, all below it committed (in ``BEFORE``: the start of the
    range in flight, whose rows are not confirmed)."""
    if state is None:
        return None
    return state.range.start if state.phase is Phase.BEFORE else state.range.end


def needs_log_start(state: SinkState | None, reset: Reset) -> bool:
    """Whether :func:`standing` needs Kafka's log start (asked only then: a request each)."""
    return state is None and reset == "earliest"


def start_offset(state: SinkState | None, reset: Reset, *, end: int, log_start: int | None) -> int:
    """The stored position, else the reset policy's (``latest`` is pinned at ``end``)."""
    stored = committed(state)
    if stored is not None:
        return stored
    if reset == "latest":
        return end
    if reset != "earliest":
        raise ValueError(f"reset must be 'earliest' or 'latest', got {reset!r}")
    if log_start is None:
        raise ValueError("nothing is stored and reset is 'earliest': the log start is needed")
    return log_start


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a sink stands on one partition against Kafka's end offset: ``start``, where a run
    reads next; ``position``, the stored range's end (``new``: where the first run starts);
    ``lagging``: records below the end, a ``BEFORE`` range to resolve, or a start to pin."""

    phase: str
    start: int
    position: int
    lagging: bool

    @property
    def is_new(self) -> bool:
        return self.phase == NEW

    @property
    def recovering(self) -> bool:
        """A run died mid-step (``BEFORE``): the next run re-reads that range first."""
        return self.phase == Phase.BEFORE.value


def standing(state: SinkState | None, reset: Reset, *, end: int, log_start: int | None) -> Standing:
    """``state``: :func:`sink_state` of the keeper, or :func:`checkpoint_state` of a Hudi commit."""
    start = start_offset(state, reset, end=end, log_start=log_start)
    if state is None:
        return Standing(NEW, start, start, lagging=reset == "latest" or start < end)
    before = state.phase is Phase.BEFORE
    position = state.range.end
    return Standing(state.phase.value, start, position, lagging=before or position < end)


def lag(position: int, end: int) -> int:
    return max(0, end - position)


def committed_low(log_start: int, reset: Reset, seen: Iterable[int], position: int) -> int:
    """Where the proof's committed range starts: under ``latest`` it is not recorded, so the first
    offset ``seen`` below ``position`` stands in (a gap at the very start is not seen)."""
    if reset != "latest":
        return log_start
    below = [o for o in seen if o < position]
    return max(log_start, min(below)) if below else position


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition as the topic's observation shows it: offsets held, end, and lag per sink."""

    partition: int
    held: int
    end: int
    lags: dict[str, int]


def partition_lags(
    ends: dict[int, int],
    starts: dict[int, int],
    positions: dict[str, dict[int, int | None]],
    reset: Reset,
) -> list[PartitionLag]:
    """``positions``: sink -> partition -> offset; nothing stored lags by the whole log under
    ``earliest``, by nothing under ``latest``."""
    rows = []
    for p in sorted(ends):
        lags = {}
        for sink, stored in positions.items():
            offset = stored.get(p)
            if offset is None:
                offset = starts.get(p, 0) if reset == "earliest" else ends[p]
            lags[sink] = lag(offset, ends[p])
        rows.append(PartitionLag(p, max(0, ends[p] - starts.get(p, 0)), ends[p], lags))
    return rows


def check_same_log(
    where: str,
    *,
    topic: str,
    stored_topic_id: str | None = None,
    topic_id: str | None = None,
    stored_partitions: Iterable[Any] = (),
    present: Container[Any] = (),
    position: int | None = None,
    log_end: int | None = None,
    log_start: int | None = None,
    error: type[LogChanged] = LogChanged,
) -> None:
    """Refuse a stored position that is not from the log Kafka holds now: the one rule every sink,
    plan and replay applies. ``error`` (a :class:`LogChanged`) names the first fact that shows it;
    each fact is checked when given, since going on would skip records or mix two logs:

    1. ``topic-recreated``: a new topic id (``stored_topic_id`` vs ``topic_id``; none stored
       passes): once the new log outgrows the position, offsets cannot show it;
    2. ``partition-gone``: a stored partition not ``present`` now (recreated smaller);
    3. ``log-behind``: the log ends (``log_end``) before ``position``: another log, or truncated;
    4. ``retention``: ``position`` is below ``log_start``: records were deleted unread.
    """
    if stored_topic_id is not None and topic_id is not None and stored_topic_id != topic_id:
        raise error(
            f"{where}: the stored position was read from topic id {stored_topic_id}, but topic "
            f"{topic!r} now has id {topic_id}: the topic was deleted and recreated. Nothing was "
            "read or written; point the pipeline at a new table, or reset the position "
            "deliberately",
            "topic-recreated",
        )
    gone = sorted(p for p in stored_partitions if p not in present)
    if gone:
        raise error(
            f"{where}: the stored position names partition(s) {gone}, which topic {topic!r} "
            "does not have now: the topic was deleted and recreated with fewer partitions. "
            "Nothing was read or written; point the pipeline at a new table",
            "partition-gone",
        )
    if position is not None and log_end is not None and position > log_end:
        raise error(
            f"{where}: read up to offset {position} but Kafka's log ends at {log_end}: the "
            "topic was deleted and recreated (or truncated). Nothing was read or written; the "
            "offsets of the new log would not match the stored ones. Point the pipeline at a "
            "new table, or reset the position deliberately",
            "log-behind",
        )
    if position is not None and log_start is not None and position < log_start:
        raise error(
            f"{where}: offsets [{position}, {log_start}) were deleted from Kafka (retention or "
            "compaction) before they were read. Nothing was read or written. Raise the topic's "
            "retention, or accept the loss explicitly by moving the position",
            "retention",
        )
