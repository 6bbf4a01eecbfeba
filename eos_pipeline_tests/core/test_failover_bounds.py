"""The time bound of the re-read after a switch (``core.failover.read_start``): never past the copy.

The model is the one of ``test_failover_properties`` (records upstream, their copies downstream,
the offset syncs MM2 kept), with a timestamp drawn for every record: any order, repeats allowed,
as producers may give. The broker's offset-for-time lookup is simulated here from its contract
(the earliest offset whose timestamp is at or after the one asked), independently of the code.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from eos_pipeline.core.failover import (
    SYNCS,
    TIMESTAMP,
    ClusterSet,
    Flow,
    MirroredRecord,
    PhysicalTopic,
    TablePosition,
    Window,
    carry_over,
    move,
    read_start,
    resume_after,
)
from eos_pipeline.core.keeper import Mark
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.core.test_failover_properties import TP, Mirror, mirrors
from eos_pipeline_tests.core.test_failover_switch import FP, LOCAL_A, _history, _record


def _earliest_at_or_after(offsets: list[int], stamps: list[int], ts: int) -> int | None:
    """What Kafka's ListOffsets by timestamp answers (None for its -1)."""
    found = [o for o, t in zip(offsets, stamps, strict=False) if t >= ts]
    return min(found) if found else None


def _records(offsets: list[int], m: Mirror, stamps: list[int]) -> list[MirroredRecord]:
    return [
        MirroredRecord(o, b"k", p, t) for o, p, t in zip(offsets, m.payloads, stamps, strict=False)
    ]


@st.composite
def timed_mirrors(draw: st.DrawFn, increasing: bool = False) -> tuple[Mirror, list[int]]:
    m = draw(mirrors())
    n = len(m.ups)
    if increasing:
        stamps = sorted(draw(st.sets(st.integers(0, 10_000), min_size=n, max_size=n)))
    else:
        stamps = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    return m, stamps


@settings(max_examples=300, deadline=None)
@given(timed_mirrors(), st.data())
def test_the_time_bound_never_passes_the_copy_on_the_replica(
    drawn: tuple[Mirror, list[int]], data: st.DataObject
) -> None:
    m, stamps = drawn
    assume(m.downs)
    w = data.draw(st.integers(0, len(m.downs) - 1))  # the last record written, on A
    window = m.history().replica_window(TP, m.ups[w])
    at_time = _earliest_at_or_after(m.downs, stamps, stamps[w])
    start = read_start(window, at_time)
    assert window.start <= start.position <= m.downs[w]
    assert start.syncs_position == window.start
    # the sink's resume from there is still exact
    window_read = Window(start.position, window.end)
    readable = [r for r in _records(m.downs, m, stamps) if r.offset in window_read]
    written = _records(m.ups, m, stamps)[w]
    point = resume_after(TP, written.fingerprint, readable, window_read)
    assert point.position == m.downs[w] + 1
    # what is no longer read: only records older than the copy (none of them is the copy)
    passed = [r for r in _records(m.downs, m, stamps) if window.start <= r.offset < start.position]
    assert all(r.timestamp_ms < stamps[w] for r in passed)


@settings(max_examples=300, deadline=None)
@given(timed_mirrors(), st.data())
def test_the_time_bound_never_passes_the_original_back_on_the_origin(
    drawn: tuple[Mirror, list[int]], data: st.DataObject
) -> None:
    m, stamps = drawn
    assume(m.downs)
    w = data.draw(st.integers(0, len(m.downs) - 1))  # the last record written, read on B
    window = m.history().origin_window(TP, m.downs[w])
    at_time = _earliest_at_or_after(m.ups, stamps, stamps[w])
    start = read_start(window, at_time)
    assert window.start <= start.position <= m.ups[w]
    window_read = Window(start.position, window.end)
    readable = [r for r in _records(m.ups, m, stamps) if r.offset in window_read]
    written = _records(m.downs, m, stamps)[w]
    point = resume_after(TP, written.fingerprint, readable, window_read)
    assert point.matched_offset == m.ups[w]


@settings(max_examples=200, deadline=None)
@given(timed_mirrors(increasing=True), st.data())
def test_with_distinct_increasing_timestamps_nothing_before_the_copy_is_reread(
    drawn: tuple[Mirror, list[int]], data: st.DataObject
) -> None:
    m, stamps = drawn
    assume(m.downs)
    w = data.draw(st.integers(0, len(m.downs) - 1))
    window = m.history().replica_window(TP, m.ups[w])
    start = read_start(window, _earliest_at_or_after(m.downs, stamps, stamps[w]))
    assert start.position == m.downs[w]  # offset.lag.max + 1 = 1 record re-read: the copy


