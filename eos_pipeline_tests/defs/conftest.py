"""A pipelines file per test, pointing at the session's real stack, chDB engine and a temp dir."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
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
from eos_pipeline.components.config import PipelinesFile, parse_config


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


def run_in_flight(instance: dg.DagsterInstance, tags: dict[str, str]) -> dg.DagsterRun:
    """A run with ``tags`` recorded as started: what a sensor sees while a run it asked for
    writes (nothing is executed)."""
    job = dg.Definitions(jobs=[dg.define_asset_job("job")]).get_job_def("job")
    return instance.create_run_for_job(job, tags=tags, status=dg.DagsterRunStatus.STARTED)


def following(
    config: PipelinesFile, idle_seconds: float, sink: str = "clickhouse"
) -> PipelinesFile:
    """The same pipelines, the runs of their ``sink`` (``clickhouse`` or ``hudi``) following
    the stream."""
    from eos_pipeline.components.config import Follow

    pipelines = []
    for p in config.pipelines:
        target = getattr(p, sink)
        assert target is not None
        target = target.model_copy(update={"follow": Follow(idle_seconds=idle_seconds)})
        pipelines.append(p.model_copy(update={sink: target}))
    return config.model_copy(update={"pipelines": pipelines})
