"""A pipeline whose columns come from a registry subject, materialized with Dagster on the real
stack and registry: the materialization records the schema the table is at, and the evolution a
run applied when records of a newer writer schema arrived (issue 27)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.components.assets import clickhouse_key
from eos_pipeline.components.config import parse_config
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.core.planning import keys_for
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.evolution import V1, V2, v1, v2, writer

pytestmark = pytest.mark.integration


def test_a_subject_pipeline_records_its_schema_and_the_evolution_a_run_applied(
    kafka_settings: KafkaSettings,
    zookeeper_hosts: str,
    chdb_client: Client,
    schema_registry: str,
    topic_name: str,
    tmp_path: Path,
) -> None:
    create_topic(kafka_settings, topic_name, 1)
    database = f"db_{tmp_path.name[-20:]}".replace("-", "_")

    def send(schema: str, records: list[dict]) -> int:
        write = writer(schema_registry, topic_name, schema)
        produce_all(idempotent_producer(kafka_settings), topic_name,
                    [(0, None, write(r)) for r in records])  # fmt: skip
        return int.from_bytes(write(records[0])[1:5], "big")

    v1_id = send(V1, [v1(i) for i in range(3)])
    text = f"""
keeper: {{hosts: '{zookeeper_hosts}'}}
clickhouse: {{url: 'chdb://{chdb_client.path}'}}
pipelines:
  - name: subject_asset
    kafka: {{bootstrap_servers: '{kafka_settings.bootstrap_servers}', topics: [{topic_name}]}}
    format: avro
    registry: {{url: '{schema_registry}', subject: {topic_name}-value}}
    clickhouse: {{database: {database}, table: sales}}
"""
    config = parse_config(text, "subject.yaml")
    defs = build_definitions(config)  # resolves the subject: v1 is its latest
    key = clickhouse_key(config.pipelines[0])
    (partition,) = keys_for(topic_name, 1)

    def materialize(instance: dg.DagsterInstance) -> dict:
        result = dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=dg.AssetSelection.assets(key),
            partition_key=partition,
            instance=instance,
            resources=defs.resources,
        )
        (check,) = result.get_asset_check_evaluations()
        assert check.passed
        (event,) = result.get_asset_materialization_events()
        return event.materialization.metadata

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name("subject_asset"), [partition])
        first = materialize(instance)
        assert first["schema_id"].value == v1_id and "schema_evolution" not in first
        v2_id = send(V2, [v2(i) for i in range(3, 6)])
        second = materialize(instance)
    assert second["schema_id"].value == v2_id
    (applied,) = second["schema_evolution"].value
    assert (applied["from_schema_id"], applied["schema_id"]) == (v1_id, v2_id)
    assert applied["columns_added"] == ["channel String", "coupon Nullable(String)"]
    rows = chdb_client.query(f"SELECT id, channel, qty FROM `{database}`.sales ORDER BY id")
    assert [tuple(r) for r in rows.result_rows] == [
        *((i, "web", i) for i in range(3)),
        *((i, f"ch{i}", (1 << 33) + i) for i in range(3, 6)),
    ]
