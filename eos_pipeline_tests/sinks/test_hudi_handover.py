"""Hand-over between Hudi's own HoodieStreamer and this project, on one table, both directions.

HoodieStreamer (0.14.0, the newest on the reachable Maven Central; see
``eos_pipeline_tests.support.hoodie_streamer``) ingests a topic into a new table, this project's
``HudiTableSync`` continues from the streamer's checkpoint, then HoodieStreamer continues from
the project's. The table is version 6 (what 0.14 writes and reads), so the project writes it
with ``hoodie.write.table.version=6`` and must leave the position under the V1 key
``deltastreamer.checkpoint.key``, the only key HoodieStreamer 0.14 reads.

Proof on the data: every produced record's (partition, offset) comes from the producer's
delivery reports; the table must hold every record exactly once, and each row must carry the
commit time of the one commit whose checkpoint range covers its offset. The table is keyed by
the payload id (HoodieStreamer 0.14 cannot fill the project's coordinate columns), so a range
read twice would not add a row but would move the row's commit time, which the check catches.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.hudi_timeline import checkpoint_history
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.core.checkpoint import CHECKPOINT_KEY_V1, format_checkpoint
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import SourceColumns, TableSchema
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import OneCluster
from eos_pipeline_tests.adapters.hudi_java_oracle import java_checkpoint_history
from eos_pipeline_tests.support.hoodie_streamer import StreamerTable, run_streamer
from eos_pipeline_tests.support.sink_runs import hudi_positions

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 3
PAYLOAD = {"id": "Int64", "name": "String", "amount": "Float64"}
KEYGEN = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
# The same table settings on both sides: a table remembers its key generator and version.
SHARED = {
    **SMALL_TABLE_OPTIONS,
    "hoodie.datasource.write.keygenerator.class": KEYGEN,
    "hoodie.datasource.write.hive_style_partitioning": "false",
}
PROJECT_OPTIONS = {
    **SHARED,
    "hoodie.write.table.version": "6",
    "hoodie.write.auto.upgrade": "false",
}

# The project's columns (coordinates without timestamp, then payload); HoodieStreamer leaves
# the coordinates null, which is why they are optional here.
AVRO_SCHEMA = {
    "type": "record",
    "name": "handover_record",
    "namespace": "eos_pipeline",
    "fields": [
        {"name": "_topic", "type": ["null", "string"], "default": None},
        {"name": "_partition", "type": ["null", "int"], "default": None},
        {"name": "_offset", "type": ["null", "long"], "default": None},
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


class Source:
    """The topic, with the (partition, offset) of every record produced, by payload id."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.kafka = kafka
        self.topic = topic
        self.where: dict[int, tuple[int, int]] = {}
        create_topic(kafka, topic, PARTITIONS)

    def produce(self, count: int) -> None:
        first = len(self.where) + 1
        ids = range(first, first + count)
        records = [
            (i % PARTITIONS, str(i).encode(), json.dumps(self._value(i)).encode()) for i in ids
        ]
        delivered = produce_all(idempotent_producer(self.kafka), self.topic, records)
        # The idempotent producer keeps send order within a partition, so a partition's
        # offsets ascend in the order its ids were sent.
        for p in range(PARTITIONS):
            sent = [i for i in ids if i % PARTITIONS == p]
            offsets = sorted(o for q, o in delivered if q == p)
            self.where.update(zip(sent, ((p, o) for o in offsets), strict=True))

    @staticmethod
    def _value(i: int) -> dict[str, object]:
        return {"id": i, "name": f"n{i}", "amount": i / 4}

    def ends(self) -> dict[TopicPartition, int]:
        return {
            TopicPartition(self.topic, p): e for p, e in end_offsets(self.kafka, self.topic).items()
        }


