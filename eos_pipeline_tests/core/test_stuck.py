"""Partitions a range run set aside for a person: recorded, read back, left out while stuck."""

from __future__ import annotations

from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.offsets import OffsetRange
from eos_pipeline.core.planning import (
    NEEDS_PERSON_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RunInfo,
    TopicState,
    clickhouse_range_run,
    decode,
    encode,
    set_aside,
    state_label,
    stuck_partitions,
)

K0, K1, K2 = "events__p0000", "events__p0001", "events__p0002"
AT_10 = SinkState(OffsetRange(0, 10), Phase.AFTER)


def test_labels_and_the_tag_round_trip() -> None:
    assert state_label(None) == "none"
    assert state_label(AT_10) == "AFTER:0-10"
    stuck = {K1: ("AFTER:0-10", "KafkaReadError: " + "x" * 1000), K0: ("none", "gone")}
    back = decode(encode(stuck))
    assert back[K0] == ("none", "gone") and len(back[K1][1]) == 300
    assert decode("not json") == {} and decode("[1, 2]") == {} and decode('{"k": 3}') == {}


def test_the_newest_failed_run_says_which_partitions_are_stuck() -> None:
    newest = RunInfo("r2", {NEEDS_PERSON_TAG: encode({K0: ("AFTER:0-10", "new cause")})})
    older = RunInfo("r1", {NEEDS_PERSON_TAG: encode({K0: ("none", "old"), K1: ("none", "b")})})
    plain = RunInfo("r0", {})
    assert stuck_partitions([newest, plain, older]) == {
        K0: ("AFTER:0-10", "new cause"),
        K1: ("none", "b"),
    }


def test_set_aside_only_while_the_state_is_the_one_it_failed_from() -> None:
    stuck = {K0: ("AFTER:0-10", "KafkaReadError: offset 10 is no longer in the log")}
    line = set_aside(K0, AT_10, stuck)
    assert line is not None and "no longer in the log" in line and "by hand" in line
    moved = SinkState(OffsetRange(10, 20), Phase.AFTER)
    assert set_aside(K0, moved, stuck) is None  # a person's run moved it: back in the runs
    assert set_aside(K1, AT_10, stuck) is None


def _plan(ends: dict[int, int], stuck: dict[str, tuple[str, str]]):  # type: ignore[no-untyped-def]
    state = TopicState("events", ends, {p: AT_10 for p in ends})
    return clickhouse_range_run(
        "p.clickhouse",
        [state],
        ordered_keys=[K0, K1, K2],
        busy=(),
        failures={},
        max_attempts=3,
        reset="earliest",
        chdb_path="/data/chdb",
        stuck=stuck,
    )


def test_the_range_run_leaves_the_stuck_partition_out_and_warns() -> None:
    stuck = {K0: ("AFTER:0-10", "KafkaReadError: gone")}
    (run,) = (plan := _plan({0: 30, 1: 15, 2: 12}, stuck)).runs
    assert (run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG]) == (K1, K2)
    (warning,) = plan.given_up
    assert K0 in warning and "gone" in warning
    # only the stuck one lags: no run, and the skip reason says why
    alone = _plan({0: 30, 1: 10, 2: 10}, stuck)
    assert alone.runs == () and K0 in str(alone.skip_reason)
    # without the record it is in the range again
    (run,) = _plan({0: 30, 1: 15, 2: 12}, {}).runs
    assert run.tags[RANGE_START_TAG] == K0
