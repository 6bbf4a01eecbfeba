"""Property tests: ``decide`` is total and safe, and a modelled sink loop is exactly-once.

The models are deliberately small and independent of the code under test:

* ClickHouse table: a list of rows (one source offset each) plus the tokens of its last
  ``WINDOW`` inserts. An insert whose token is in the window is dropped whole; an insert either
  lands whole or not at all (one block), and a crash may come right before or right after it.
* Keeper: a single record, overwritten by each BEFORE / AFTER write.
* Source partition: offsets 0.. with holes (transaction markers, aborted or compacted records).

The sink loop is the one documented in :mod:`eos_pipeline.core.dedup`: decide, dead-letter, then
per step write BEFORE, insert each sub-chunk under its own token, write AFTER.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from eos_pipeline.core.dedup import Case, Decision, Phase, SinkState, decide, dedup_token
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline_tests.support.chunks import split_range_by_offsets
from eos_pipeline_tests.support.decisions import writes_state

TP = TopicPartition("events", 0)
PIPELINE = "prop"
WINDOW = 100
MAX_OFFSET = 160


class Crash(Exception):
    """Injected process death."""


@dataclass
class World:
    holes: frozenset[int]
    max_records: int
    rows: list[int] = field(default_factory=list)
    tokens: deque[str] = field(default_factory=lambda: deque(maxlen=WINDOW))
    record: SinkState | None = None
    dlq: list[int] = field(default_factory=list)
    gaps: set[int] = field(default_factory=set)
    unconfirmed: set[int] = field(default_factory=set)
    origin: int | None = None  # start of the first range ever stored
    stored_end: int = 0  # highest end ever stored

    def present(self, r: OffsetRange) -> list[int]:
        return [o for o in range(r.start, r.end) if o not in self.holes]

    def write_record(self, state: SinkState) -> None:
        if self.origin is None:
            self.origin = state.range.start
        self.stored_end = max(self.stored_end, state.range.end)
        self.record = state

    def insert(self, token: str, rows: list[int]) -> None:
        if token in self.tokens:
            return
        self.rows.extend(rows)
        self.tokens.append(token)


def run_once(world: World, batch: OffsetRange, crash_at: int | None) -> Decision:
    """One attempt of the sink on ``batch``; raises :class:`Crash` at the ``crash_at``-th point."""
    points = 0

    def point() -> None:
        nonlocal points
        if points == crash_at:
            raise Crash
        points += 1

    d = decide(world.record, batch, TP)
    if d.error is not None:
        return d
    point()
    if d.dead_letter is not None:
        world.dlq.extend(world.present(d.dead_letter))
        point()
    for i, step in enumerate(d.steps):
        world.write_record(SinkState(step, Phase.BEFORE))
        if i == 0:
            # Only now does the position move past a gap or an unconfirmed BEFORE range.
            if d.gap is not None:
                world.gaps.update(world.present(d.gap))
            if d.unconfirmed is not None:
                world.unconfirmed.update(world.present(d.unconfirmed))
        point()
        for piece in split_range_by_offsets(step, world.present(step), world.max_records):
            rows = world.present(piece)
            if rows:  # nothing to send for a piece without records
                world.insert(dedup_token(PIPELINE, TP, piece), rows)
            point()
        world.write_record(SinkState(step, Phase.AFTER))
        point()
    return d


@st.composite
def batch_near(draw: st.DrawFn, record: SinkState | None) -> OffsetRange:
    """A batch placed around the stored range so that every case comes up often."""
    anchors = [0] if record is None else [record.range.start, record.range.end]
    start = min(MAX_OFFSET, max(0, draw(st.sampled_from(anchors)) + draw(st.integers(-3, 4))))
    shape = draw(st.sampled_from(["width", "width", "anchor", "anchor", "anchor", "empty"]))
    if shape == "empty":
        return OffsetRange(start, start)
    if shape == "width":
        end = start + draw(st.integers(1, 8))
    else:
        end = max(start + 1, draw(st.sampled_from(anchors)) + draw(st.integers(-2, 3)))
    return OffsetRange(start, min(end, MAX_OFFSET + 1))


holes_st = st.frozensets(st.integers(0, MAX_OFFSET), max_size=60)
crashes_st = st.lists(st.integers(0, 8), max_size=3)


@dataclass
class HighWater:
    """Reference model: an offset is owed iff it is present and at or above the high water."""

    start: int | None = None  # start of the last range that brought new positions
    end: int | None = None
    expected: set[int] = field(default_factory=set)
    gaps: set[int] = field(default_factory=set)

    def apply(self, batch: OffsetRange, present: list[int]) -> bool:
        """Account for ``batch``; return False if it must be refused."""
        if batch.is_empty:
            return True
        if self.start is None or self.end is None:
            self.expected.update(present)
            self.start, self.end = batch.start, batch.end
            return True
        if batch.end <= self.start:
            return False
        if batch.end > self.end:
            low = max(batch.start, self.end)
            self.expected.update(o for o in present if o >= low)
            self.gaps.update(range(self.end, batch.start))
            self.start, self.end = low, batch.end
        return True


@settings(max_examples=400, deadline=None)
@given(holes_st, st.integers(1, 4), st.data())
def test_sink_loop_with_crashes_and_retries_writes_every_offset_exactly_once(
    holes: frozenset[int], max_records: int, data: st.DataObject
) -> None:
    world = World(holes, max_records)
    model = HighWater()
    accepted: set[int] = set()
    for _ in range(data.draw(st.integers(1, 10), label="batches")):
        batch = data.draw(batch_near(world.record), label="batch")
        crashes = data.draw(crashes_st, label="crashes")
        for crash_at in [*crashes, None]:  # the retry of a crashed run reads the same range
            try:
                d = run_once(world, batch, crash_at)
                break
            except Crash:
                continue
        ok = model.apply(batch, world.present(batch))
        assert (d.error is None) == ok, (batch, d)
        if ok:
            accepted.update(world.present(batch))

    assert len(world.rows) == len(set(world.rows)), "an offset was written twice"
    assert set(world.rows) == model.expected
    assert world.dlq == []
    assert world.unconfirmed == set()
    assert world.gaps == {o for o in model.gaps if o not in holes}
    # Never neither: every accepted offset from the origin on is in the table or was skipped over.
    origin = world.origin if world.origin is not None else MAX_OFFSET + 1
    assert {o for o in accepted if o >= origin} <= set(world.rows) | world.gaps
    if model.start is not None and model.end is not None:
        assert world.record == SinkState(OffsetRange(model.start, model.end), Phase.AFTER)


@settings(max_examples=400, deadline=None)
@given(holes_st, st.integers(1, 4), st.data())
def test_sink_loop_with_abandoned_runs_never_duplicates_and_accounts_for_every_offset(
    holes: frozenset[int], max_records: int, data: st.DataObject
) -> None:
    """A crashed run may be given up and followed by any other range (hand-made replays)."""
    world = World(holes, max_records)
    attempted: set[int] = set()
    accepted: set[int] = set()
    for _ in range(data.draw(st.integers(1, 10), label="batches")):
        batch = data.draw(batch_near(world.record), label="batch")
        crashes = data.draw(crashes_st, label="crashes")
        give_up = data.draw(st.booleans(), label="give up after a crash")
        high_before = world.stored_end
        present = world.present(batch)
        attempted.update(present)
        d = None
        for crash_at in [*crashes, None]:
            try:
                d = run_once(world, batch, crash_at)
                break
            except Crash:
                if give_up:
                    break
        if d is None or d.error is not None:
            continue
        accepted.update(present)
        # Positions new to the sink always land.
        assert {o for o in present if o >= high_before} <= set(world.rows)

    table = set(world.rows)
    assert len(world.rows) == len(table), "an offset was written twice"
    assert table <= attempted
    assert not (table & world.gaps)
    origin = world.origin if world.origin is not None else MAX_OFFSET + 1
    owed = {o for o in accepted if o >= origin}
    assert owed <= table | set(world.dlq) | world.gaps | world.unconfirmed


states_st = st.one_of(
    st.none(),
    st.builds(
        lambda a, b, phase: SinkState(OffsetRange(min(a, b), max(a, b)), phase),
        st.integers(0, 30),
        st.integers(0, 30),
        st.sampled_from(Phase),
    ),
)
batches_st = st.builds(
    lambda a, b: OffsetRange(min(a, b), max(a, b)), st.integers(0, 40), st.integers(0, 40)
)


@settings(max_examples=1500, deadline=None)
@given(states_st, batches_st)
def test_decide_is_total_and_splits_the_batch_without_overlap(
    state: SinkState | None, batch: OffsetRange
) -> None:
    d = decide(state, batch)
    assert d.batch == batch
    if batch.is_empty:
        assert d.case is Case.EMPTY and not writes_state(d) and d.final_state == state
        return
    if state is None:
        assert d.steps == (batch,) and d.final_state == SinkState(batch, Phase.AFTER)
        return
    s = state.range
    if batch.end <= s.start:
        assert d.error is not None and str(batch) in d.error and str(s) in d.error
        assert not (d.steps or d.skipped or d.dead_letter or d.cropped)
        return
    assert d.error is None

    pieces = sorted(
        [*d.steps, *d.skipped, *(r for r in (d.cropped, d.dead_letter) if r is not None)]
    )
    assert pieces[0].start == batch.start and pieces[-1].end == batch.end
    assert all(a.end == b.start for a, b in pairwise(pieces)), pieces
    assert all(not p.is_empty for p in pieces)

    assert list(d.steps) == sorted(d.steps)
    for step in d.steps:
        assert step.start >= s.start  # nothing below the stored start is ever sent
        touches_stored = step.start < s.end and s.start < step.end
        if touches_stored:
            # The only range that may be sent again is the stored one, in BEFORE, unchanged.
            assert state.phase is Phase.BEFORE and step == s
    for r in d.skipped:
        assert state.phase is Phase.AFTER and s.start <= r.start and r.end <= s.end
    if d.dead_letter is not None:
        assert state.phase is Phase.BEFORE
        assert s.start <= d.dead_letter.start and d.dead_letter.end <= s.end
    expected_crop = OffsetRange(batch.start, s.start) if batch.start < s.start else None
    assert d.cropped == expected_crop
    expected_gap = OffsetRange(s.end, batch.start) if batch.start > s.end else None
    assert d.gap == expected_gap
    # A BEFORE range is left unconfirmed when the position moves on without re-sending it.
    moves_past = state.phase is Phase.BEFORE and bool(d.steps) and d.steps[0] != s
    left_behind = OffsetRange(s.start, max(s.start, min(batch.start, s.end)))
    expected_unconfirmed = left_behind if moves_past and not left_behind.is_empty else None
    assert d.unconfirmed == expected_unconfirmed
    if d.steps:
        assert d.steps[-1].end == batch.end
        assert d.final_state == SinkState(d.steps[-1], Phase.AFTER)
    else:
        assert d.final_state == state


@settings(max_examples=1500, deadline=None)
@given(states_st, batches_st)
def test_retry_after_a_crash_between_any_two_writes_repeats_the_remaining_steps(
    state: SinkState | None, batch: OffsetRange
) -> None:
    """Same bounds on retry means same tokens, so re-sent chunks are dropped by ClickHouse."""
    d = decide(state, batch)
    for k, step in enumerate(d.steps):
        retry_in_flight = decide(SinkState(step, Phase.BEFORE), batch)
        assert retry_in_flight.steps == d.steps[k:]
        assert retry_in_flight.dead_letter is None and retry_in_flight.error is None
        retry_done = decide(SinkState(step, Phase.AFTER), batch)
        assert retry_done.steps == d.steps[k + 1 :]
        assert retry_done.dead_letter is None and retry_done.error is None
