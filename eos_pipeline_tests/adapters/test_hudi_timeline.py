"""The JVM-free timeline reader (hudi-rs) answers exactly as Hudi's Java API does.

Tables are written by the product's own write path on the session's in-process Spark: Copy-on-
Write and Merge-on-Read tables of the current version, a version 6 table carrying the V1 key,
and commits without a checkpoint (a plain write) that the reader must pass over. Each table is
then read by both readers and every answer compared: which commits completed, their order,
completion times, metadata and the parsed checkpoint. The hand-over test
(``sinks/test_hudi_handover.py``) does the same on a table written by HoodieStreamer.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from eos_pipeline.adapters import hudi_timeline
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS, TableType, write_transaction
from eos_pipeline.core.checkpoint import CHECKPOINT_KEY_V1, CHECKPOINT_KEY_V2
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.adapters.hudi_java_oracle import (
    java_checkpoint_history,
    java_commits,
    java_latest_commit,
)

TOPIC = "orders"
TPS = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
V6 = {"hoodie.write.table.version": "6", "hoodie.write.auto.upgrade": "false"}


def rows(spark: SparkSession, start: int, count: int) -> DataFrame:
    return spark.createDataFrame(
        [(TOPIC, i % 2, i, f"v{i}".encode()) for i in range(start, start + count)],
        "_topic string, _partition int, _offset long, value binary",
    )


def assert_same_answers(spark: SparkSession, table: str) -> None:
    java = java_commits(spark, table)
    assert hudi_timeline.completed_commits(table) == [(i, c, a) for i, c, a, _ in java]
    assert hudi_timeline.checkpoint_history(table) == java_checkpoint_history(spark, table)
    assert hudi_timeline.latest_commit(table) == java_latest_commit(spark, table)


@pytest.mark.spark
@pytest.mark.parametrize(
    ("table_type", "options", "key"),
    [
        ("COPY_ON_WRITE", {}, CHECKPOINT_KEY_V2),
        ("MERGE_ON_READ", {}, CHECKPOINT_KEY_V2),
        ("COPY_ON_WRITE", V6, CHECKPOINT_KEY_V1),
    ],
    ids=["cow", "mor", "cow-version-6"],
)
def test_hudi_rs_reads_what_hudis_java_api_reads(
    spark: SparkSession,
    tmp_path: Path,
    table_type: TableType,
    options: dict[str, str],
    key: str,
) -> None:
    table = str(tmp_path / "t")
    assert hudi_timeline.latest_commit(table) is None  # no table yet
    first = write_transaction(
        rows(spark, 0, 10),
        table,
        "t",
        {TPS[0]: 5, TPS[1]: 5},
        table_type=table_type,
        topic_id="topic-id-1",
        expected_previous=None,
        options={**SMALL_TABLE_OPTIONS, **options},
    )
    second = write_transaction(
        rows(spark, 10, 6),
        table,
        "t",
        {TPS[0]: 8, TPS[1]: 8},
        table_type=table_type,
        topic_id="topic-id-1",
        expected_previous=first.checkpoint,
        options={**SMALL_TABLE_OPTIONS, **options},
    )
    assert second.extra_metadata[key] == f"{TOPIC},0:8,1:8"
    # A commit by some other tool that carries no checkpoint: counted, but not a position.
    rows(spark, 100, 4).write.format("hudi").options(
        **SMALL_TABLE_OPTIONS,
        **options,
        **{
            "hoodie.table.name": "t",
            "hoodie.datasource.write.table.type": table_type,
            "hoodie.datasource.write.recordkey.field": "_topic,_partition,_offset",
            "hoodie.datasource.write.precombine.field": "_offset",
            "hoodie.datasource.write.operation": "upsert",
            "hoodie.datasource.write.hive_style_partitioning": "true",
            "hoodie.datasource.write.partitionpath.field": "",
        },
    ).mode("append").save(table)

    # Newest first: the other tool's, ours, and the empty commit that started the timeline.
    commits = hudi_timeline.completed_commits(table)
    assert len(commits) == 4
    assert [c[0] for c in commits][1:3] == [second.instant_time, first.instant_time]
    latest = hudi_timeline.latest_commit(table)
    assert latest == second
    assert latest is not None and latest.topic_id == "topic-id-1"
    assert hudi_timeline.latest_checkpoint(table) == {TPS[0]: 8, TPS[1]: 8}
    assert_same_answers(spark, table)


def test_reader_needs_no_jvm_and_is_fast(tmp_path: Path) -> None:
    """A path without a table reads as a new table; a sensor can afford a read per tick."""
    missing = str(tmp_path / "nothing-here")
    assert hudi_timeline.completed_commits(missing) == []
    assert hudi_timeline.latest_checkpoint(missing) is None
    (tmp_path / "empty" / ".hoodie").mkdir(parents=True)  # a folder, but no table properties
    assert hudi_timeline.latest_commit(str(tmp_path / "empty")) is None
    started = time.monotonic()
    for _ in range(20):
        hudi_timeline.latest_commit(missing)
    assert time.monotonic() - started < 1.0


def test_version_6_completion_time_is_the_file_time_in_the_timeline_zone() -> None:
    """As Hudi's Java timeline formats a version 6 instant's modification time."""
    mtime_ns = 1_795_403_463_243_792_712  # 2026-11-23 03:11:03.243792712 UTC
    assert hudi_timeline._format_millis(mtime_ns, "UTC") == "20261123031103243"
