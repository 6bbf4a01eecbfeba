"""A Hudi table's cluster position and its move to another cluster: pure, no stack."""

from __future__ import annotations

import pytest

from eos_pipeline.core.failover import (
    ClusterSet,
    Flow,
    OffsetSync,
    SwitchRefused,
    SyncHistory,
    TablePosition,
    TablePositionError,
    carry_over,
    flows_needed,
    row_topic,
    streamer_checkpoint,
)
from eos_pipeline.core.keeper import Mark
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.support.decisions import split_row_topic
from eos_pipeline_tests.support.offset_syncs import add_syncs

AB = ClusterSet.both_ways(("A", "B"))
FP = "0123456789abcdef0123456789abcdef"
FP2 = "fedcba9876543210fedcba9876543210"


def _history(flow: Flow, pairs: list[tuple[int, int]]) -> SyncHistory:
    history = SyncHistory(flow)
    add_syncs(history, (OffsetSync("T", 0, u, d) for u, d in pairs))
    return history


def test_round_trip_is_exact_and_canonical() -> None:
    position = TablePosition(
        "A",
        {TopicPartition("T", 1): 7, TopicPartition("T", 0): 500, TopicPartition("B.T", 0): 0},
        {TopicPartition("T", 0): Mark(FP, 499), TopicPartition("T", 1): Mark(FP2, None, 9)},
        {TopicPartition("T", 0): 300},
    )
    text = position.encode()
    assert TablePosition.decode(text) == position
    assert text.startswith('{"cluster":"A","topics":{"B.T":{"0":[0,null,null]},"T":{"0":[500,')
    assert text.endswith('"window_end":9},null]}},"v":1}')
    with pytest.raises(TablePositionError, match="starting after"):
        TablePosition("A", {TopicPartition("T", 0): 5}, {}, {TopicPartition("T", 0): 6})
    assert position.pending == {TopicPartition("T", 1): Mark(FP2, None, 9)}


@pytest.mark.parametrize(
    "text",
    ["", "[]", '{"v":2,"cluster":"A","topics":{}}', '{"v":1,"cluster":"A"}',
     '{"v":1,"cluster":"A","topics":{"T":{"0":[-1,null,null]}}}',
     '{"v":1,"cluster":"A","topics":{"T":{"0":[1,null,-1]}}}',
     '{"v":1,"cluster":"A","topics":{"T":{"0":[1,null]}}}',
     '{"v":1,"cluster":"A","topics":{"T":{"0":[1,{"fingerprint":"x"},null]}}}'],
)  # fmt: skip
def test_corrupt_positions_are_refused(text: str) -> None:
    with pytest.raises(TablePositionError):
        TablePosition.decode(text)


def test_advanced_moves_positions_and_replaces_or_drops_marks() -> None:
    tp0, tp1 = TopicPartition("T", 0), TopicPartition("T", 1)
    position = TablePosition("A", {tp0: 5, tp1: 3}, {tp0: Mark(FP, 4), tp1: Mark(FP2, 2)})
    after = position.advanced({tp0: 9}, {tp0: Mark(FP2, 8), tp1: None}, {tp1: 2})
    assert after.positions == {tp0: 9, tp1: 3}
    assert after.marks == {tp0: Mark(FP2, 8)}
    assert after.since == {tp1: 2}
    with pytest.raises(TablePositionError, match="without a position"):
        TablePosition("A", {}, {tp0: Mark(FP, 1)})


def test_streamer_summary_names_every_partition_of_the_local_topic() -> None:
    position = TablePosition("B", {TopicPartition("A.T", 0): 40, TopicPartition("T", 1): 3})
    assert streamer_checkpoint("T", position, 2) == {
        TopicPartition("T", 0): 0,
        TopicPartition("T", 1): 3,
    }


def test_failover_moves_each_physical_topic_to_its_counterpart_with_pending_marks() -> None:
    """On A, ``T`` goes forward to B's ``A.T`` and ``B.T`` inverse to B's ``T``."""
    position = TablePosition(
        "A",
        {TopicPartition("T", 0): 500, TopicPartition("B.T", 0): 20},
        {TopicPartition("T", 0): Mark(FP, 499), TopicPartition("B.T", 0): Mark(FP2, 19)},
    )
    ab, ba = Flow("A", "B"), Flow("B", "A")
    assert flows_needed(position, "B", AB, ["T"]) == {ab, ba}
    histories = {ab: _history(ab, [(400, 390), (600, 580)]), ba: _history(ba, [(25, 20)])}
    moved, moves = carry_over(position, "B", AB, ["T"], histories, lambda tp: 0)
    assert moved.cluster == "B" and len(moves) == 2
    # 499 lies between the syncs 400->390 and 600->580: its copy is in [391, 580).
    assert moved.positions[TopicPartition("A.T", 0)] == 391
    assert moved.marks[TopicPartition("A.T", 0)] == Mark(FP, None, 580)
    # B.T's 19 is before the first sync back (25<-20): its original is in [floor, 25].
    assert moved.positions[TopicPartition("T", 0)] == 0
    assert moved.marks[TopicPartition("T", 0)].pending
    assert carry_over(moved, "B", AB, ["T"], {}, lambda tp: 0) == (moved, [])


def test_a_position_without_mark_moves_only_when_exact() -> None:
    """An old table (no marks) moves when a sync lands on its position, else it is refused."""
    ab = Flow("A", "B")
    exact = TablePosition("A", {TopicPartition("T", 0): 400})
    moved, _ = carry_over(exact, "B", AB, ["T"], {ab: _history(ab, [(400, 390)])}, lambda tp: 0)
    assert moved.positions == {TopicPartition("A.T", 0): 390} and moved.marks == {}
    inexact = TablePosition("A", {TopicPartition("T", 0): 401})
    with pytest.raises(SwitchRefused, match="no fingerprint"):
        carry_over(inexact, "B", AB, ["T"], {ab: _history(ab, [(400, 390)])}, lambda tp: 0)


def test_a_topic_the_pipeline_does_not_read_is_refused() -> None:
    position = TablePosition("A", {TopicPartition("other", 0): 1})
    with pytest.raises(TablePositionError, match="none of the pipeline's topics"):
        carry_over(position, "B", AB, ["T"], {}, lambda tp: 0)
    one_way = ClusterSet.parse(["A", "B"], ["B->A"])
    with pytest.raises(SwitchRefused, match="does not replicate"):
        carry_over(
            TablePosition("A", {TopicPartition("T", 0): 0}), "B", one_way, ["T"], {}, lambda t: 0
        )


def test_row_topics_name_the_cluster_and_read_back() -> None:
    assert row_topic("B", "A.T") == "B:A.T"
    assert split_row_topic("B:A.T") == ("B", "A.T")
    assert split_row_topic("T") == (None, "T")
