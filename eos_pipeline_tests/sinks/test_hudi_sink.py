"""The Hudi transaction on the real stack: Kafka, Spark (local) and Hudi 1.2 on local disk.

Expected offsets come from the producer's delivery reports; the table is read back with Spark
and its (topic, partition, offset) coordinates are counted, so a duplicate or a gap shows.
Kill tests run the transaction in a child process with ``EOS_FAULT_STEP`` armed and SIGKILL it
at the step, then continue in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.sql import SparkSession

from eos_dev.stack.services import StackConfig
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.hudi_timeline import checkpoint_history, latest_checkpoint
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hudi import HudiSinkError, HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import OneCluster
from eos_pipeline_tests.support.dead_letters import read_dead_letters
from eos_pipeline_tests.support.faults import FAULT_ENV

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCHEMA_MAP = {"id": "Int64", "name": "String", "score": "Float64"}
SCHEMA = TableSchema.from_mapping(SCHEMA_MAP)
BAD_VALUES = (b"\xffnot json", b'{"id": "seven", "name": "x", "score": 1}', b'{"id": 1}', None)


@dataclass
class Rig:
    kafka: KafkaSettings
    spark: SparkSession
    topic: str
    table: Path
    good: set[tuple[int, int]] = field(default_factory=set)
    bad: set[tuple[int, int]] = field(default_factory=set)
    serial: int = 0

    @property
    def dlq(self) -> str:
        return f"{self.topic}.dlq"

    def spec(self, **kw: object) -> HudiTableSpec:
        base: dict[str, object] = {
            "pipeline": "hudi-test",
            "topic": self.topic,
            "table_path": str(self.table),
            "table_name": "events",
            "schema": SCHEMA,
            "hudi_options": SMALL_TABLE_OPTIONS,
        }
        base.update(kw)
        return HudiTableSpec(**base)  # type: ignore[arg-type]

    def sync(self, **kw: object) -> HudiTableSync:
        spec = self.spec(**kw)
        return HudiTableSync(
            spec,
            OneCluster(self.kafka),
            self.spark,
            DeadLetterWriter(self.kafka, self.dlq, spec.pipeline),
        )

    def produce(self, per_partition: int, partitions: int, bad_every: int = 0) -> None:
        """Produce good records, and every ``bad_every``-th one bad (of each bad kind in turn)."""
        records: list[tuple[int | None, bytes | None, bytes | None]] = []
        kinds: dict[int, list[bool]] = {}
        for i in range(per_partition):
            for p in range(partitions):
                self.serial += 1
                is_bad = bad_every > 0 and self.serial % bad_every == 0
                value = (
                    BAD_VALUES[self.serial % len(BAD_VALUES)]
                    if is_bad
                    else json.dumps({"id": self.serial, "name": f"n{i}", "score": i / 2}).encode()
                )
                records.append((p, str(self.serial).encode(), value))
                kinds.setdefault(p, []).append(is_bad)
        delivered = produce_all(idempotent_producer(self.kafka), self.topic, records)
        # Delivery reports arrive per partition batch, not in produce order; within a partition
        # the idempotent producer keeps order, so offsets ascend in the order records were sent.
        for p, flags in kinds.items():
            offsets = sorted(o for q, o in delivered if q == p)
            for offset, is_bad in zip(offsets, flags, strict=True):
                (self.bad if is_bad else self.good).add((p, offset))

    def table_coordinates(self) -> Counter[tuple[int, int]]:
        rows = self.spark.read.format("hudi").load(str(self.table))
        mine = rows.where(rows["_topic"] == self.topic).select("_partition", "_offset")
        return Counter((r["_partition"], r["_offset"]) for r in mine.collect())

    def dead_coordinates(self) -> set[tuple[int, int]]:
        return {
            (int(h["eos.source.partition"]), int(h["eos.source.offset"]))
            for h in read_dead_letters(self.kafka, self.dlq)
            if h["eos.source.topic"] == self.topic
        }

    def assert_exactly_once(self) -> None:
        stored = self.table_coordinates()
        doubled = {c: n for c, n in stored.items() if n > 1}
        assert not doubled, f"offsets stored more than once: {sorted(doubled.items())[:10]}"
        assert set(stored) == self.good, (
            f"missing {sorted(self.good - set(stored))[:10]}, "
            f"unexpected {sorted(set(stored) - self.good)[:10]}"
        )
        assert self.dead_coordinates() == self.bad
        ends = end_offsets(self.kafka, self.topic)
        checkpoint = latest_checkpoint(str(self.table))
        assert checkpoint == {TopicPartition(self.topic, p): e for p, e in ends.items()}


@pytest.fixture
def rig(kafka_settings: KafkaSettings, spark: SparkSession, topic_name: str, tmp_path: Path) -> Rig:
    return Rig(kafka_settings, spark, topic_name, tmp_path / "table")


def run_until_caught_up(sync: HudiTableSync, limit: int = 20) -> list[str]:
    instants: list[str] = []
    for _ in range(limit):
        report = sync.run()
        if report.instant_time is None:
            return instants
        instants.append(report.instant_time)
    raise AssertionError(f"not caught up after {limit} transactions")


# --------------------------------------------------------------------------------------- tests


def test_transactions_until_caught_up_hold_every_offset_once(rig: Rig) -> None:
    create_topic(rig.kafka, rig.topic, partitions=3)
    rig.produce(per_partition=100, partitions=3, bad_every=23)
    sync = rig.sync(max_records_per_partition=40)

    instants = run_until_caught_up(sync)

    assert len(instants) == 3  # 100 offsets per partition, 40 per transaction
    rig.assert_exactly_once()
    assert rig.bad, "the data set must contain bad records for this test to mean anything"


def test_commit_metadata_holds_exactly_each_transactions_end_offsets(rig: Rig) -> None:
    create_topic(rig.kafka, rig.topic, partitions=2)
    rig.produce(per_partition=30, partitions=2)
    sync = rig.sync(max_records_per_partition=12)
    reports = []
    while (report := sync.run()).instant_time is not None:
        reports.append(report)

    history = checkpoint_history(str(rig.table))
    assert [c.instant_time for c in reversed(history)] == [r.instant_time for r in reports]
    expected = [
        {TopicPartition(rig.topic, p): min(30, 12 * n) for p in range(2)} for n in (1, 2, 3)
    ]
    assert [c.checkpoint for c in reversed(history)] == expected
    # Each commit's record count matches its ranges: the metadata tells the truth about the data.
    assert [r.total_records_read for r in reports] == [24, 24, 12]
    rig.assert_exactly_once()


def test_merge_on_read_table_is_exactly_once_across_transactions(rig: Rig) -> None:
    create_topic(rig.kafka, rig.topic, partitions=2)
    sync = rig.sync(table_type="MERGE_ON_READ")
    rig.produce(per_partition=25, partitions=2, bad_every=17)
    first = sync.run()
    rig.produce(per_partition=25, partitions=2, bad_every=17)
    second = sync.run()

    assert first.instant_time and second.instant_time
    actions = {c.action for c in checkpoint_history(str(rig.table))}
    assert actions == {"deltacommit"}
    rig.assert_exactly_once()


def commit_operations(table: Path) -> list[str]:
    """Hudi's ``operationType`` of each completed commit, oldest first (read with hudi-rs)."""
    from eos_pipeline.adapters.hudi_timeline import completed_instants

    timeline, instants = completed_instants(str(table))
    docs = [json.loads(timeline.get_instant_metadata_in_json(i.handle)) for i in instants]
    return [d.get("operationType") for d in reversed(docs)]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_auto_bulk_inserts_a_backlog_and_upserts_the_small_runs_after_it(
    rig: Rig, table_type: str
) -> None:
    create_topic(rig.kafka, rig.topic, partitions=2)
    rig.produce(per_partition=30, partitions=2, bad_every=11)  # 60 planned: a backlog
    sync = rig.sync(operation="auto", bulk_insert_min_records=50, table_type=table_type)
    plan = sync.plan()
    # keyed by a business key, upsert keeps the latest row per key: auto never bulk-inserts
    by_id = rig.sync(operation="auto", bulk_insert_min_records=50, record_key_fields=("id",))
    assert (sync.operation(plan), by_id.operation(plan)) == ("bulk_insert", "upsert")
    backlog = sync.run_plan(plan)
    rig.produce(per_partition=5, partitions=2, bad_every=11)  # 10 planned: steady state
    steady = sync.run()

    assert (backlog.operation, steady.operation) == ("bulk_insert", "upsert")
    # the new table's empty commit that starts the timeline, then the two data commits
    assert commit_operations(rig.table)[-2:] == ["BULK_INSERT", "UPSERT"]
    assert sync.run().operation is None  # caught up: no commit, no operation
    rig.assert_exactly_once()


