"""Property tests of offset translation and exact resume across a MirrorMaker 2 flow.

The model, independent of the code under test: an upstream partition of records at increasing
offsets with holes (transaction markers), the first ``replicated`` of them copied in order to a
downstream partition at increasing offsets with holes of their own (MM2's exactly-once commit
markers), and a set of offset syncs, each pairing the two offsets of one copied record. Which
syncs exist is drawn freely (compaction keeps few) or by MM2's own emission rule (dense).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from eos_pipeline.core.failover import (
    AmbiguousFingerprint,
    FingerprintNotFound,
    Flow,
    MirroredRecord,
    OffsetSync,
    ReplicaPending,
    ResumeError,
    SyncHistory,
    resume_after,
)
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.support.offset_syncs import add_syncs

TP = TopicPartition("T", 0)
FLOW = Flow("A", "B")


@dataclass
class Mirror:
    ups: list[int]  # upstream offset of each record
    downs: list[int]  # downstream offset of each copied record (a prefix of the records)
    synced: list[int]  # indexes of copied records that have a sync, ascending
    payloads: list[bytes]

    @property
    def up_end(self) -> int:
        return self.ups[-1] + 1 if self.ups else 0

    @property
    def down_end(self) -> int:
        return self.downs[-1] + 1 if self.downs else 0

    def history(self) -> SyncHistory:
        history = SyncHistory(FLOW)
        add_syncs(history, (OffsetSync("T", 0, self.ups[i], self.downs[i]) for i in self.synced))
        return history

    def upstream_records(self) -> list[MirroredRecord]:
        return [
            MirroredRecord(o, b"k", p, 1000) for o, p in zip(self.ups, self.payloads, strict=True)
        ]

    def downstream_records(self) -> list[MirroredRecord]:
        return [
            MirroredRecord(o, b"k", p, 1000)
            for o, p in zip(self.downs, self.payloads, strict=False)
        ]

    # The truth the translation must never pass: the first copy of a record not yet consumed.
    def true_forward(self, u: int) -> int:
        """Latest downstream position that skips no copy of a record at or after ``u``."""
        for up, down in zip(self.ups, self.downs, strict=False):
            if up >= u:
                return down
        return self.down_end

    def true_inverse(self, d: int) -> int:
        """Latest upstream position that skips no original of a copy at or after ``d``."""
        for i, down in enumerate(self.downs):
            if down >= d:
                return self.ups[i]
        copied = len(self.downs)
        return self.ups[copied] if copied < len(self.ups) else self.up_end

    def reread_forward(self, u: int, position: int) -> int:
        return sum(
            1 for up, down in zip(self.ups, self.downs, strict=False) if up < u and down >= position
        )

    def reread_inverse(self, d: int, position: int) -> int:
        return sum(
            1 for up, down in zip(self.ups, self.downs, strict=False) if down < d and up >= position
        )


def _offsets(draw: st.DrawFn, count: int, base: int) -> list[int]:
    offsets, at = [], base
    for _ in range(count):
        at += draw(st.integers(0, 2))  # holes: markers, aborted or compacted records
        offsets.append(at)
        at += 1
    return offsets


@st.composite
def mirrors(draw: st.DrawFn, unique: bool = True, dense_lag: int | None = None) -> Mirror:
    n = draw(st.integers(0, 60))
    ups = _offsets(draw, n, draw(st.integers(0, 3)))
    copied = draw(st.integers(0, n))
    downs = _offsets(draw, copied, draw(st.integers(0, 3)))
    if dense_lag is None:
        synced = sorted(
            draw(st.sets(st.integers(0, copied - 1), max_size=copied)) if copied else []
        )
    else:
        synced = _mm2_syncs(draw, ups, downs, dense_lag)
    if unique:
        payloads = [f"event-{i}".encode() for i in range(n)]
    else:
        payloads = [draw(st.sampled_from([b"x", b"y"])) for _ in range(n)]
    return Mirror(ups, downs, synced, payloads)


def _mm2_syncs(draw: st.DrawFn, ups: list[int], downs: list[int], lag: int) -> list[int]:
    """MM2's emission rule: a sync when none yet, when the last one would translate more than
    ``offset.lag.max`` behind, or after a hole upstream; plus some at transaction ends."""
    synced: list[int] = []
    last_sync_down = None
    for i, down in enumerate(downs):
        first = last_sync_down is None
        stale = not first and down - (last_sync_down + 1) >= lag
        hole = i > 0 and ups[i] - ups[i - 1] != 1
        if first or stale or hole:
            synced.append(i)
            last_sync_down = down
        elif draw(st.booleans()):  # a delayed sync promoted at an MM2 commit
            synced.append(i)
    return synced


@settings(max_examples=250, deadline=None)
@given(mirrors(), st.data())
def test_forward_is_never_ahead_and_exact_when_it_says_so(m: Mirror, data: st.DataObject) -> None:
    u = data.draw(st.integers(0, m.up_end + 2))
    t = m.history().forward(TP, u)
    truth = m.true_forward(u)
    assert t.position <= truth
    if t.exact:
        assert m.reread_forward(u, t.position) == 0
    if t.basis is not None:
        assert t.basis.upstream <= u


@settings(max_examples=250, deadline=None)
@given(mirrors(), st.data())
def test_inverse_is_never_ahead_and_exact_when_it_says_so(m: Mirror, data: st.DataObject) -> None:
    d = data.draw(st.integers(0, m.down_end + 2))
    t = m.history().inverse(TP, d)
    assert t.position <= m.true_inverse(d)
    if t.exact:
        assert m.reread_inverse(d, t.position) == 0
    if t.basis is not None:
        assert t.basis.downstream <= d


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 8).flatmap(lambda lag: st.tuples(st.just(lag), mirrors(dense_lag=lag))),
    st.data(),
)
def test_dense_syncs_bound_the_reread_by_offset_lag_max(
    lag_and_mirror: tuple[int, Mirror], data: st.DataObject
) -> None:
    lag, m = lag_and_mirror
    history = m.history()
    u = data.draw(st.integers(0, m.up_end))
    if m.downs and u <= m.ups[len(m.downs) - 1]:  # a position MM2 has copied past
        assert m.reread_forward(u, history.forward(TP, u).position) <= lag
    d = data.draw(st.integers(0, m.down_end))
    assert m.reread_inverse(d, history.inverse(TP, d).position) <= lag


@settings(max_examples=250, deadline=None)
@given(mirrors(), st.data())
def test_resume_finds_the_exact_next_record_on_the_replica(m: Mirror, data: st.DataObject) -> None:
    assume(m.downs)
    w = data.draw(st.integers(0, len(m.downs) - 1))  # the last record written, on A
    history = m.history()
    window = history.replica_window(TP, m.ups[w])
    assert m.downs[w] in window
    readable = [r for r in m.downstream_records() if r.offset in window]
    point = resume_after(TP, m.upstream_records()[w].fingerprint, readable, window)
    assert point.position == m.downs[w] + 1
    assert point.matched_offset == m.downs[w]
    assert point.skipped == sum(1 for r in readable if r.offset <= m.downs[w])


@settings(max_examples=250, deadline=None)
@given(mirrors(), st.data())
def test_resume_finds_the_exact_next_record_back_on_the_origin(
    m: Mirror, data: st.DataObject
) -> None:
    assume(m.downs)
    w = data.draw(st.integers(0, len(m.downs) - 1))  # the last record written, on B
    window = m.history().origin_window(TP, m.downs[w])
    assert m.ups[w] in window
    readable = [r for r in m.upstream_records() if r.offset in window]
    point = resume_after(TP, m.downstream_records()[w].fingerprint, readable, window)
    assert point.position == m.ups[w] + 1


@settings(max_examples=250, deadline=None)
@given(mirrors(unique=False), st.data())
def test_identical_records_never_give_a_wrong_bounded_answer(
    m: Mirror, data: st.DataObject
) -> None:
    assume(m.downs)
    w = data.draw(st.integers(0, len(m.downs) - 1))
    window = m.history().replica_window(TP, m.ups[w])
    readable = [r for r in m.downstream_records() if r.offset in window]
    try:
        point = resume_after(TP, m.upstream_records()[w].fingerprint, readable, window)
    except AmbiguousFingerprint as exc:
        assert str(TP) in str(exc)
        return
    if point.bounded:
        assert point.position == m.downs[w] + 1


@settings(max_examples=200, deadline=None)
@given(mirrors(), st.data())
def test_a_record_not_copied_is_reported_never_guessed(m: Mirror, data: st.DataObject) -> None:
    assume(len(m.downs) < len(m.ups))
    w = data.draw(st.integers(len(m.downs), len(m.ups) - 1))  # written on A, not yet on B
    window = m.history().replica_window(TP, m.ups[w])
    readable = [r for r in m.downstream_records() if r.offset in window]
    with pytest.raises(ReplicaPending, match=r"T\[0\].*not copied it yet"):
        resume_after(TP, m.upstream_records()[w].fingerprint, readable, window)


@settings(max_examples=200, deadline=None)
@given(mirrors(), st.data())
def test_a_foreign_fingerprint_is_reported_with_the_partition(
    m: Mirror, data: st.DataObject
) -> None:
    assume(m.downs)
    w = data.draw(st.integers(0, len(m.downs) - 1))
    window = m.history().replica_window(TP, m.ups[w])
    readable = [r for r in m.downstream_records() if r.offset in window]
    stranger = MirroredRecord(0, b"k", b"never-produced", 1000).fingerprint
    expected = FingerprintNotFound if window.closed else ReplicaPending
    with pytest.raises(expected, match=r"^T\[0\]: the last written record"):
        resume_after(TP, stranger, readable, window)


@settings(max_examples=200, deadline=None)
@given(mirrors(), st.data())
def test_fewer_syncs_only_cost_rereads(m: Mirror, data: st.DataObject) -> None:
    """Compaction drops syncs: translation stays safe and never gets tighter."""
    assume(m.synced)
    kept = sorted(data.draw(st.sets(st.sampled_from(m.synced))))
    fewer = Mirror(m.ups, m.downs, kept, m.payloads)
    u = data.draw(st.integers(0, m.up_end))
    full, sparse = m.history().forward(TP, u), fewer.history().forward(TP, u)
    assert sparse.position <= full.position <= m.true_forward(u)


def test_resume_refuses_records_outside_the_window() -> None:
    history = SyncHistory(FLOW)
    history.add(OffsetSync("T", 0, 10, 20))
    history.add(OffsetSync("T", 0, 20, 35))
    window = history.replica_window(TP, 15)
    assert (window.start, window.end) == (21, 35)
    record = MirroredRecord(40, None, b"v", 1)
    with pytest.raises(ResumeError, match="outside the re-read window"):
        resume_after(TP, record.fingerprint, [record], window)
