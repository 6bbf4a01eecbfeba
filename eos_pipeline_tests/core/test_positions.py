"""Where a sink starts and stands: every branch, no stack."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.errors import Fault, LogChanged
from eos_pipeline.core.keeper import KeeperRecord
from eos_pipeline.core.offsets import OffsetRange
from eos_pipeline.core.positions import (
    NEW,
    Standing,
    check_same_log,
    checkpoint_state,
    committed,
    committed_low,
    lag,
    needs_log_start,
    partition_lags,
    sink_state,
    standing,
    start_offset,
)

AFTER = SinkState(OffsetRange(5, 10), Phase.AFTER)
BEFORE = SinkState(OffsetRange(5, 10), Phase.BEFORE)


def _record(**state: object) -> KeeperRecord:
    return KeeperRecord(1, "0123456789abcdef", "host/1/run", datetime.now(UTC), **state)  # type: ignore[arg-type]


def test_sink_state_reads_a_keeper_record() -> None:
    assert sink_state(None) is None
    assert sink_state(_record()) is None  # taken, never written
    assert sink_state(_record(range_start=5, range_end=10, phase="BEFORE")) == BEFORE
    assert sink_state(_record(range_start=5, range_end=10, phase="AFTER")) == AFTER


def test_a_checkpoint_offset_is_an_empty_after_state() -> None:
    assert checkpoint_state(None) is None
    assert checkpoint_state(7) == SinkState(OffsetRange(7, 7), Phase.AFTER)
    assert committed(checkpoint_state(7)) == 7


def test_committed_is_the_range_start_in_before_and_the_end_in_after() -> None:
    assert committed(None) is None
    assert committed(AFTER) == 10
    assert committed(BEFORE) == 5  # the range in flight is not confirmed


@pytest.mark.parametrize(
    ("state", "reset", "expected"),
    [
        (None, "earliest", True),
        (None, "latest", False),
        (AFTER, "earliest", False),
        (BEFORE, "earliest", False),
    ],
)
def test_needs_log_start_only_for_nothing_stored_and_earliest(
    state: SinkState | None, reset: str, expected: bool
) -> None:
    assert needs_log_start(state, reset) is expected  # type: ignore[arg-type]


def test_start_offset_stored_position_first_then_the_reset_policy() -> None:
    assert start_offset(AFTER, "earliest", end=20, log_start=0) == 10
    assert start_offset(AFTER, "latest", end=20, log_start=None) == 10
    assert start_offset(BEFORE, "earliest", end=20, log_start=0) == 5  # re-read the range
    assert start_offset(None, "earliest", end=20, log_start=3) == 3
    assert start_offset(None, "latest", end=20, log_start=None) == 20
    with pytest.raises(ValueError, match="log start is needed"):
        start_offset(None, "earliest", end=20, log_start=None)
    with pytest.raises(ValueError, match="reset must be"):
        start_offset(None, "newest", end=20, log_start=0)  # type: ignore[arg-type]


def test_standing_stored_after() -> None:
    assert standing(AFTER, "earliest", end=12, log_start=None) == Standing("AFTER", 10, 10, True)
    caught_up = standing(AFTER, "earliest", end=10, log_start=None)
    assert caught_up == Standing("AFTER", 10, 10, False)
    assert not caught_up.is_new and not caught_up.recovering


def test_standing_before_always_has_work() -> None:
    # the range in flight is resolved even when Kafka has nothing past it
    where = standing(BEFORE, "earliest", end=10, log_start=None)
    assert where == Standing("BEFORE", 5, 10, True)
    assert where.recovering


def test_standing_new_partition_from_the_reset_policy() -> None:
    assert standing(None, "earliest", end=4, log_start=0) == Standing(NEW, 0, 0, True)
    assert standing(None, "earliest", end=4, log_start=4) == Standing(NEW, 4, 4, False)
    # latest: the first run pins the start, so there is work even with nothing to read
    pinned = standing(None, "latest", end=4, log_start=None)
    assert pinned == Standing(NEW, 4, 4, True) and pinned.is_new


def test_lag_never_negative() -> None:
    assert lag(10, 15) == 5
    assert lag(15, 15) == 0
    assert lag(16, 15) == 0


def test_committed_low_earliest_is_the_log_start() -> None:
    assert committed_low(3, "earliest", [0, 1, 7], position=10) == 3


def test_committed_low_latest_is_the_first_offset_seen_below_the_position() -> None:
    assert committed_low(0, "latest", [12, 7, 9], position=10) == 7
    assert committed_low(8, "latest", [7, 9], position=10) == 8  # deleted below the log start
    assert committed_low(0, "latest", [], position=10) == 10  # nothing seen: an empty range
    assert committed_low(0, "latest", [11], position=10) == 10


def test_partition_lags_count_from_the_stored_position_else_from_the_reset_start() -> None:
    ends = {0: 10, 1: 7, 2: 5}
    starts = {0: 2, 1: 0, 2: 5}
    positions = {"clickhouse": {0: 4, 1: None}, "hudi": {1: 7}}
    earliest = partition_lags(ends, starts, positions, "earliest")
    assert [(r.partition, r.held, r.end) for r in earliest] == [(0, 8, 10), (1, 7, 7), (2, 0, 5)]
    assert [r.lags for r in earliest] == [
        {"clickhouse": 6, "hudi": 8},  # hudi: nothing stored, the whole log from its start
        {"clickhouse": 7, "hudi": 0},
        {"clickhouse": 0, "hudi": 0},  # an empty log (all deleted): nothing to read
    ]
    latest = partition_lags(ends, starts, positions, "latest")
    assert [r.lags for r in latest] == [
        {"clickhouse": 6, "hudi": 0},  # nothing stored under latest: it will start at the end
        {"clickhouse": 0, "hudi": 0},
        {"clickhouse": 0, "hudi": 0},
    ]


@pytest.mark.parametrize(
    ("facts", "reason"),
    [
        ({"stored_topic_id": "old", "topic_id": "new"}, "topic-recreated"),
        ({"stored_partitions": [0, 3], "present": {0: 5, 1: 5}}, "partition-gone"),
        ({"position": 9, "log_end": 5}, "log-behind"),
        ({"position": 2, "log_start": 5, "log_end": 9}, "retention"),
    ],
)
def test_a_position_from_another_log_is_refused_naming_the_fact(
    facts: dict[str, Any], reason: str
) -> None:
    with pytest.raises(LogChanged) as refused:
        check_same_log("t", topic="orders", **facts)
    assert refused.value.reason == reason and refused.value.fault is Fault.NEEDS_PERSON
    assert str(refused.value).startswith("t: ") and "Nothing was read or written" in str(
        refused.value
    )


def test_a_position_from_this_log_passes() -> None:
    check_same_log(
        "t",
        topic="orders",
        stored_topic_id=None,  # stored before ids were kept
        topic_id="id",
        stored_partitions=[0],
        present={0: 9},
        position=5,
        log_end=9,
        log_start=5,
    )