def test_transaction_over_some_partitions_carries_the_others_forward(rig: Rig) -> None:
    create_topic(rig.kafka, rig.topic, partitions=3)
    rig.produce(per_partition=10, partitions=3)
    sync = rig.sync()

    report = sync.run(partitions=[1])

    tp = [TopicPartition(rig.topic, p) for p in range(3)]
    assert report.ranges == {tp[1]: OffsetRange(0, 10)}
    assert latest_checkpoint(str(rig.table)) == {tp[0]: 0, tp[1]: 10, tp[2]: 0}
    assert set(rig.table_coordinates()) == {c for c in rig.good if c[0] == 1}
    sync.run()
    rig.assert_exactly_once()


def test_new_table_with_reset_latest_pins_its_start_then_reads_only_newer_records(
    rig: Rig,
) -> None:
    create_topic(rig.kafka, rig.topic, partitions=2)
    rig.produce(per_partition=5, partitions=2)
    old = set(rig.good)
    sync = rig.sync(reset="latest")

    pinned = sync.run()  # no record to read, but the start position must be committed

    assert pinned.instant_time is not None and pinned.total_records_read == 0
    rig.produce(per_partition=7, partitions=2)
    sync.run()
    rig.good -= old
    rig.assert_exactly_once()


def test_kafka_partition_added_later_joins_the_checkpoint(rig: Rig) -> None:
    create_topic(rig.kafka, rig.topic, partitions=1)
    rig.produce(per_partition=5, partitions=1)
    sync = rig.sync()
    sync.run()
    admin = AdminClient(rig.kafka.config())
    for future in admin.create_partitions([NewPartitions(rig.topic, 2)]).values():
        future.result(30)
    rig.produce(per_partition=5, partitions=2)

    sync.run()

    rig.assert_exactly_once()


