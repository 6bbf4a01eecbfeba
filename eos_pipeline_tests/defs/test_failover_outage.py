"""Cluster A's broker stopped after a failover to B, then restarted (real two-cluster stack).

What an operator lives through in an outage: once the pipeline runs on B, the old cluster being
down is a fact to show, not an error. No sensor tick of the pipeline raises, the run on B goes
green, and the exactly-once check, whose proof spans the stretch read on A, files no verdict and
names the endpoint it could not read. When A's broker comes back, MirrorMaker 2 replicates both
ways again by itself, long before Connect's 300 s rebalance delay (same process: no restart
by a person; ``mirror_fixtures.MIRROR_RESUMES_WITHIN``).
"""

from __future__ import annotations

import dagster as dg
import pytest
from clickhouse_connect.driver.client import Client

from eos_dev.stack.mirror import MirrorStack
from eos_pipeline.adapters.failover import switch
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.components.assets import clickhouse_key
from eos_pipeline.components.config import parse_config
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.components.source import failover_pipeline
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import keys_for
from eos_pipeline_tests.mirror_fixtures import (
    clickhouse_pipeline_yaml,
    produce_events,
    two_cluster_topic,
    wait_for_records,
    wait_until_replicating,
)
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.sensor_tick import tick

pytestmark = pytest.mark.integration


def test_cluster_a_down_after_a_failover_fails_nothing_and_mirrormaker_resumes_by_itself(
    mirror_stack: MirrorStack,
    cluster_settings: dict[str, KafkaSettings],
    zookeeper_hosts: str,
    chdb_client: Client,
) -> None:
    suffix, topic = two_cluster_topic(cluster_settings, "t-outage")
    name = f"p_out_{suffix}"
    a, b = cluster_settings["A"], cluster_settings["B"]
    config = parse_config(
        clickhouse_pipeline_yaml(zookeeper_hosts, chdb_client.path, cluster_settings, name, topic),
        "test.yaml",
    )
    [pipeline] = config.pipelines
    defs = build_definitions(config)
    [partition] = keys_for(topic, 1)
    sensors = [s.name for s in defs.get_repository_def().sensor_defs if s.name.startswith(name)]
    assert len(sensors) >= 3, sensors  # the lag, topics and partitions sensors at least

    def run(instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
        return dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=dg.AssetSelection.assets(clickhouse_key(pipeline)),
            partition_key=partition,
            instance=instance,
            resources=defs.resources,
            raise_on_error=False,
        )

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(name), [partition])
        produce_events(a, topic, 1, 40, prefix="a")
        on_a = run(instance)
        assert on_a.success and on_a.get_asset_check_evaluations()[0].passed
        wait_for_records(b, TopicPartition(f"A.{topic}", 0), 40)
        with KeeperStateStore(KeeperSettings(hosts=zookeeper_hosts, root=f"/eos_{name}")) as store:
            switch(store, failover_pipeline(pipeline), "B")
        produce_events(b, topic, 1, 20, prefix="b")

        broker = mirror_stack._brokers["A"]
        mirror_pid = {s.name: s.pid for s in mirror_stack.status()}["mirrormaker"]
        broker.down(30.0)
        try:
            for sensor in sensors:  # a tick that raises is a red traceback in the UI
                tick(defs, sensor, instance)
            on_b = run(instance)
            assert on_b.success, "a run on B went red because A, the old cluster, is down"
            [written] = on_b.get_asset_materialization_events()
            assert written.materialization.metadata["cluster"].value == "B"
            assert not [e for e in on_b.get_asset_check_evaluations() if not e.passed]
            said = [
                str(o.asset_observation_data.asset_observation.metadata)
                for o in on_b.all_events
                if o.event_type_value == "ASSET_OBSERVATION"
            ]
            assert any(a.bootstrap_servers in text for text in said), said
        finally:
            broker.up()

        wait_until_replicating(mirror_stack)
        assert {s.name: s.pid for s in mirror_stack.status()}["mirrormaker"] == mirror_pid
