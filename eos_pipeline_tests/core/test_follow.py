"""The rule of following runs: when they stop, whom they give way to, what is pending."""

from __future__ import annotations

from eos_pipeline.core.planning import (
    CHDB_PATH_TAG,
    FOLLOW_TAG,
    HUDI_TABLE_TAG,
    PARTITION_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    SINK_TAG,
    FollowPolicy,
    follows,
    pending,
    stop_reason,
    yields_to,
)

POLICY = FollowPolicy(idle_seconds=5, max_seconds=60, poll_seconds=0.1)


def _stop(now: float, last_data: float = 0.0, waiting: bool = False) -> str | None:
    return stop_reason(POLICY, started=0.0, last_data=last_data, now=now, others_waiting=waiting)


def test_follows_while_records_keep_coming_and_stops_when_idle_or_at_the_cap() -> None:
    assert _stop(4.9) is None
    assert _stop(5.0) == "no new records for 5 s"
    assert _stop(30.0, last_data=29.0) is None
    assert _stop(60.0, last_data=59.9) == "followed for 60 s (the most a run follows)"
    assert "waits" in str(_stop(0.1, waiting=True))
    assert not FollowPolicy().enabled and POLICY.enabled


def test_gives_way_to_runs_that_may_need_the_path_only() -> None:
    sink, path = "p.clickhouse", "/data/chdb"
    hudi = {SINK_TAG: "p.hudi", "eos_pipeline/hudi_table": "/t"}
    assert not yields_to(sink, path, [hudi])
    assert not yields_to(sink, path, [])
    assert yields_to(sink, path, [hudi, {}])  # launched by hand: its needs are unknown
    assert yields_to(sink, path, [{SINK_TAG: sink}])
    assert yields_to(sink, path, [{SINK_TAG: "q.clickhouse", CHDB_PATH_TAG: path}])
    # on a server a following run holds only its partition: the sensor's runs of the other
    # partitions (same sink) go on; a run of its partition, or a range launched by hand, stop it
    k0, k1 = "t__p0000", "t__p0001"
    other_partition = {SINK_TAG: sink, PARTITION_TAG: k1}
    assert not yields_to(sink, None, [other_partition, hudi], k0)
    assert yields_to(sink, None, [{PARTITION_TAG: k0}], k0)
    assert yields_to(sink, None, [{RANGE_START_TAG: k0, RANGE_END_TAG: k1}], k0)
    assert not yields_to(sink, None, [{SINK_TAG: "q.clickhouse", CHDB_PATH_TAG: path}], k0)


def test_a_following_hudi_run_gives_way_to_runs_that_may_write_its_table_only() -> None:
    sink, table = "p.hudi", "/data/hudi/events"

    def gives_way(*queued: dict[str, str]) -> bool:
        return yields_to(sink, table, queued, held_tag=HUDI_TABLE_TAG)

    chdb = {SINK_TAG: "p.clickhouse", CHDB_PATH_TAG: "/data/chdb"}
    other_table = {SINK_TAG: "q.hudi", HUDI_TABLE_TAG: "/data/hudi/other"}
    assert not gives_way() and not gives_way(chdb, other_table)
    assert gives_way(chdb, {})  # a backfill, a run from the UI: its needs are unknown
    assert gives_way({"eos_pipeline/replay": "hudi"})  # a replay job: no sink tag
    assert gives_way({SINK_TAG: "q.hudi", HUDI_TABLE_TAG: table})  # another pipeline's run
    assert gives_way({SINK_TAG: sink})
    # a chDB path that happens to equal the table's path is not the table
    assert not gives_way({SINK_TAG: "p.clickhouse", CHDB_PATH_TAG: table})


def test_only_tagged_runs_of_a_single_cluster_pipeline_follow() -> None:
    tagged = {FOLLOW_TAG: "true"}
    assert follows(POLICY, tagged, clustered=False)
    assert not follows(POLICY, {}, clustered=False)  # launched by hand
    assert not follows(POLICY, tagged, clustered=True)
    assert not follows(FollowPolicy(idle_seconds=0), tagged, clustered=False)  # turned off


def test_pending_partitions_are_those_with_records_past_the_position() -> None:
    ends = {"t__p0001": 9, "t__p0000": 4, "t__p0002": 7}
    assert pending(ends, {"t__p0000": 4, "t__p0001": 3, "t__p0002": 2}) == [
        "t__p0001",
        "t__p0002",
    ]
    assert pending(ends, {"t__p0000": 4}) == []  # unknown partitions are not followed
