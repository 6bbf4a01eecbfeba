"""The ranges of one Hudi transaction: every branch of the rule, no stack."""

from __future__ import annotations

import pytest

from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import TransactionRefused, plan_ranges

T = "events"


def tp(p: int, topic: str = T) -> TopicPartition:
    return TopicPartition(topic, p)


def test_stored_positions_are_the_start_and_the_batch_limit_caps_the_end() -> None:
    planned = plan_ranges(
        "t", T, {tp(0): 5, tp(1): 8}, {0: 20, 1: 9}, {0: 0, 1: 0}, reset="earliest", max_records=10
    )
    assert planned.start == {tp(0): 5, tp(1): 8}
    assert planned.ranges == {tp(0): OffsetRange(5, 15), tp(1): OffsetRange(8, 9)}
    assert planned.checkpoint == {tp(0): 15, tp(1): 9}


@pytest.mark.parametrize(("reset", "start"), [("earliest", 3), ("latest", 20)])
def test_a_partition_never_seen_starts_from_the_reset_policy(reset: str, start: int) -> None:
    planned = plan_ranges("t", T, {}, {0: 20}, {0: 3}, reset=reset, max_records=100)  # type: ignore
    assert planned.start == {tp(0): start}
    assert planned.ranges == {tp(0): OffsetRange(start, 20)}


def test_partitions_not_chosen_are_carried_forward_and_until_caps_without_going_back() -> None:
    planned = plan_ranges(
        "t",
        T,
        {tp(0): 5, tp(1): 6, tp(2): 7},
        {0: 20, 1: 20, 2: 20},
        {0: 0, 1: 0, 2: 0},
        reset="earliest",
        max_records=100,
        partitions=[2, 0],
        until={0: 9, 2: 1},
    )
    assert planned.ranges == {tp(0): OffsetRange(5, 9), tp(2): OffsetRange(7, 7)}
    assert planned.checkpoint == {tp(0): 9, tp(1): 6, tp(2): 7}


@pytest.mark.parametrize(
    ("stored", "ends", "lows", "partitions", "message"),
    [
        ({tp(0, "other"): 1}, {0: 5}, {0: 0}, None, r"for topic\(s\) \['other'\]"),
        ({tp(0): 1, tp(3): 1}, {0: 5}, {0: 0}, None, r"names partition\(s\) \[3\]"),
        ({tp(0): 1}, {0: 5}, {0: 0}, [0, 4], r"partition\(s\) \[4\] do not exist"),
        ({tp(0): 9}, {0: 5}, {0: 0}, None, r"read up to offset 9 but Kafka's log ends at 5"),
        ({tp(0): 2}, {0: 9}, {0: 5}, None, r"offsets \[2, 5\) were deleted"),
    ],
)
def test_what_would_lose_or_repeat_records_is_refused(
    stored: dict[TopicPartition, int],
    ends: dict[int, int],
    lows: dict[int, int],
    partitions: list[int] | None,
    message: str,
) -> None:
    with pytest.raises(TransactionRefused, match=message):
        plan_ranges(
            "t", T, stored, ends, lows, reset="earliest", max_records=10, partitions=partitions
        )
