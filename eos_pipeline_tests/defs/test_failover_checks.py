"""The ClickHouse exactly-once check of a two-cluster pipeline proves every stretch (real stack).

After a failover to B and a failback to A the table holds rows read on A, on B (copies of A's
records and B's own) and on A again; the check identifies each record by fingerprint over every
cluster's committed range and passes, and fails once a row is deleted or doubled.
"""

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
from eos_pipeline.core.planning import SINK_TAG, keys_for
from eos_pipeline_tests.defs.conftest import run_in_flight
from eos_pipeline_tests.mirror_fixtures import (
    clickhouse_pipeline_yaml,
    produce_events,
    two_cluster_topic,
    wait_for_records,
)
from eos_pipeline_tests.support.definitions import build_definitions

pytestmark = pytest.mark.integration


def test_the_check_proves_every_cluster_stretch_and_sees_a_deleted_or_doubled_row(
    cluster_settings: dict[str, KafkaSettings], zookeeper_hosts: str, chdb_client: Client
) -> None:
    suffix, topic = two_cluster_topic(cluster_settings, "t-check")
    name = f"p_check_{suffix}"
    a, b = cluster_settings["A"], cluster_settings["B"]
    text = clickhouse_pipeline_yaml(
        zookeeper_hosts, chdb_client.path, cluster_settings, name, topic
    )
    config = parse_config(text, "test.yaml")
    pipeline = config.pipelines[0]
    defs = build_definitions(config)
    key = clickhouse_key(pipeline)
    [partition] = keys_for(topic, 1)
    table = f"db_{name}.events"
    keeper = KeeperSettings(hosts=zookeeper_hosts, root=f"/eos_{name}")

    def run(instance: dg.DagsterInstance, tags: dict[str, str]) -> dg.ExecuteInProcessResult:
        """Run the asset (caught up: nothing new is written) and its check."""
        return dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=dg.AssetSelection.assets(key),
            partition_key=partition,
            instance=instance,
            resources=defs.resources,
            tags=tags,
        )

    def materialize(instance: dg.DagsterInstance) -> dg.AssetCheckEvaluation:
        [evaluation] = run(instance, {}).get_asset_check_evaluations()
        return evaluation

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(name), [partition])
        produce_events(a, topic, 1, 40, prefix="a")
        assert materialize(instance).passed
        produce_events(a, topic, 1, 20, prefix="late")  # on A after the sink ran there
        wait_for_records(b, TopicPartition(f"A.{topic}", 0), 60)
        with KeeperStateStore(keeper) as store:
            switch(store, failover_pipeline(pipeline), "B")
        produce_events(b, topic, 1, 25, prefix="b")
        on_b = materialize(instance)
        assert on_b.passed, on_b.description
        wait_for_records(a, TopicPartition(f"B.{topic}", 0), 25)
        with KeeperStateStore(keeper) as store:
            switch(store, failover_pipeline(pipeline), "A")
        produce_events(a, topic, 1, 15, prefix="c")
        back = materialize(instance)
        assert back.passed, back.description
        topics = {
            str(t) for (t,) in chdb_client.query(f"SELECT DISTINCT _topic FROM {table}").result_rows
        }
        assert topics == {f"A:{topic}", f"B:A.{topic}", f"B:{topic}"}
        assert back.metadata["kafka_records"].value == 100

        # A row read on B, deleted: the record it stood for is missing.
        chdb_client.command(f"DELETE FROM {table} WHERE id = 'late-3'")
        deleted = materialize(instance)
        assert not deleted.passed
        assert deleted.metadata["gaps"].value == 1
        assert "missing" in str(deleted.metadata["identity"].value)
        chdb_client.command(
            f"INSERT INTO {table} SELECT * FROM {table} WHERE id = 'b-3' "
            "SETTINGS insert_deduplicate = 0"
        )
        doubled = materialize(instance)
        assert not doubled.passed
        assert doubled.metadata["duplicates"].value == 1 and doubled.metadata["gaps"].value == 1
        assert f"B:{topic}[0]@" in str(doubled.metadata["identity"].value)

        # A run of the sink tagged as the sensor tags it: its own check still judges ...
        sink = {SINK_TAG: f"{name}.clickhouse"}
        assert run(instance, sink).get_asset_check_evaluations()
        # ... but not while another run of the sink is in flight (after a switch it may still be
        # skipping through what the old cluster wrote): no evaluation, the run stays green
        run_in_flight(instance, sink)
        waiting = run(instance, sink)
        assert waiting.success and not waiting.get_asset_check_evaluations()
        [said] = [
            e.asset_observation_data.asset_observation.metadata["exactly_once_not_evaluated"]
            for e in waiting.all_events
            if e.event_type_value == "ASSET_OBSERVATION"
        ]
        assert "in flight" in said.value
