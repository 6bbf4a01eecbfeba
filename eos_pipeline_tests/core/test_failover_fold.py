"""Folding a clustered pipeline's physical partitions into one state per partition: pure."""

from __future__ import annotations

import pytest

from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.failover import fold_keeper_states, fold_positions
from eos_pipeline.core.offsets import OffsetRange


def _state(start: int, end: int, phase: Phase = Phase.AFTER) -> SinkState:
    return SinkState(OffsetRange(start, end), phase)


def test_a_partition_in_before_comes_first_then_the_one_furthest_behind() -> None:
    caught_up, behind = (100, _state(90, 100)), (50, _state(10, 20))
    assert fold_keeper_states([caught_up, behind]) == behind
    recovering = (100, _state(98, 99, Phase.BEFORE))
    assert fold_keeper_states([behind, recovering]) == recovering
    fresh = (70, None)  # nothing stored: behind by everything from offset 0
    assert fold_keeper_states([behind, fresh]) == fresh
    with pytest.raises(ValueError):
        fold_keeper_states([])


def test_table_positions_fold_to_the_most_behind_physical_topic() -> None:
    ends, positions = fold_positions({0: [(100, 100), (40, 10)], 1: [(5, None)]}, moved=False)
    assert ends == {0: 40, 1: 5}
    assert positions == {0: 10}  # partition 1 has nothing stored: left out, as a new one


def test_a_table_still_on_another_cluster_is_behind_everywhere() -> None:
    ends, positions = fold_positions({0: [(100, 100)], 1: [(0, None)]}, moved=True)
    assert all(ends[p] > positions[p] for p in (0, 1))
