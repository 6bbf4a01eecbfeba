"""Avro and Protobuf topics through the real registry into both tables (issue 27).

Records are written by confluent-kafka's own serializers against the stack's registry (Apicurio,
Confluent-compatible API), read by both sinks on the real Kafka, ZooKeeper, chDB and Spark/Hudi,
and checked on the data: every good record a row in both tables, value by value, every bad one a
dead letter from both sinks with the same error class, and a registry that cannot be reached
never a verdict.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from eos_dev.stack.config import StackConfig
from eos_dev.stack.processes import find_java
from eos_dev.stack.services import Stack, free_port, pid_alive
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.retries import FailureFacts, Fault, diagnose
from eos_pipeline.core.schema import Format, PayloadFormat, RegistrySettings, TableSchema
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
from eos_pipeline_tests.support.dead_letters import read_dead_letters
from eos_pipeline_tests.support.framed import (
    ORDER_COLUMNS,
    bad_values,
    order,
    proto_order,
    serializer,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 2
CH_PIPELINE = "framed_ch"
HUDI_PIPELINE = "framed_hudi"


@dataclass
class Rig:
    kafka: KafkaSettings
    chdb: Client
    spark: SparkSession
    store: KeeperStateStore
    topic: str
    database: str
    table_path: Path
    schema: TableSchema
    #: (partition, offset) -> the logical record (good) or the expected error class (bad).
    good: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    bad: dict[tuple[int, int], str] = field(default_factory=dict)

    @property
    def dlq(self) -> str:
        return f"{self.topic}.dlq"

    def produce(self, registry: str, fmt: str, count: int, with_bad: bool) -> None:
        client = SchemaRegistryClient({"url": registry})
        write = serializer(client, fmt, self.topic)
        items: list[tuple[bytes | None, Any]] = [
            (write(order(i) if fmt == "avro" else proto_order(i)), order(i)) for i in range(count)
        ]
        if with_bad:  # every bad kind, spread between the good ones
            for n, (value, error_class) in enumerate(bad_values(client, fmt, self.topic)):
                items.insert(3 * n + 1, (value, error_class))
        sent: dict[int, list[Any]] = {}
        records = []
        for n, (value, what) in enumerate(items):
            records.append((n % PARTITIONS, str(n).encode(), value))
            sent.setdefault(n % PARTITIONS, []).append(what)
        delivered = produce_all(idempotent_producer(self.kafka), self.topic, records)
        for p, whats in sent.items():
            offsets = sorted(o for q, o in delivered if q == p)
            for offset, what in zip(offsets, whats, strict=True):
                if isinstance(what, str):
                    self.bad[(p, offset)] = what
                else:
                    self.good[(p, offset)] = what

    def clickhouse(self) -> ClickHousePartitionSync:
        spec = ClickHouseTableSpec(
            pipeline=CH_PIPELINE,
            database=self.database,
            table="events",
            schema=self.schema,
            max_records=7,
        )
        return ClickHousePartitionSync(
            spec,
            self.kafka,
            self.store,
            ClickHouseSink(self.chdb),
            DeadLetterWriter(self.kafka, self.dlq, CH_PIPELINE),
        )

    def hudi(self) -> HudiTableSync:
        spec = HudiTableSpec(
            pipeline=HUDI_PIPELINE,
            topic=self.topic,
            table_path=str(self.table_path),
            table_name="events",
            schema=self.schema,
            hudi_options=SMALL_TABLE_OPTIONS,
        )
        return HudiTableSync(
            spec, self.kafka, self.spark, DeadLetterWriter(self.kafka, self.dlq, HUDI_PIPELINE)
        )

    def catch_up(self) -> None:
        sync = self.clickhouse()
        for p in range(PARTITIONS):
            sync.run(TopicPartition(self.topic, p))
        hudi = self.hudi()
        for _ in range(10):
            if hudi.run().instant_time is None:
                break

    # ---- reading back --------------------------------------------------------------------
    def clickhouse_rows(self) -> dict[tuple[int, int], list[dict[str, Any]]]:
        names = ", ".join(f"`{c}`" for c in ORDER_COLUMNS)
        result = self.chdb.query(
            f"SELECT _partition, _offset, {names} FROM `{self.database}`.events "
            f"WHERE _topic = '{self.topic}'"
        )
        rows: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for p, o, *values in result.result_rows:
            rows.setdefault((p, o), []).append(dict(zip(ORDER_COLUMNS, values, strict=True)))
        return rows

    def hudi_rows(self) -> dict[tuple[int, int], list[dict[str, Any]]]:
        if not self.table_path.exists():
            return {}
        frame = self.spark.read.format("hudi").load(str(self.table_path))
        rows: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for r in frame.select("_partition", "_offset", *ORDER_COLUMNS).collect():
            values = {c: r[c] for c in ORDER_COLUMNS}
            rows.setdefault((r["_partition"], r["_offset"]), []).append(values)
        return rows

    def dead_letters(self) -> dict[str, dict[tuple[int, int], str]]:
        """Per pipeline (one per sink): source coordinates -> error class."""
        out: dict[str, dict[tuple[int, int], str]] = {CH_PIPELINE: {}, HUDI_PIPELINE: {}}
        for h in read_dead_letters(self.kafka, self.dlq):
            where = (int(h["eos.source.partition"]), int(h["eos.source.offset"]))
            out[h["eos.pipeline"]][where] = h["eos.error.class"]
        return out

    def assert_exact(self) -> None:
        expected = {where: [record] for where, record in self.good.items()}
        assert self.clickhouse_rows() == expected
        assert self.hudi_rows() == expected
        letters = self.dead_letters()
        assert letters[CH_PIPELINE] == self.bad
        assert letters[HUDI_PIPELINE] == self.bad


def _rig(
    kafka: KafkaSettings,
    zookeeper_hosts: str,
    chdb: Client,
    spark: SparkSession,
    topic: str,
    tmp_path: Path,
    fmt: str,
    registry: str,
) -> Rig:
    suffix = uuid.uuid4().hex[:8]
    schema = TableSchema.from_mapping(
        ORDER_COLUMNS, payload_format=PayloadFormat(Format(fmt), RegistrySettings(registry))
    )
    database = f"db_{suffix}"
    ClickHouseSink(chdb).ensure_table(database, "events", schema)
    store = KeeperStateStore(KeeperSettings(zookeeper_hosts, f"/eos_framed_{suffix}")).start()
    create_topic(kafka, topic, partitions=PARTITIONS)
    return Rig(kafka, chdb, spark, store, topic, database, tmp_path / "hudi", schema)


@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_a_framed_topic_is_the_same_rows_and_the_same_dead_letters_in_both_tables(
    fmt: str,
    kafka_settings: KafkaSettings,
    zookeeper_hosts: str,
    chdb_client: Client,
    spark: SparkSession,
    schema_registry: str,
    topic_name: str,
    tmp_path: Path,
) -> None:
    rig = _rig(
        kafka_settings, zookeeper_hosts, chdb_client, spark, topic_name, tmp_path, fmt,
        schema_registry,
    )  # fmt: skip
    try:
        rig.produce(schema_registry, fmt, count=40, with_bad=True)
        assert len(set(rig.bad.values())) >= 5  # every kind the contract names is here
        rig.catch_up()
        rig.assert_exact()
        rig.catch_up()  # caught up: a second pass changes nothing
        rig.assert_exact()
    finally:
        rig.store.close()


@pytest.fixture
def own_registry(tmp_path: Path) -> Iterator[Stack]:
    """A registry of this test's own, to kill and restart (the session's one stays up)."""
    config = StackConfig(state_dir=tmp_path / "registry", registry=True, registry_port=free_port())
    stack = Stack(config, say=lambda _line: None)
    stack._start_registry(find_java())
    try:
        yield stack
    finally:
        stack.down()


def _chain(exc: BaseException) -> tuple[tuple[str, str], ...]:
    errors = []
    current: BaseException | None = exc
    while current is not None:
        errors.append((type(current).__name__, str(current)))
        current = current.__cause__ or current.__context__
    return tuple(errors)


def test_a_registry_killed_is_never_a_verdict_and_the_retry_is_exact(
    own_registry: Stack,
    kafka_settings: KafkaSettings,
    zookeeper_hosts: str,
    chdb_client: Client,
    spark: SparkSession,
    topic_name: str,
    tmp_path: Path,
) -> None:
    url = own_registry.config.registry_url
    rig = _rig(
        kafka_settings, zookeeper_hosts, chdb_client, spark, topic_name, tmp_path, "avro", url
    )
    try:
        rig.produce(url, "avro", count=30, with_bad=False)
        pid = own_registry._running_pid("registry")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):
            pass
        with pytest.raises(Exception) as ch_failure:
            rig.clickhouse().run(TopicPartition(rig.topic, 0))
        with pytest.raises(Exception) as hudi_failure:
            rig.hudi().run()
        for failure in (ch_failure, hudi_failure):
            chain = _chain(failure.value)
            assert diagnose(FailureFacts(errors=chain)).fault is Fault.TRANSIENT, chain
            assert any("registry" in m and "could not be reached" in m for _, m in chain)
        assert rig.clickhouse_rows() == {} and rig.hudi_rows() == {}
        assert rig.dead_letters() == {CH_PIPELINE: {}, HUDI_PIPELINE: {}}
        # The registry comes back with its schemas (kept on disk): the retry is exact.
        own_registry._start_registry(find_java())
        rig.catch_up()
        rig.assert_exact()
    finally:
        rig.store.close()
