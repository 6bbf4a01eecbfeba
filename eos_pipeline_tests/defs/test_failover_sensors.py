"""The sensors of a pipeline with two clusters follow the active one, through a failover.

On the real two-cluster stack: the ClickHouse and Hudi lag sensors and the topics sensor read the
active cluster's keys, the Hudi table's cluster position and the active cluster's physical
topics. Caught up on A, they request nothing; right after a switch to B they request the runs
that move the positions; once those ran, nothing again; mid-switch they skip.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest
from clickhouse_connect.driver.client import Client
from pyspark.sql import SparkSession

from eos_dev.stack.mirror import MirrorStack
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.failover import FailoverStates, switch
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.components.assets import clickhouse_spec, hudi_key, hudi_spec, topic_key
from eos_pipeline.components.checks import hudi_identity_proofs
from eos_pipeline.components.config import parse_config
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.components.source import failover_pipeline
from eos_pipeline.core.failover import ActiveState
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import partition_key
from eos_pipeline.sinks.hudi import HudiTableSync
from eos_pipeline.sinks.source import ActiveCluster
from eos_pipeline_tests.mirror_fixtures import produce_events, wait_for_records
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.sensor_tick import tick
from eos_pipeline_tests.support.sink_runs import run_active_clickhouse

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_sensors_follow_the_active_cluster_through_a_failover(
    mirror_stack: MirrorStack,
    cluster_settings: dict[str, KafkaSettings],
    zookeeper_hosts: str,
    chdb_client: Client,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    name, topic, root = f"p_{suffix}", f"t-sensors-{suffix}", f"/eos_fs_{suffix}"
    a, b = cluster_settings["A"], cluster_settings["B"]
    for settings in (a, b):
        create_topic(settings, topic, partitions=1)
    options = dict(SMALL_TABLE_OPTIONS)
    text = f"""
keeper: {{hosts: '{zookeeper_hosts}', root: '{root}'}}
clickhouse: {{url: 'chdb://{chdb_client.path}'}}
sensor_interval_seconds: 1
pipelines:
  - name: {name}
    kafka:
      bootstrap_servers: '{a.bootstrap_servers}'
      topics: [{topic}]
      clusters: {{A: '{a.bootstrap_servers}', B: '{b.bootstrap_servers}'}}
      offset_syncs_location: {mirror_stack.config.offset_syncs_location}
    schema: {{id: String}}
    clickhouse: {{database: db_{suffix}, table: events}}
    hudi: {{path: '{tmp_path / "hudi"}', table: events_{suffix}, options: {options}}}
"""
    config = parse_config(text, "test.yaml")
    [pipeline] = config.pipelines
    defs = build_definitions(config)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(
        partitions_name(name), [partition_key(TopicPartition(topic, 0))]
    )
    fp = failover_pipeline(pipeline)
    ch_spec = clickhouse_spec(pipeline)
    sink = ClickHouseSink(chdb_client)
    sink.ensure_table(ch_spec.database, ch_spec.table, ch_spec.schema)
    store = KeeperStateStore(KeeperSettings(hosts=zookeeper_hosts, root=root))
    store.start()
    lag_sensors = (f"{name}_clickhouse_lag", f"{name}_hudi_lag")

    def requests() -> dict[str, int]:
        return {s: len(tick(defs, s, instance).run_requests or []) for s in lag_sensors}

    def run_both() -> None:
        run_active_clickhouse(fp, ch_spec, store, sink, pipeline.dead_letter_topic)
        source, spec = ActiveCluster(fp, store), hudi_spec(pipeline, {})
        dead_letters = DeadLetterWriter(source.kafka, pipeline.dead_letter_topic, spec.pipeline)
        HudiTableSync(spec, source, spark, dead_letters).run()

    try:
        produce_events(a, topic, 1, 60, prefix="a")
        assert requests() == dict.fromkeys(lag_sensors, 1)
        run_both()
        assert requests() == dict.fromkeys(lag_sensors, 0), "caught up on A"

        wait_for_records(b, TopicPartition(f"A.{topic}", 0), 60)
        states = FailoverStates(store)
        states.write(name, ActiveState("A").begun("B"), None)
        for sensor in (*lag_sensors, f"{name}_topics"):
            skipped = tick(defs, sensor, instance)
            assert not skipped.run_requests and "in flight" in (skipped.skip_message or "")
        switch(store, fp, "B")
        produce_events(b, topic, 1, 20, prefix="b")
        # On B: the moved positions are behind (ClickHouse), the table still on A (Hudi).
        assert requests() == dict.fromkeys(lag_sensors, 1)
        run_active_clickhouse(fp, ch_spec, store, sink, pipeline.dead_letter_topic)
        # The Hudi run the sensor asks for, through Dagster: the asset moves the table to B.
        [request] = tick(defs, f"{name}_hudi_lag", instance).run_requests
        [asset] = [d for d in defs.assets if getattr(d, "key", None) == hudi_key(pipeline)]
        result = dg.materialize(
            [asset],
            instance=instance,
            resources=defs.resources,
            tags=request.tags,
            partition_key=request.partition_key,
        )
        assert result.success
        metadata = result.get_asset_materialization_events()[0].materialization.metadata
        assert metadata["cluster"].value == "B"
        assert metadata["inserted"].value == 20
        assert 0 < metadata["reread_after_switch"].value <= mirror_stack.config.offset_lag_max + 1
        assert requests() == dict.fromkeys(lag_sensors, 0), "caught up on B"
        observed = tick(defs, f"{name}_topics", instance)
        [event] = [e for e in observed.asset_events if e.asset_key == topic_key(topic)]
        assert event.metadata["cluster"].value == "B"
        # what `eos-pipeline failover status` prints, on the topic's page: B active, both flows
        printed = event.metadata["failover_status"].value
        assert f"{name}: active cluster B (1 switch so far); no switch in flight" in printed
        assert {"mm2 A->B", "mm2 B->A"} <= set(event.metadata), printed
        assert event.metadata["clickhouse_lag"].value == 0
        assert event.metadata["hudi_lag"].value == 0
        # A.T's 60 and T's 20, on B (MM2's transaction markers take offsets of A.T too)
        assert 80 <= event.metadata["records_held"].value <= 90
        # The exactly-once proof over both clusters: the 60 read on A and the 20 on B, each
        # record once by identity (the copies of A's records on B are the same records).
        [found] = hudi_identity_proofs(pipeline, spark, [TopicPartition(topic, 0)])
        assert found.proof.passed, (found.proof.summary(), found.examples)
        assert (found.proof.kafka_records, found.proof.table_rows) == (80, 80)
    finally:
        store.close()
