"""Failover while cluster A does not answer: the switch translates from the kept offset syncs.

MM2 keeps the syncs of flow A->B on A, so with A down the switch cannot read them there. The
sink runs on A kept a copy in the keeper (:mod:`eos_pipeline.adapters.failover`); the
switch falls back to it, and the sink on B resumes exactly (every record once, the re-read
within ``offset.lag.max`` + 1). A is made unresponsive with SIGSTOP, as a hung broker is: its
port accepts connections that never get an answer. The switch asks A once, briefly, so it
decides within seconds; ``failover status`` names A unreachable, as fast.
"""

from __future__ import annotations

import time

import pytest
from clickhouse_connect.driver.client import Client

from eos_dev.stack.mirror import MirrorStack
from eos_pipeline.adapters.failover import SyncArchive, read_status, switch
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.failover import UNREACHABLE, Flow
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.mirror_fixtures import (
    clickhouse_failover_rig,
    cluster_frozen,
    produce_events,
    two_cluster_topic,
    wait_for_records,
)
from eos_pipeline_tests.support.sink_runs import run_active_clickhouse

pytestmark = pytest.mark.integration


def test_failover_with_the_source_cluster_down_resumes_exactly(
    mirror_stack: MirrorStack,
    cluster_settings: dict[str, KafkaSettings],
    zookeeper_hosts: str,
    chdb_client: Client,
) -> None:
    suffix, topic = two_cluster_topic(cluster_settings, "t-down")
    a, b = cluster_settings["A"], cluster_settings["B"]
    fp, spec, sink = clickhouse_failover_rig(
        mirror_stack, cluster_settings, chdb_client, f"p_down_{suffix}", topic
    )
    dlq = f"{topic}.dlq"
    lag_max = mirror_stack.config.offset_lag_max
    keeper = KeeperSettings(hosts=zookeeper_hosts, root=f"/eos_down_{suffix}")
    with KeeperStateStore(keeper) as store:
        produce_events(a, topic, 1, 300, prefix="a")
        run_active_clickhouse(fp, spec, store, sink, dlq)
        wait_for_records(b, TopicPartition(f"A.{topic}", 0), 300)
        produce_events(a, topic, 1, 170, prefix="m")
        wait_for_records(b, TopicPartition(f"A.{topic}", 0), 470)
        run_active_clickhouse(fp, spec, store, sink, dlq)  # keeps the syncs seen so far
        kept = SyncArchive(store, fp.name).load(Flow("A", "B"))
        assert kept is not None and len(kept) >= 2, "the sink runs kept no offset syncs"

        with cluster_frozen(mirror_stack, "A"):
            began = time.monotonic()
            report = switch(store, fp, "B")
            took = time.monotonic() - began
            print(f"[A down] switch took {took:.1f}s")
            # One short probe of A, then the kept copy: not a 10 s wait per read of A's topic.
            assert took < 8.0, f"the switch waited on the dead cluster: {took:.1f}s"
            assert report.moves, "nothing moved"
            produce_events(b, topic, 1, 40, prefix="b")
            reports = {r.tp: r for r in run_active_clickhouse(fp, spec, store, sink, dlq)}
            # `failover status` names the dead cluster (no traceback, no long wait)
            began = time.monotonic()
            status = read_status(store, fp, sample_s=0.0)
            print(f"[A down] status took {time.monotonic() - began:.1f}s")
            assert time.monotonic() - began < 8.0
            assert status.state.active == "B" and status.state.switch is None
            assert {f.flow: f.state for f in status.flows} == {
                Flow("A", "B"): UNREACHABLE,
                Flow("B", "A"): UNREACHABLE,
            }
            text = "\n".join(status.lines())
            assert f"A->B: unreachable: A: Kafka at {a.bootstrap_servers} did not answer" in text
        moved = reports[TopicPartition(f"A.{topic}", 0)]
        print(f"[A down] A.T on B: re-read {moved.reread}, skipped {moved.skipped}")
        assert moved.reread <= lag_max + 1 and moved.reread == moved.skipped
    rows = chdb_client.query(
        f"SELECT id, count() FROM {spec.database}.events GROUP BY id"
    ).result_rows
    ids = {str(i): int(n) for i, n in rows}
    assert set(ids.values()) == {1}, "written twice"
    expected = {f"a-{n}" for n in range(300)} | {f"m-{n}" for n in range(170)}
    assert set(ids) == expected | {f"b-{n}" for n in range(40)}
