"""The switch planner and the moves of positions between clusters: pure, no stack."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from eos_pipeline.core.failover import (
    STEPS,
    ActiveState,
    ClusterSet,
    FailoverError,
    Flow,
    OffsetSync,
    PhysicalTopic,
    SwitchInFlight,
    SwitchRefused,
    SyncHistory,
    move,
    plan_switch,
)
from eos_pipeline.core.keeper import KeeperRecord, Mark
from eos_pipeline_tests.support.offset_syncs import add_syncs

AB = ClusterSet.both_ways(("A", "B"))
FP = "0123456789abcdef0123456789abcdef"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _record(end: int, mark: Mark | None, phase: str = "AFTER") -> KeeperRecord:
    return KeeperRecord(1, "abcdef0123456789", "w", NOW, end, end, phase, mark=mark)


def _history(flow: Flow, pairs: list[tuple[int, int]]) -> SyncHistory:
    history = SyncHistory(flow)
    add_syncs(history, (OffsetSync("T", 0, u, d) for u, d in pairs))
    return history


def test_a_fresh_switch_runs_every_step() -> None:
    assert plan_switch(ActiveState("A"), AB, "B").steps == STEPS


def test_switching_to_the_active_cluster_does_nothing() -> None:
    assert plan_switch(ActiveState("B", None, 1), AB, "B").steps == ()


def test_a_switch_in_flight_resumes_after_begin() -> None:
    state = ActiveState("A").begun("B")
    assert state.switch == SwitchInFlight("A", "B")
    plan = plan_switch(state, AB, "B")
    assert (plan.source, plan.steps) == ("A", STEPS[1:])
    assert state.finished() == ActiveState("B", None, 1)


@pytest.mark.parametrize(
    ("state", "clusters", "target", "message"),
    [
        (ActiveState("A"), AB, "C", "unknown cluster 'C'"),
        (ActiveState("A").begun("B"), AB, "A", "switch A -> B is in flight"),
        (
            ActiveState("A"),
            ClusterSet.parse(["A", "B"], ["B->A"]),
            "B",
            "does not replicate A -> B",
        ),
    ],
)
def test_bad_switches_are_refused(
    state: ActiveState, clusters: ClusterSet, target: str, message: str
) -> None:
    with pytest.raises(SwitchRefused, match=message):
        plan_switch(state, clusters, target)


def test_state_round_trips_and_corruption_is_named() -> None:
    for state in (ActiveState("A"), ActiveState("A").begun("B"), ActiveState("B", None, 3)):
        assert ActiveState.decode(state.encode(), "/p") == state
    with pytest.raises(FailoverError, match="corrupt failover state at /p"):
        ActiveState.decode(b'{"v": 9}', "/p")


def test_cluster_sets_parse_flows() -> None:
    assert ClusterSet.parse(["A", "B"]).flows == {Flow("A", "B"), Flow("B", "A")}
    with pytest.raises(FailoverError, match="not '<alias>-><alias>'"):
        ClusterSet.parse(["A", "B"], ["A->C"])
    with pytest.raises(FailoverError, match="two or more"):
        ClusterSet.parse(["A"])


def test_topics_on_a_cluster_are_the_local_one_and_the_replicas_mm2_makes() -> None:
    assert [t.topic for t in AB.topics("T", "B")] == ["T", "A.T"]
    one_way = ClusterSet.parse(["A", "B"], ["A->B"])
    assert [t.topic for t in one_way.topics("T", "A")] == ["T"]


LOCAL_A = PhysicalTopic("A", "T", "A", "T")


def test_a_located_mark_moves_to_the_window_of_its_copy() -> None:
    history = _history(Flow("A", "B"), [(0, 0), (100, 105), (200, 212)])
    moved = move(LOCAL_A, 0, _record(151, Mark(FP, 150)), "B", AB, history)
    assert moved.route.target.topic == "A.T"
    # The copy of upstream 150 lies after 105 (the copy of 100) and before 212.
    assert (moved.position, moved.mark) == (106, Mark(FP, None, 212))


def test_an_exactly_synced_mark_gives_a_one_record_window() -> None:
    history = _history(Flow("A", "B"), [(0, 0), (150, 160)])
    moved = move(LOCAL_A, 0, _record(151, Mark(FP, 150)), "B", AB, history)
    assert (moved.position, moved.mark) == (160, Mark(FP, None, 161))


def test_back_to_the_origin_the_syncs_are_inverted() -> None:
    replica = PhysicalTopic("B", "A.T", "A", "T")
    history = _history(Flow("A", "B"), [(0, 0), (100, 105), (200, 212)])
    moved = move(replica, 0, _record(160, Mark(FP, 159)), "A", AB, history)
    assert moved.route.direction == "inverse" and moved.route.target.topic == "T"
    assert (moved.position, moved.mark) == (101, Mark(FP, None, 200))


def test_a_pending_mark_is_carried_with_an_open_window() -> None:
    history = _history(Flow("A", "B"), [(0, 0), (100, 105)])
    replica = PhysicalTopic("B", "A.T", "A", "T")
    moved = move(replica, 0, _record(120, Mark(FP)), "A", AB, history)
    assert (moved.position, moved.mark) == (101, Mark(FP, None, None))


def test_without_a_mark_only_an_exact_position_moves() -> None:
    history = _history(Flow("A", "B"), [(0, 0), (100, 105)])
    assert move(LOCAL_A, 0, _record(100, None), "B", AB, history).position == 105
    assert move(LOCAL_A, 0, _record(0, None), "B", AB, history).position == 0
    with pytest.raises(SwitchRefused, match="no fingerprint"):
        move(LOCAL_A, 0, _record(50, None), "B", AB, history)


def test_a_write_in_flight_does_not_move() -> None:
    record = KeeperRecord(1, "abcdef0123456789", "w", NOW, 10, 20, "BEFORE")
    with pytest.raises(SwitchRefused, match="write is in flight"):
        move(LOCAL_A, 0, record, "B", AB, SyncHistory(Flow("A", "B")))


def test_a_flow_mm2_does_not_replicate_is_refused() -> None:
    one_way = ClusterSet.parse(["A", "B"], ["A->B"])
    replica = PhysicalTopic("A", "B.T", "B", "T")
    with pytest.raises(SwitchRefused, match="flow B->A"):
        move(replica, 0, _record(5, Mark(FP, 4)), "B", one_way, SyncHistory(Flow("B", "A")))
