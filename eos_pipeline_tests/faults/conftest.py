"""Fixtures of the fault suite: a fresh topic, keeper root and chDB path per test."""

from __future__ import annotations

from pathlib import Path

import pytest
from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline_tests.faults.harness import FaultRig


@pytest.fixture
def rig(kafka_settings: KafkaSettings, zookeeper_hosts: str, tmp_path: Path) -> FaultRig:
    return FaultRig(kafka_settings, zookeeper_hosts, tmp_path)


@pytest.fixture
def inproc_rig(
    kafka_settings: KafkaSettings, zookeeper_hosts: str, chdb_client: Client, tmp_path: Path
) -> FaultRig:
    """A rig whose sink runs in this process, on the session's chDB engine (own database)."""
    return FaultRig(kafka_settings, zookeeper_hosts, tmp_path, sink=ClickHouseSink(chdb_client))
