"""A deliberate Hudi replay on the real stack: Kafka and Hudi 1.2 through the test session's
Spark Connect server; the table is read back without Spark (hudi-rs).

Exactness per partition after every replay: the table's (partition, offset) pairs against
Kafka's offsets minus the dead letters as the Hudi proof counts them (replay markers included).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from eos_dev.stack.services import StackConfig
from eos_pipeline.adapters import hudi_timeline
from eos_pipeline.adapters.dlq import DeadLetterWriter, dead_letter_offsets
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
    read_range,
)
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.proof import compare
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hudi import REPLAY_METADATA_SUFFIX, HudiReplay, HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import OneCluster

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCHEMA = TableSchema.from_mapping({"id": "Int64", "name": "String"})
PIPELINE = "hudi-replay"
LIMIT = 60


class InjectedCrash(Exception):
    """The process dying at a step boundary: nothing after it runs."""


@pytest.fixture(scope="module")
def remote(spark_connect: StackConfig) -> Iterator[SparkSession]:
    """A Connect client of the session's server, closed when the module ends."""
    import os

    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    previous = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    session = RemoteSparkSession.builder.remote(spark_connect.spark_connect_url).getOrCreate()
    try:
        yield session  # type: ignore[misc]
    finally:
        session.stop()
        if previous is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        else:
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = previous


def spec(topic: str, table: Path, limit: int | None) -> HudiTableSpec:
    return HudiTableSpec(
        pipeline=PIPELINE,
        topic=topic,
        table_path=str(table),
        table_name="events",
        schema=SCHEMA,
        hudi_options=SMALL_TABLE_OPTIONS,
        max_record_bytes=limit,
    )


def coordinates(table: Path) -> Counter[tuple[int, int]]:
    from hudi import HudiTableBuilder

    data = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table)).build().read())
    pairs = zip(data["_partition"].to_pylist(), data["_offset"].to_pylist(), strict=True)
    return Counter(pairs)


def assert_exact(kafka: KafkaSettings, topic: str, table: Path) -> dict[int, int]:
    """Each partition exact against Kafka; returns the dead letters per partition."""
    rows = coordinates(table)
    dead = dead_letter_offsets(kafka, f"{topic}.dlq", PIPELINE, "hudi")
    letters = {}
    for p, end in end_offsets(kafka, topic).items():
        tp = TopicPartition(topic, p)
        committed = OffsetRange(0, end)
        offsets = read_range(kafka, tp, committed).offsets
        mine = {o: n for (q, o), n in rows.items() if q == p}
        proof = compare(tp, committed, offsets, dead.get(tp, set()), mine)
        assert proof.passed, proof.metadata()
        letters[p] = proof.dead_letters
    return letters


def produce(kafka: KafkaSettings, topic: str, count: int) -> None:
    """``count`` records per partition (2); every 7th has a long name (above :data:`LIMIT`)."""
    records = []
    for i in range(count):
        name = "x" * 80 if i % 7 == 6 else f"n{i}"
        records += [(p, None, json.dumps({"id": i, "name": name}).encode()) for p in (0, 1)]
    produce_all(idempotent_producer(kafka), topic, records)


def test_hudi_replay_after_a_fix_a_stricter_rule_and_a_kill(
    remote: SparkSession, kafka_settings: KafkaSettings, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka_settings, topic_name, partitions=2)
    table = tmp_path / "events"
    dlq = f"{topic_name}.dlq"
    produce(kafka_settings, topic_name, 40)

    def sync(limit: int | None) -> HudiTableSync:
        writer = DeadLetterWriter(kafka_settings, dlq, PIPELINE)
        return HudiTableSync(
            spec(topic_name, table, limit), OneCluster(kafka_settings), remote, writer
        )

    sync(LIMIT).run()
    assert assert_exact(kafka_settings, topic_name, table) == {0: 5, 1: 5}
    checkpoint = hudi_timeline.latest_checkpoint(str(table))

    # The fix (no size limit): the long records of [10, 30) of partition 0 become rows.
    replay = HudiReplay(spec(topic_name, table, None), kafka_settings, remote, dlq)
    plan = replay.plan(0, 10, 30)
    assert "checkpoint stays unchanged" in "\n".join(plan.describe())
    report = replay.run(plan)
    assert (report.records_read, report.rows_written, report.dead_letters) == (20, 20, 0)
    assert report.rows_deleted == 0 and len(report.commits) == 1
    assert assert_exact(kafka_settings, topic_name, table) == {0: 5 - 3, 1: 5}
    latest = hudi_timeline.latest_commit(str(table))
    assert latest is not None and latest.checkpoint == checkpoint
    assert any(k.endswith(REPLAY_METADATA_SUFFIX) for k in latest.extra_metadata)

    # A stricter rule on partition 1 (records above 24 bytes are letters: ids from 10 on, and 6),
    # killed after its delete commit and run again: rows of the new letters are gone, once.
    def crash(step: str) -> None:
        if step == "replay_after_delete":
            raise InjectedCrash(step)

    strict = spec(topic_name, table, 24)
    with pytest.raises(InjectedCrash):
        killed = HudiReplay(strict, kafka_settings, remote, dlq, fault=crash)
        killed.run(killed.plan(1, 0, 40))
    # Its delete commit removed the 26 rows that are letters now (10..39 but the long ones).
    assert sum(n for (p, _), n in coordinates(table).items() if p == 1) == 40 - 5 - 26
    again = HudiReplay(strict, kafka_settings, remote, dlq)
    report = again.run(again.plan(1, 0, 40))
    assert report.dead_letters == 31 and report.rows_deleted == 0  # deleted by the killed run
    assert assert_exact(kafka_settings, topic_name, table) == {0: 2, 1: 31}
    # The checkpoint never moved: the sink's next run starts where it stood (the ClickHouse
    # replay test runs the sink on after a replay).
    assert hudi_timeline.latest_checkpoint(str(table)) == checkpoint