def test_failed_read_of_one_partition_commits_nothing_and_moves_no_offset(rig: Rig) -> None:
    create_topic(rig.kafka, rig.topic, partitions=2)
    rig.produce(per_partition=20, partitions=2)
    sync = rig.sync()
    first = sync.run(until={0: 5, 1: 5})
    plan = sync.plan()
    assert {tp.partition: r for tp, r in plan.ranges.items()} == {
        0: OffsetRange(5, 20),
        1: OffsetRange(5, 20),
    }
    # Between planning and reading, offsets 0..9 of partition 1 disappear (as retention would).
    admin = AdminClient(rig.kafka.config())
    for future in admin.delete_records([KafkaTopicPartition(rig.topic, 1, 10)]).values():
        future.result(30)

    with pytest.raises(Exception, match=r"out of range|data loss|Cannot fetch offset"):
        sync.run_plan(plan)

    # Partition 0 read fine, but nothing committed: both positions are where they were.
    assert latest_checkpoint(str(rig.table)) == first.checkpoint_after
    assert max(o for p, o in rig.table_coordinates() if p == 0) == 4
    # The next plan refuses to jump over the deleted offsets instead of skipping them.
    with pytest.raises(HudiSinkError, match=r"offsets \[5, 10\) were deleted"):
        sync.plan()


