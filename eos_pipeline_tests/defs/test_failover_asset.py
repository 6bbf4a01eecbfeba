"""The ClickHouse asset of a pipeline with two clusters follows the active one (real stack)."""

from __future__ import annotations

import uuid

import dagster as dg
import pytest
from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.failover import switch
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.defs.assets import clickhouse_key
from eos_pipeline.defs.builder import build_definitions
from eos_pipeline.defs.config import parse_config
from eos_pipeline.defs.failover import failover_pipeline
from eos_pipeline.defs.partitions import keys_for, partitions_name
from eos_pipeline_tests.mirror_fixtures import produce_events, wait_for_records

pytestmark = pytest.mark.integration


def test_the_asset_reads_the_active_clusters_topics_once_each(
    cluster_settings: dict[str, KafkaSettings], zookeeper_hosts: str, chdb_client: Client
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic, name = f"t-asset-{suffix}", f"p_asset_{suffix}"
    a, b = cluster_settings["A"], cluster_settings["B"]
    for settings in (a, b):
        create_topic(settings, topic, partitions=1)
    config = parse_config(
        f"""
keeper: {{hosts: '{zookeeper_hosts}', root: /eos_asset_{suffix}}}
clickhouse: {{url: 'chdb://{chdb_client.path}'}}
pipelines:
  - name: {name}
    kafka:
      bootstrap_servers: '{a.bootstrap_servers}'
      topics: [{topic}]
      clusters: {{A: '{a.bootstrap_servers}', B: '{b.bootstrap_servers}'}}
    schema: {{id: String}}
    clickhouse: {{database: db_{name}, table: events}}
""",
        "test.yaml",
    )
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
        keeper = KeeperSettings(hosts=zookeeper_hosts, root=f"/eos_asset_{suffix}")
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
