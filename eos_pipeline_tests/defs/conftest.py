"""A pipelines file per test, pointing at the session's real stack, chDB engine and a temp dir."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.defs.config import PipelinesFile, parse_config


@dataclass
class Rig:
    config: PipelinesFile
    kafka: KafkaSettings
    topic: str
    database: str
    hudi_path: str
    pipeline: str

    def produce(self, per_partition: dict[int, int], bad_every: int = 0) -> None:
        """Produce records with unique ids; every ``bad_every``-th one does not decode."""
        records = []
        n = 0
        for partition, count in per_partition.items():
            for _ in range(count):
                n += 1
                if bad_every and n % bad_every == 0:
                    value = b'{"id": "not a number"}'
                else:
                    value = json.dumps({"id": n, "name": f"n{n}"}).encode()
                records.append((partition, None, value))
        produce_all(idempotent_producer(self.kafka), self.topic, records)


def pipeline_yaml(
    name: str,
    topic: str,
    bootstrap: str,
    zookeeper: str,
    chdb_path: str,
    database: str | None,
    hudi_path: str | None,
    max_records: int = 1000,
) -> str:
    targets = ""
    if database:
        targets += f"    clickhouse: {{database: {database}, table: events}}\n"
    if hudi_path:
        targets += f"    hudi: {{path: '{hudi_path}', table: {name}_events}}\n"
    return f"""
keeper: {{hosts: '{zookeeper}'}}
clickhouse: {{url: 'chdb://{chdb_path}'}}
spark: {{quick_start: true}}
sensor_interval_seconds: 1
pipelines:
  - name: {name}
    kafka: {{bootstrap_servers: '{bootstrap}', topics: [{topic}]}}
    schema: {{id: Int64, name: String}}
    batch: {{max_records: {max_records}}}
{targets}"""


@pytest.fixture
def make_rig(
    kafka_settings: KafkaSettings,
    zookeeper_hosts: str,
    chdb_client: Client,
    topic_name: str,
    tmp_path: Path,
) -> Callable[..., Rig]:
    def make(partitions: int = 2, clickhouse: bool = True, hudi: bool = False, **kw: int) -> Rig:
        name = "p_" + re.sub(r"[^A-Za-z0-9]", "_", topic_name)[-40:]
        database = f"db_{name}" if clickhouse else None
        hudi_path = str(tmp_path / "hudi" / name) if hudi else None
        text = pipeline_yaml(
            name,
            topic_name,
            kafka_settings.bootstrap_servers,
            zookeeper_hosts,
            chdb_client.path,
            database,
            hudi_path,
            **kw,
        )
        create_topic(kafka_settings, topic_name, partitions)
        return Rig(
            parse_config(text, "test.yaml"),
            kafka_settings,
            topic_name,
            database or "",
            hudi_path or "",
            name,
        )

    return make