@pytest.mark.parametrize(
    ("window", "at_time", "expected"),
    [
        (Window(10, 20), None, (10, SYNCS)),  # not asked (no timestamp, LogAppendTime)
        (Window(10, 20), -1, (10, SYNCS)),  # Kafka's "no such offset"
        (Window(10, 20), 4, (10, SYNCS)),  # before the syncs' start: theirs is later
        (Window(10, 20), 10, (10, SYNCS)),
        (Window(10, 20), 17, (17, TIMESTAMP)),
        (Window(10, 20), 20, (10, SYNCS)),  # past the window: timestamps were not kept
        (Window(10, 20), 95, (10, SYNCS)),
        (Window(10, None), 95, (95, TIMESTAMP)),  # open window: the copy may come later
    ],
)
def test_read_start_guards(window: Window, at_time: int | None, expected: tuple[int, str]) -> None:
    start = read_start(window, at_time)
    assert (start.position, start.bound) == expected
    assert start.syncs_position == window.start


def test_a_timed_mark_starts_its_window_at_the_time_offset() -> None:
    history = _history(Flow("A", "B"), [(0, 0), (100, 105), (200, 212)])
    mark = Mark(FP, 150, None, 1_700_000_000_000)
    moved = move(LOCAL_A, 0, _record(151, mark), "B", ClusterSet.both_ways(("A", "B")), history,
                 0, 154)  # fmt: skip
    assert (moved.position, moved.bound, moved.syncs_position) == (154, TIMESTAMP, 106)
    # the window's end and the timestamp travel with the pending mark
    assert moved.mark == Mark(FP, None, 212, 1_700_000_000_000)


def test_a_mark_without_timestamp_ignores_any_time_offset() -> None:
    history = _history(Flow("A", "B"), [(0, 0), (100, 105), (200, 212)])
    ab = ClusterSet.both_ways(("A", "B"))
    moved = move(LOCAL_A, 0, _record(151, Mark(FP, 150)), "B", ab, history, 0, 154)
    assert (moved.position, moved.bound, moved.mark) == (106, SYNCS, Mark(FP, None, 212))


def test_a_pending_timed_mark_moves_on_with_an_open_window() -> None:
    history = _history(Flow("A", "B"), [(0, 0), (100, 105)])
    replica = PhysicalTopic("B", "A.T", "A", "T")
    ab = ClusterSet.both_ways(("A", "B"))
    moved = move(replica, 0, _record(120, Mark(FP, None, None, 5)), "A", ab, history, 0, 103)
    assert (moved.position, moved.bound, moved.mark) == (103, TIMESTAMP, Mark(FP, None, None, 5))


def test_a_hudi_position_moves_by_the_same_rule() -> None:
    history = _history(Flow("A", "B"), [(0, 0), (100, 105), (200, 212)])
    ab = ClusterSet.both_ways(("A", "B"))
    stored = TablePosition("A", {TP: 151}, {TP: Mark(FP, 150, None, 77)})
    asked = []

    def at_time(tp: TopicPartition, mark: Mark) -> int:
        asked.append((tp, mark.timestamp_ms))
        return 160

    moved, [m] = carry_over(stored, "B", ab, ("T",), {Flow("A", "B"): history}, lambda tp: 0,
                            at_time)  # fmt: skip
    replica = TopicPartition("A.T", 0)
    assert asked == [(replica, 77)]  # asked on the cluster switched to, at the mark's time
    assert (m.position, m.bound) == (160, TIMESTAMP)
    assert moved.positions == {replica: 160}
    assert moved.marks[replica] == Mark(FP, None, 212, 77)


def test_marks_keep_their_timestamp_and_read_the_older_format() -> None:
    timed = Mark(FP, 150, None, 1_700_000_000_000)
    assert Mark.from_json(json.loads(json.dumps(timed.to_json()))) == timed
    old = {"fingerprint": FP, "last_offset": 150, "window_end": None}
    assert Mark.from_json(old) == Mark(FP, 150)
    assert Mark(FP, 150).to_json() == old  # a mark without one is stored as before
    with pytest.raises(ValueError, match="timestamp_ms"):
        Mark.from_json({**old, "timestamp_ms": -3})
    with pytest.raises(ValueError, match="fingerprint, last_offset"):
        Mark.from_json({**old, "stamp": 1})
    assert Mark.of_record(FP, 3, -1) == Mark(FP, 3)  # Kafka's "no timestamp"
    assert Mark.of_record(FP, 3, 9) == Mark(FP, 3, None, 9)
