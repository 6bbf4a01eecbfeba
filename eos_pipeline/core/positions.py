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

__all__ = [
    "NEW",
    "PartitionLag",
    "Reset",
    "Standing",
    "check_same_log",
    "checkpoint_state",
    "committed",
    "committed_low",
    "lag",
    "needs_log_start",
    "partition_lags",
    "sink_state",
    "standing",
    "start_offset",
]

Reset = Literal["earliest", "latest"]
#: The phase of a partition with no stored position.
NEW = "new"


def sink_state(record: KeeperRecord | None) -> SinkState | None:
    """The position a keeper record holds; None for no record, or a record without state yet.

    A record can exist only to hold the epoch of the writer that took the partition (see
    :mod:`eos_pipeline.core.keeper`): that is "nothing stored" too.
    """
    if record is None or not record.has_state:
        return None
    assert record.range_start is not None and record.range_end is not None
    return SinkState(OffsetRange(record.range_start, record.range_end), Phase(record.phase))


def checkpoint_state(offset: int | None) -> SinkState | None:
    """A Hudi checkpoint's next offset as a sink state: ``AFTER [offset, offset)``."""
    return None if offset is None else SinkState(OffsetRange(offset, offset), Phase.AFTER)


def committed(state: SinkState | None) -> int | None:
    """The next offset the sink writes; everything below it is committed. None: nothing stored.

    In ``BEFORE`` that is the start of the range in flight: its rows are not confirmed.
    """
    if state is None:
        return None
    return state.range.start if state.phase is Phase.BEFORE else state.range.end


def needs_log_start(state: SinkState | None, reset: Reset) -> bool:
    """Whether :func:`standing` needs Kafka's log start: nothing stored and ``reset: earliest``."""
    return state is None and reset == "earliest"


def start_offset(state: SinkState | None, reset: Reset, *, end: int, log_start: int | None) -> int:
    """Where the next read of a partition starts: the stored position, else the reset policy.

    ``end`` is the offset the run reads up to (a ``latest`` start is pinned there); ``log_start``
    is Kafka's first offset still held, needed only where :func:`needs_log_start` says so.
    """
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
    """Where a sink stands on one partition against Kafka's end offset."""

    #: ``"new"`` (nothing stored), ``"AFTER"`` or ``"BEFORE"``.
    phase: str
    #: The next offset a run reads (in ``BEFORE``: the start of the range to re-read).
    start: int
    #: How far the sink has taken the log: the stored range's end (in ``BEFORE``, the end of
    #: the range in flight), or for ``"new"`` where the first run starts.
    position: int
    #: Whether a run has work to do: records below the end, a ``BEFORE`` range to resolve, or
    #: a ``latest`` start to pin.
    lagging: bool

    @property
    def is_new(self) -> bool:
        return self.phase == NEW

    @property
    def recovering(self) -> bool:
        """A run died mid-step (``BEFORE``): the next run re-reads that range first."""
        return self.phase == Phase.BEFORE.value


def standing(state: SinkState | None, reset: Reset, *, end: int, log_start: int | None) -> Standing:
    """Where a sink stands on a partition whose last stable offset is ``end``.

    ``state`` is the sink's stored position (:func:`sink_state` for the keeper,
    :func:`checkpoint_state` for a Hudi checkpoint); ``log_start`` is needed only where
    :func:`needs_log_start` says so.
    """
    start = start_offset(state, reset, end=end, log_start=log_start)
    if state is None:
        return Standing(NEW, start, start, lagging=reset == "latest" or start < end)
    before = state.phase is Phase.BEFORE
    position = state.range.end
    return Standing(state.phase.value, start, position, lagging=before or position < end)


def lag(position: int, end: int) -> int:
    """Offsets between a sink's position and Kafka's end (never negative)."""
    return max(0, end - position)


def committed_low(log_start: int, reset: Reset, seen: Iterable[int], position: int) -> int:
    """Where a partition's comparable committed range starts (for the proof): under ``earliest``
    Kafka's log start; under ``latest`` the start is not recorded, so the first offset ``seen``
    (table or dead letters) below ``position`` stands in (a gap at the very start is not seen).
    """
    if reset != "latest":
        return log_start
    below = [o for o in seen if o < position]
    return max(log_start, min(below)) if below else position


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition of a topic as the topic's observation shows it."""

    partition: int
    #: Records Kafka holds (end minus log start) and the last stable offset.
    held: int
    end: int
    #: Per sink: offsets between its committed position (or reset start) and ``end``.
    lags: dict[str, int]


def partition_lags(
    ends: dict[int, int],
    starts: dict[int, int],
    positions: dict[str, dict[int, int | None]],
    reset: Reset,
) -> list[PartitionLag]:
    """Each partition's size and each sink's lag (``positions``: sink -> partition -> offset); with
    nothing stored a sink lags by the whole log under ``earliest``, by nothing under ``latest``.
    """
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
