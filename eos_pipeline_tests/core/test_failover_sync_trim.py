"""A stored copy of the sync history keeps the latest syncs per partition (pure)."""

from __future__ import annotations

import pytest

from eos_pipeline.core.failover import FailoverError, Flow, OffsetSync, SyncHistory
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.support.offset_syncs import add_syncs


def test_trimmed_keeps_the_latest_syncs_and_round_trips() -> None:
    history = SyncHistory(Flow("A", "B"))
    add_syncs(history, (OffsetSync("T", 0, 10 * n, 10 * n + 3) for n in range(20)))
    add_syncs(history, (OffsetSync("T", 1, n, n) for n in range(3)))
    history.source_position = 23
    kept = SyncHistory.from_dict(history.trimmed(5).to_dict())
    tp = TopicPartition("T", 0)
    assert [s.upstream for s in kept.syncs(tp)] == [150, 160, 170, 180, 190]
    assert len(kept.syncs(TopicPartition("T", 1))) == 3 and kept.source_position == 23
    # a recent position translates as with the whole history; an old one falls to the floor
    assert kept.forward(tp, 175) == history.forward(tp, 175)
    assert kept.forward(tp, 20, floor=7).position == 7
    assert history.forward(tp, 20).position > 7
    with pytest.raises(FailoverError):
        history.trimmed(0)
