"""MirrorMaker 2's lag per partition and flow, and what it means for a failback (pure rules)."""

from __future__ import annotations

from eos_pipeline.core.failover import (
    CAUGHT_UP,
    REPLICATING,
    STALLED,
    UNREACHABLE,
    Flow,
    FlowReplication,
    ReplicaFacts,
    failback_advice,
    partition_replication,
)


def _facts(**kw: object) -> ReplicaFacts:
    base: dict[str, object] = {
        "topic": "T",
        "partition": 0,
        "source_end": 100,
        "remote_end": 130,
        "synced_to": 60,
    }
    return ReplicaFacts(**{**base, **kw})  # type: ignore[arg-type]


def test_the_exact_copied_position_wins_over_the_syncs_bound() -> None:
    exact = partition_replication(_facts(copied_to=100))
    assert (exact.lag, exact.exact, exact.state) == (0, True, CAUGHT_UP)
    bound = partition_replication(_facts(sync_age_s=5.0))  # the replica's last record was not found
    assert (bound.lag, bound.exact, bound.state) == (40, False, REPLICATING)


def test_counted_records_replace_offsets_so_a_trailing_marker_is_not_lag() -> None:
    assert partition_replication(_facts(copied_to=99, uncopied_records=0)).state == CAUGHT_UP
    assert (
        partition_replication(_facts(copied_to=90, uncopied_records=7, remote_moved=True)).lag == 7
    )


def test_behind_without_a_fresh_sync_or_a_moving_replica_is_stalled() -> None:
    assert partition_replication(_facts(copied_to=90, sync_age_s=61.0)).state == STALLED
    assert partition_replication(_facts(copied_to=90, sync_age_s=59.0)).state == REPLICATING
    assert partition_replication(_facts(copied_to=90, remote_moved=True)).state == REPLICATING
    assert partition_replication(_facts(copied_to=90, sync_age_s=5.0), fresh_s=1.0).state == STALLED


def test_a_flow_is_as_bad_as_its_worst_partition_and_advice_follows_the_active_cluster() -> None:
    ok = partition_replication(_facts(copied_to=100))
    moving = partition_replication(_facts(partition=1, copied_to=97, remote_moved=True))
    stuck = partition_replication(_facts(partition=2, copied_to=90))
    a_to_b = FlowReplication(Flow("A", "B"), (ok, moving))
    b_to_a = FlowReplication(Flow("B", "A"), (ok, stuck))
    assert (a_to_b.state, a_to_b.lag) == (REPLICATING, 3)
    assert (b_to_a.state, b_to_a.lag) == (STALLED, 10)
    [on_b] = failback_advice("B", [a_to_b, b_to_a])
    assert "switch to A would wait for 10 records" in on_b and "restart-mirror" in on_b
    [on_a] = failback_advice("A", [a_to_b, b_to_a])
    assert "switch to B would wait for 3 records" in on_a
    assert failback_advice("A", [FlowReplication(Flow("A", "B"), (ok,))]) == [
        "a switch to B need not wait: A->B has copied everything"
    ]


def test_an_unreachable_cluster_is_a_state_not_a_lag() -> None:
    down = FlowReplication(Flow("A", "B"), unreachable=(("A", "127.0.0.1:1 unreachable"),))
    assert down.state == UNREACHABLE and down.lag == 0
    [advice] = failback_advice("A", [down])
    assert "must wait: A unreachable" in advice
    assert FlowReplication(Flow("A", "B"), missing=("T[0]",)).state == STALLED


def test_the_printed_status_names_each_case() -> None:
    from eos_pipeline.adapters.failover import FailoverStatus
    from eos_pipeline.core.failover import ActiveState

    exact = partition_replication(
        _facts(copied_to=97, uncopied_records=3, sync_age_s=4.0, last_sync=(96, 120))
    )
    bound = partition_replication(_facts(partition=1, remote_moved=True))
    status = FailoverStatus(
        "orders",
        ActiveState("A").begun("B"),
        (
            FlowReplication(Flow("A", "B"), (exact, bound), missing=("T[2]",), absent=("U",)),
            FlowReplication(Flow("B", "A"), unreachable=(("B", "Kafka at b:9092 did not ..."),)),
        ),
    )
    assert status.lines() == [
        "orders: active cluster A (0 switches so far); a switch A -> B is in flight (rerun "
        "`eos-pipeline failover --pipeline orders --to B`)",
        "A->B: stalled, lag 43 records",
        "  T[2]: no replica on B yet",
        "  U: not on A, nothing to copy",
        "  T[0]: replicating, lag 3; source end 100, copied up to 97; replica end 130 (not "
        "moving); last sync 96->120 4 s ago",
        "  T[1]: replicating, lag 40 at most; source end 100, copied up to at least 60 (by the "
        "syncs); replica end 130 (moving); no offset sync",
        "B->A: unreachable: B: Kafka at b:9092 did not ...",
        "a switch to B would wait for 43 records: MM2 is not copying A->B (no sync lately, the "
        "replica does not move); restart it (local stack: `eos-pipeline stack restart-mirror`)",
    ]