def test_table_moves_from_hoodie_streamer_to_project_and_back(
    kafka_settings: KafkaSettings, spark: SparkSession, topic_name: str, tmp_path: Path
) -> None:
    source = Source(kafka_settings, topic_name)
    table = tmp_path / "handover"
    streamer = StreamerTable(
        topic=topic_name,
        table_path=str(table),
        table_name="handover",
        avro_schema=AVRO_SCHEMA,
        record_key_fields=("id",),
        ordering_field="id",
        operation="UPSERT",
        props=SHARED,
    )
    spec = HudiTableSpec(
        pipeline="handover",
        topic=topic_name,
        table_path=str(table),
        table_name="handover",
        schema=TableSchema.from_mapping(PAYLOAD, SourceColumns(timestamp=None)),
        record_key_fields=("id",),
        ordering_field="id",
        hudi_options=PROJECT_OPTIONS,
    )
    sync = HudiTableSync(
        spec,
        OneCluster(kafka_settings),
        spark,
        DeadLetterWriter(kafka_settings, f"{topic_name}.dlq", "t"),
    )
    work = tmp_path / "streamer"

    # 1. HoodieStreamer creates the table and ingests what is there.
    source.produce(150)
    run_streamer(streamer, kafka_settings.bootstrap_servers, work)
    after_streamer = source.ends()
    assert hudi_positions(sync) == after_streamer, "the project reads the streamer's V1 checkpoint"

    # 2. The project continues from the streamer's checkpoint.
    source.produce(120)
    report = sync.run()
    after_project = source.ends()
    assert report.checkpoint_before == after_streamer
    assert report.checkpoint_after == after_project
    assert report.total_rows_written == 120

    # 3. HoodieStreamer continues from the project's checkpoint.
    source.produce(90)
    second = run_streamer(streamer, kafka_settings.bootstrap_servers, work)
    resumed_from = format_checkpoint(after_project)
    log = second.log_path.read_text(errors="replace")
    assert f"Checkpoint to resume from : Option{{val={resumed_from}}}" in log, (
        "HoodieStreamer did not resume from the project's checkpoint"
    )
    final = source.ends()

    # The audit trail: three commits, each holding the position right after its phase.
    history = list(reversed(checkpoint_history(str(table))))
    assert [c.checkpoint for c in history] == [after_streamer, after_project, final]
    # The product reads the timeline with hudi-rs; Hudi's Java API must agree on this table,
    # two of whose commits HoodieStreamer 0.14 wrote (table version 6, JSON commit files).
    assert history == list(reversed(java_checkpoint_history(spark, str(table))))
    for commit in history:
        assert commit.extra_metadata.get(CHECKPOINT_KEY_V1) == format_checkpoint(
            commit.checkpoint
        ), f"commit {commit.instant_time} has no V1 checkpoint HoodieStreamer 0.14 can read"
    props = (table / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.version=6" in props

    # Every record exactly once, each written by the commit whose range covers its offset.
    rows = (
        spark.read.format("hudi")
        .load(str(table))
        .select("_hoodie_commit_time", "id", "_partition", "_offset")
        .collect()
    )
    ids = Counter(r["id"] for r in rows)
    doubled = {i: n for i, n in ids.items() if n > 1}
    assert not doubled, f"records stored more than once: {sorted(doubled.items())[:10]}"
    assert set(ids) == set(source.where), (
        f"missing {sorted(set(source.where) - set(ids))[:10]}, "
        f"unexpected {sorted(set(ids) - set(source.where))[:10]}"
    )
    assert len(rows) == sum(final.values()) == 360
    starts = [dict.fromkeys(final, 0)] + [c.checkpoint for c in history[:-1]]
    misplaced = []
    for row in rows:
        p, o = source.where[row["id"]]
        tp = TopicPartition(topic_name, p)
        owner = [
            c.instant_time
            for c, begin in zip(history, starts, strict=True)
            if begin[tp] <= o < c.checkpoint[tp]
        ]
        if owner != [row["_hoodie_commit_time"]]:
            misplaced.append((row["id"], p, o, row["_hoodie_commit_time"], owner))
        if row["_hoodie_commit_time"] == history[1].instant_time:
            # Rows the project wrote carry their true Kafka coordinates.
            assert (row["_partition"], row["_offset"]) == (p, o)
    assert not misplaced, f"rows written by the wrong commit (read twice?): {misplaced[:10]}"