def test_recreated_topic_is_refused_with_a_clear_error(rig: Rig) -> None:
    create_topic(rig.kafka, rig.topic, partitions=1)
    rig.produce(per_partition=10, partitions=1)
    sync = rig.sync()
    sync.run()
    admin = AdminClient(rig.kafka.config())
    for future in admin.delete_topics([rig.topic]).values():
        future.result(30)
    _wait_until_deleted(rig)
    create_topic(rig.kafka, rig.topic, partitions=1)
    produce_all(idempotent_producer(rig.kafka), rig.topic, [(0, None, b'{"id": 1}')])

    with pytest.raises(HudiSinkError, match=r"now has id .*deleted and recreated"):
        sync.run()
    assert latest_checkpoint(str(rig.table)) == {TopicPartition(rig.topic, 0): 10}


def _wait_until_deleted(rig: Rig) -> None:
    import time

    admin = AdminClient(rig.kafka.config())
    for _ in range(100):
        if rig.topic not in admin.list_topics(timeout=10).topics:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {rig.topic} was not deleted")


# ----------------------------------------------------------------------------- process kills


def run_child(rig: Rig, step: str | None, **extra: object) -> subprocess.CompletedProcess[str]:
    args = {
        "bootstrap": rig.kafka.bootstrap_servers,
        "pipeline": "hudi-test",
        "topic": rig.topic,
        "table_path": str(rig.table),
        "table_name": "events",
        "schema": SCHEMA_MAP,
        "dlq": rig.dlq,
        **extra,
    }
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if step:
        env[FAULT_ENV] = step
    return subprocess.run(
        [sys.executable, "-m", "eos_pipeline_tests.sinks.hudi_child", json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _timeline_files(table: Path) -> list[str]:
    folder = table / ".hoodie" / "timeline"
    return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def test_kill_inside_the_hudi_write_is_rolled_back_and_the_rerun_commits_once(rig: Rig) -> None:
    create_topic(rig.kafka, rig.topic, partitions=2)
    rig.produce(per_partition=40, partitions=2, bad_every=19)
    sync = rig.sync()
    first = sync.run()  # a committed transaction before the crash
    rig.produce(per_partition=40, partitions=2, bad_every=19)

    child = run_child(rig, "mid_hudi_write")

    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    unfinished = [n for n in _timeline_files(rig.table) if n.endswith((".inflight", ".requested"))]
    assert unfinished, f"the kill should leave an unfinished instant: {_timeline_files(rig.table)}"
    # The crashed write is invisible: the checkpoint is still the first transaction's.
    assert latest_checkpoint(str(rig.table)) == first.checkpoint_after

    rerun = sync.run()

    assert rerun.checkpoint_before == first.checkpoint_after
    history = checkpoint_history(str(rig.table))
    assert [c.instant_time for c in history] == [rerun.instant_time, first.instant_time]
    rig.assert_exactly_once()


def test_kill_after_the_commit_completed_writes_nothing_twice(
    rig: Rig, spark_connect: StackConfig
) -> None:
    """The killed run is a thin client of the session's Connect server (as Dagster runs are):
    past its commit nothing of its write is left to take down with the driver."""
    create_topic(rig.kafka, rig.topic, partitions=2)
    rig.produce(per_partition=30, partitions=2, bad_every=11)

    child = run_child(rig, "after_hudi_commit", spark_remote=spark_connect.spark_connect_url)

    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    ends = end_offsets(rig.kafka, rig.topic)
    assert latest_checkpoint(str(rig.table)) == {
        TopicPartition(rig.topic, p): e for p, e in ends.items()
    }
    rerun = rig.sync().run()
    assert rerun.instant_time is None  # the position had already moved with the data
    rig.assert_exactly_once()
