"""Fixtures of the fault suite: a fresh topic, keeper root and chDB path per test, and one
stack of its own that tests may kill and restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline_tests.faults.harness import FaultRig
from eos_pipeline_tests.support.own_stack import OwnStack


@pytest.fixture(scope="package")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    """ZooKeeper + Kafka of the fault suite's own (see ``support.own_stack``); a test that
    stops a service starts it again before it ends."""
    own = OwnStack(tmp_path_factory.mktemp("own-stack"))
    own.stack.up()
    try:
        yield own
    finally:
        own.stack.down()


@pytest.fixture
def rig(kafka_settings: KafkaSettings, zookeeper_hosts: str, tmp_path: Path) -> FaultRig:
    return FaultRig(kafka_settings, zookeeper_hosts, tmp_path)


@pytest.fixture
def inproc_rig(
    kafka_settings: KafkaSettings, zookeeper_hosts: str, chdb_client: Client, tmp_path: Path
) -> FaultRig:
    """A rig whose sink runs in this process, on the session's chDB engine (own database)."""
    return FaultRig(kafka_settings, zookeeper_hosts, tmp_path, sink=ClickHouseSink(chdb_client))
