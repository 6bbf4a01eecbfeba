"""Dedup tokens are deterministic and distinct; chunk cutting covers exactly and repeats."""

from __future__ import annotations

import os
import subprocess
import sys
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eos_pipeline.core.dedup import dedup_token
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline_tests.support.chunks import split_range_by_offsets

TP = TopicPartition("orders", 3)

# --- dedup_token ------------------------------------------------------------------------------


def test_token_has_the_documented_readable_shape() -> None:
    assert dedup_token("sales", TP, OffsetRange(10, 20)) == "eos:v1:sales:orders:3:10-20"


def test_token_is_the_same_in_another_process_with_another_hash_seed() -> None:
    code = (
        "from eos_pipeline.core.offsets import OffsetRange, TopicPartition\n"
        "from eos_pipeline.core.dedup import dedup_token\n"
        "print(dedup_token('sales', TopicPartition('orders', 3), OffsetRange(10, 20)))\n"
    )
    tokens = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        tokens.add(out.stdout.strip())
    assert tokens == {dedup_token("sales", TP, OffsetRange(10, 20))}


def test_token_rejects_empty_pipeline_name() -> None:
    with pytest.raises(ValueError, match="pipeline"):
        dedup_token("", TP, OffsetRange(0, 1))


names = st.text(min_size=1, max_size=6)
topics = st.text(alphabet="ab._-", min_size=1, max_size=4).filter(lambda t: t not in (".", ".."))
keys = st.tuples(names, topics, st.integers(0, 20), st.integers(0, 30), st.integers(0, 30)).map(
    lambda k: (k[0], k[1], k[2], min(k[3], k[4]), max(k[3], k[4]))
)


def _token(key: tuple[str, str, int, int, int]) -> str:
    pipeline, topic, partition, start, end = key
    return dedup_token(pipeline, TopicPartition(topic, partition), OffsetRange(start, end))


@settings(max_examples=300, deadline=None)
@given(keys, keys)
def test_tokens_differ_exactly_when_inputs_differ(a: tuple, b: tuple) -> None:
    assert (_token(a) == _token(b)) == (a == b)


@settings(max_examples=100, deadline=None)
@given(keys)
def test_token_is_repeatable(key: tuple) -> None:
    assert _token(key) == _token(key)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("p:q", "t", 1, 0, 5), ("p", "q", 1, 0, 5)),  # a ':' in the pipeline name
        (("p", "t", 1, 0, 15), ("p", "t", 10, 0, 5)),
        (("p", "t", 1, 1, 25), ("p", "t", 11, 2, 5)),
        (("p", "t", 0, 1, 2), ("p", "t", 0, 12, 12)),
    ],
)
def test_tokens_of_lookalike_inputs_differ(a: tuple, b: tuple) -> None:
    assert _token(a) != _token(b)


# --- split_range_by_offsets -------------------------------------------------------------------


def test_split_by_two_records_cuts_at_every_third_present_offset() -> None:
    pieces = split_range_by_offsets(OffsetRange(0, 10), [1, 2, 5, 7, 9], 2)
    assert pieces == [OffsetRange(0, 5), OffsetRange(5, 9), OffsetRange(9, 10)]


def test_split_of_chunk_without_records_keeps_it_whole() -> None:
    assert split_range_by_offsets(OffsetRange(4, 9), [], 3) == [OffsetRange(4, 9)]


def test_split_of_empty_chunk_is_the_chunk() -> None:
    assert split_range_by_offsets(OffsetRange(4, 4), [], 3) == [OffsetRange(4, 4)]


def test_split_with_fewer_records_than_limit_keeps_chunk_whole() -> None:
    assert split_range_by_offsets(OffsetRange(0, 10), [3, 4], 2) == [OffsetRange(0, 10)]


@pytest.mark.parametrize(
    ("offsets", "max_records", "message"),
    [
        ([1, 12], 2, "outside"),
        ([-1], 2, "outside"),
        ([3, 3], 2, "increasing"),
        ([5, 4], 2, "increasing"),
        ([1], 0, "max_records"),
    ],
)
def test_split_rejects_bad_input(offsets: list[int], max_records: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_range_by_offsets(OffsetRange(0, 10), offsets, max_records)


@st.composite
def chunks_with_offsets(draw: st.DrawFn) -> tuple[OffsetRange, list[int]]:
    start = draw(st.integers(0, 50))
    end = draw(st.integers(start, start + 40))
    present = draw(st.sets(st.integers(start, end - 1))) if end > start else set()
    return OffsetRange(start, end), sorted(present)


@settings(max_examples=300, deadline=None)
@given(chunks_with_offsets(), st.integers(1, 6))
def test_split_covers_chunk_exactly_within_the_record_limit(
    chunk_offsets: tuple[OffsetRange, list[int]], max_records: int
) -> None:
    chunk, offsets = chunk_offsets
    pieces = split_range_by_offsets(chunk, offsets, max_records)
    assert pieces[0].start == chunk.start
    assert pieces[-1].end == chunk.end
    for left, right in pairwise(pieces):
        assert left.end == right.start
    if not chunk.is_empty:
        assert all(not piece.is_empty for piece in pieces)
    counts = [sum(1 for o in offsets if o in piece) for piece in pieces]
    assert sum(counts) == len(offsets)
    assert all(c <= max_records for c in counts)
    # No needless cut: only the last piece may hold fewer records than the limit.
    assert all(c == max_records for c in counts[:-1])
    # Same inputs (as a fresh iterable) give the same cut.
    assert split_range_by_offsets(chunk, iter(list(offsets)), max_records) == pieces


@settings(max_examples=200, deadline=None)
@given(chunks_with_offsets(), st.integers(1, 6), st.data())
def test_split_of_a_tail_from_a_cut_repeats_the_tail_of_the_whole_cut(
    chunk_offsets: tuple[OffsetRange, list[int]], max_records: int, data: st.DataObject
) -> None:
    """Cutting again from any cut point gives the same remaining pieces (and so tokens)."""
    chunk, offsets = chunk_offsets
    pieces = split_range_by_offsets(chunk, offsets, max_records)
    k = data.draw(st.integers(0, len(pieces) - 1))
    tail = OffsetRange(pieces[k].start, chunk.end)
    tail_offsets = [o for o in offsets if o in tail]
    assert split_range_by_offsets(tail, tail_offsets, max_records) == pieces[k:]
