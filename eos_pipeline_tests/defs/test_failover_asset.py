"""The ClickHouse asset of a pipeline with two clusters follows the active one (real stack)."""

from __future__ import annotations

import dagster as dg
import pytest
from clickhouse_connect.driver.client import Client

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
)
from eos_pipeline_tests.support.definitions import build_definitions

pytestmark = pytest.mark.integration


def test_the_asset_reads_the_active_clusters_topics_once_each(
    cluster_settings: dict[str, KafkaSettings], zookeeper_hosts: str, chdb_client: Client
) -> None:
    suffix, topic = two_cluster_topic(cluster_settings, "t-asset")
    name = f"p_asset_{suffix}"
    a, b = cluster_settings["A"], cluster_settings["B"]
    text = clickhouse_pipeline_yaml(
        zookeeper_hosts, chdb_client.path, cluster_settings, name, topic
    )
    config = parse_config(text, "test.yaml")
    defs = build_definitions(config)
    [key] = keys_for(topic, 1)

    def materialize(instance: dg.DagsterInstance) -> dict[str, object]:
        result = dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=dg.AssetSelection.assets(clickhouse_key(config.pipelines[0])),
            partition_key=key,
            instance=instance,
            resources=defs.resources,
        )
        [event] = result.get_asset_materialization_events()
        meta = event.step_materialization_data.materialization.metadata
        return {k: v.value for k, v in meta.items()}

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(name), [key])
        produce_events(a, topic, 1, 50, prefix="a")
        first = materialize(instance)
        assert (first["cluster"], first["inserted"]) == ("A", 50)
        wait_for_records(b, TopicPartition(f"A.{topic}", 0), 50)
        keeper = KeeperSettings(hosts=zookeeper_hosts, root=f"/eos_{name}")
        with KeeperStateStore(keeper) as store:
            switch(store, failover_pipeline(config.pipelines[0]), "B")
        produce_events(b, topic, 1, 20, prefix="b")
        second = materialize(instance)
        assert (second["cluster"], second["inserted"]) == ("B", 20)
        assert second["skipped_after_switch"] == second["reread_after_switch"] >= 1
    rows = chdb_client.query(f"SELECT id, count() FROM db_{name}.events GROUP BY id").result_rows
    ids = {str(i): int(n) for i, n in rows}
    assert set(ids.values()) == {1}
    assert set(ids) == {f"a-{n}" for n in range(50)} | {f"b-{n}" for n in range(20)}
