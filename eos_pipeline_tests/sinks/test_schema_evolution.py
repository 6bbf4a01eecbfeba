"""A registry subject that evolves in the middle of a stream, into both tables (issue 27).

The tables are built from the subject's v1 (as the definitions resolve it at load); records of
a compatible v2 arrive, then v1 records again (an older producer). Both tables evolve before
the first v2 row is written, every offset is a row once, old rows keep their defaults and new
rows carry their values. An incompatible v3 stops only its partition, naming the field, both
schema ids and what to do. Real Kafka, ZooKeeper, chDB, Spark/Hudi and the stack's registry.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client
from pyspark.sql import SparkSession

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
from eos_pipeline.core.evolution import IncompatibleSchemaChange
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.retries import FailureFacts, Fault, diagnose
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
from eos_pipeline_tests.support.dead_letters import read_dead_letters
from eos_pipeline_tests.support.evolution import (
    COLUMNS,
    V1,
    V2,
    V3,
    expected_row,
    pinned_schema,
    v1,
    v2,
    writer,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@dataclass
class EvoRig:
    kafka: KafkaSettings
    chdb: Client
    spark: SparkSession
    store: KeeperStateStore
    url: str
    topic: str
    database: str
    table_path: Path
    #: (partition, offset) -> (record index, writer version)
    sent: dict[tuple[int, int], tuple[int, int]]

    def produce(self, schema: str, version: int, items: list[tuple[int, dict[str, Any]]]) -> None:
        write = writer(self.url, self.topic, schema)
        records = [(p, None, write(record)) for p, record in items]
        delivered = produce_all(idempotent_producer(self.kafka), self.topic, records)
        for p in {p for p, _ in items}:
            offsets = sorted(o for q, o in delivered if q == p)
            ids = [record["id"] for q, record in items if q == p]
            for offset, i in zip(offsets, ids, strict=True):
                self.sent[(p, offset)] = (i, version)

    def clickhouse(self, schema: TableSchema, max_records: int = 4) -> ClickHousePartitionSync:
        spec = ClickHouseTableSpec(
            "evo_ch", self.database, "sales", schema, max_records=max_records
        )
        return ClickHousePartitionSync(
            spec,
            self.kafka,
            self.store,
            ClickHouseSink(self.chdb),
            DeadLetterWriter(self.kafka, f"{self.topic}.dlq", "evo_ch"),
        )

    def hudi(self, schema: TableSchema) -> HudiTableSync:
        spec = HudiTableSpec(
            pipeline="evo_hudi",
            topic=self.topic,
            table_path=str(self.table_path),
            table_name="sales",
            schema=schema,
            hudi_options=SMALL_TABLE_OPTIONS,
        )
        dlq = DeadLetterWriter(self.kafka, f"{self.topic}.dlq", "evo_hudi")
        return HudiTableSync(spec, self.kafka, self.spark, dlq)

    def clickhouse_rows(self, columns: tuple[str, ...]) -> dict[tuple[int, int], list[dict]]:
        names = ", ".join(f"`{c}`" for c in columns)
        result = self.chdb.query(
            f"SELECT _partition, _offset, {names} FROM `{self.database}`.sales "
            f"WHERE _topic = '{self.topic}'"
        )
        out: dict[tuple[int, int], list[dict]] = {}
        for p, o, *values in result.result_rows:
            out.setdefault((p, o), []).append(dict(zip(columns, values, strict=True)))
        return out

    def hudi_rows(self, columns: tuple[str, ...]) -> dict[tuple[int, int], list[dict]]:
        frame = self.spark.read.format("hudi").load(str(self.table_path))
        out: dict[tuple[int, int], list[dict]] = {}
        for r in frame.select("_partition", "_offset", *columns).collect():
            out.setdefault((r["_partition"], r["_offset"]), []).append({c: r[c] for c in columns})
        return out


@pytest.fixture
def evo(
    kafka_settings: KafkaSettings,
    zookeeper_hosts: str,
    chdb_client: Client,
    spark: SparkSession,
    schema_registry: str,
    topic_name: str,
    tmp_path: Path,
) -> Any:
    suffix = uuid.uuid4().hex[:8]
    store = KeeperStateStore(KeeperSettings(zookeeper_hosts, f"/eos_evo_{suffix}")).start()
    create_topic(kafka_settings, topic_name, partitions=2)
    rig = EvoRig(
        kafka_settings, chdb_client, spark, store, schema_registry, topic_name,
        f"evo_{suffix}", tmp_path / "hudi", {},
    )  # fmt: skip
    try:
        yield rig
    finally:
        store.close()


def _schema_id(value: bytes) -> int:
    return int.from_bytes(value[1:5], "big")


def test_a_compatible_newer_schema_evolves_both_tables_before_its_first_row(evo: EvoRig) -> None:
    evo.produce(V1, 1, [(i % 2, v1(i)) for i in range(6)])
    v1_id = _schema_id(writer(evo.url, evo.topic, V1)(v1(0)))
    schema = pinned_schema(evo.url, V1, v1_id)  # the table is built from v1
    ClickHouseSink(evo.chdb).ensure_table(evo.database, "sales", schema)
    first = evo.clickhouse(schema)
    for p in (0, 1):
        first.run(TopicPartition(evo.topic, p))
    assert evo.hudi(schema).run().instant_time is not None
    written_before = set(evo.sent)

    evo.produce(V2, 2, [(i % 2, v2(i)) for i in range(6, 14)])
    evo.produce(V1, 1, [(i % 2, v1(i)) for i in range(14, 18)])  # an older producer goes on
    v2_id = _schema_id(writer(evo.url, evo.topic, V2)(v2(0)))
    ch, hudi = evo.clickhouse(schema), evo.hudi(schema)  # runs whose definitions knew only v1
    for p in (0, 1):
        ch.run(TopicPartition(evo.topic, p))
    while hudi.run().instant_time is not None:
        pass

    for sync in (ch, hudi):
        (applied,) = sync.follower.applied
        assert applied["from_schema_id"] == v1_id and applied["schema_id"] == v2_id
        assert applied["columns_added"] == ["channel String", "coupon Nullable(String)"]
        assert applied["columns_widened"] == ["qty Int64", "amount Float64"]
        assert sync.follower.schema.schema_id == v2_id
    types = dict(
        evo.chdb.query(
            f"SELECT name, type FROM system.columns WHERE database = '{evo.database}'"
        ).result_rows
    )
    assert [types[c] for c in ("qty", "amount", "channel", "coupon")] == [
        "Int64", "Float64", "String", "Nullable(String)"
    ]  # fmt: skip

    def expected(hudi_table: bool) -> dict[tuple[int, int], list[dict]]:
        return {
            where: [expected_row(i, version, before_evolution=where in written_before,
                                 hudi=hudi_table)]
            for where, (i, version) in evo.sent.items()
        }  # fmt: skip

    assert evo.clickhouse_rows(COLUMNS) == expected(hudi_table=False)
    assert evo.hudi_rows(COLUMNS) == expected(hudi_table=True)
    assert list(read_dead_letters(evo.kafka, f"{evo.topic}.dlq")) == []
    # A run whose definitions load v1 again accepts the evolved table and changes nothing.
    ClickHouseSink(evo.chdb).ensure_table(evo.database, "sales", schema)
    again = evo.clickhouse(schema)
    for p in (0, 1):
        assert again.run(TopicPartition(evo.topic, p)).records_read == 0
    assert evo.hudi(schema).run().instant_time is None
    assert evo.clickhouse_rows(COLUMNS) == expected(hudi_table=False)


def test_an_incompatible_schema_stops_only_its_partition(evo: EvoRig) -> None:
    evo.produce(V1, 1, [(p, v1(i)) for i in range(4) for p in (0, 1)])
    v1_id = _schema_id(writer(evo.url, evo.topic, V1)(v1(0)))
    evo.produce(V3, 3, [(0, {"id": 99, "customer": 7})])
    v3_id = _schema_id(writer(evo.url, evo.topic, V3)({"id": 1, "customer": 1}))
    evo.produce(V1, 1, [(1, v1(50))])
    schema = pinned_schema(evo.url, V1, v1_id)
    ClickHouseSink(evo.chdb).ensure_table(evo.database, "sales", schema)

    sync = evo.clickhouse(schema, max_records=100)
    with pytest.raises(IncompatibleSchemaChange) as caught:
        sync.run(TopicPartition(evo.topic, 0))
    message = str(caught.value)
    assert "field 'customer'" in message
    assert f"schema id {v3_id}" in message and f"schema id {v1_id}" in message
    assert "BACKWARD" in message and "the others go on" in message
    chain = ((type(caught.value).__name__, message),)
    assert diagnose(FailureFacts(errors=chain)).fault is Fault.NEEDS_PERSON
    assert sync.run(TopicPartition(evo.topic, 1)).end == 5  # the other partition goes on
    rows = evo.clickhouse_rows(("id",))
    assert {p for p, _ in rows} == {1} and len(rows) == 5

    hudi = evo.hudi(schema)
    with pytest.raises(IncompatibleSchemaChange, match="field 'customer'"):
        hudi.run(partitions=[0])
    assert hudi.run(partitions=[1]).instant_time is not None
    assert {p for p, _ in evo.hudi_rows(("id",))} == {1}


def test_a_table_older_than_the_subject_at_load_catches_up_and_a_newer_one_is_accepted(
    chdb_client: Client,
) -> None:
    """Definitions that load a newer schema than the table (a restart after a change no record
    carried yet) add and widen its columns; an older one than the table leaves it as it is."""
    database, url = f"evo_{uuid.uuid4().hex[:8]}", "http://registry.invalid"
    sink = ClickHouseSink(chdb_client)
    sink.ensure_table(database, "sales", pinned_schema(url, V1, 1))
    sink.ensure_table(database, "sales", pinned_schema(url, V2, 2))
    types = dict(
        chdb_client.query(
            f"SELECT name, type FROM system.columns WHERE database = '{database}'"
        ).result_rows
    )
    assert [types[c] for c in COLUMNS[2:]] == [
        "Int64", "Float64", "Nullable(String)", "String", "Nullable(String)"
    ]  # fmt: skip
    sink.ensure_table(database, "sales", pinned_schema(url, V1, 1))  # accepted as it is
    assert (
        dict(
            chdb_client.query(
                f"SELECT name, type FROM system.columns WHERE database = '{database}'"
            ).result_rows
        )
        == types
    )
