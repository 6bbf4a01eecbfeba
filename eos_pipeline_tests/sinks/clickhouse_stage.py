"""What the ClickHouse sink and replay tests stand on: a fresh table, keeper root and topic.

Each test gets its own database (an ``events`` table of :data:`SCHEMA` in the session's chDB
engine), its own keeper root, pipeline name and topic, on the session's real Kafka and ZooKeeper.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.schema import TableSchema

SCHEMA = TableSchema.from_mapping({"id": "Int64", "name": "String"})
TABLE = "events"


class InjectedCrash(Exception):
    """Stands in for the process dying at a step boundary (the SIGKILL variants are in the fault
    suite); nothing after the boundary runs, which is what matters for the state left behind."""


@dataclass
class ClickHouseStage:
    kafka: KafkaSettings
    store: KeeperStateStore
    sink: ClickHouseSink
    database: str
    pipeline: str
    topic: str

    def table_offsets(self, partition: int) -> dict[int, int]:
        """Rows per source offset of ``partition`` in the table."""
        return dict(self.sink.offsets_in_table(self.database, TABLE, self.topic, partition))


Stage = TypeVar("Stage", bound=ClickHouseStage)


@contextmanager
def clickhouse_stage(
    kind: type[Stage],
    kafka: KafkaSettings,
    zookeeper_hosts: str,
    client: Client,
    topic: str,
    *,
    partitions: int,
) -> Iterator[Stage]:
    """A ``kind`` on a new database, keeper root and ``topic`` (created with ``partitions``)."""
    suffix = uuid.uuid4().hex[:8]
    database = re.sub(r"[^A-Za-z0-9_]", "_", f"db_{suffix}")
    sink = ClickHouseSink(client)
    sink.ensure_table(database, TABLE, SCHEMA)
    store = KeeperStateStore(KeeperSettings(zookeeper_hosts, f"/eos_test_{suffix}")).start()
    create_topic(kafka, topic, partitions=partitions)
    try:
        yield kind(kafka, store, sink, database, f"p_{suffix}", topic)
    finally:
        store.close()
