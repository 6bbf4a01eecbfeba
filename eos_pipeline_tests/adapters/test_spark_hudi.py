"""Spark reads exact Kafka offset ranges and writes them to Hudi as one checkpointed commit.

Everything is real: the local Kafka broker of the test session, one Spark JVM (``local[2]``)
shared by the whole pytest session, Hudi 1.2 writing to a temporary directory. Expected offsets
come from the producer's own delivery reports, never from the code under test.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from dagster_pyspark import PySparkResource
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from eos_pipeline.adapters.hudi import (
    SMALL_TABLE_OPTIONS,
    TOPIC_ID_SUFFIX,
    CommitInfo,
    HudiCommitError,
    hudi_write_options,
    write_transaction,
)
from eos_pipeline.adapters.hudi_timeline import checkpoint_history, latest_checkpoint
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic
from eos_pipeline.adapters.spark import (
    FENCING_EXPECTED_OPTION,
    FENCING_STRATEGY_CLASS,
    SparkKafkaError,
    kafka_source_options,
    read_kafka_ranges,
    spark_conf,
    spark_failure,
)
from eos_pipeline.core.checkpoint import (
    CHECKPOINT_KEY_V1,
    CHECKPOINT_KEY_V2,
    CheckpointError,
    merge_checkpoint,
)
from eos_pipeline.core.decode import decode_json as core_decode_json
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import Column, TableSchema
from eos_pipeline_tests.support.spark_rows import decode_json, with_source_columns

pytestmark = [pytest.mark.integration, pytest.mark.spark]

Delivered = dict[tuple[int, int], bytes]  # (partition, offset) -> value


# ------------------------------------------------------------------------------------ fixtures


# ------------------------------------------------------------------------------------- helpers


class _Recorder:
    """Delivery reports of a producer: where each record really landed."""

    def __init__(self) -> None:
        self.delivered: Delivered = {}
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.delivered[(msg.partition(), msg.offset())] = msg.value()


def _send(
    producer: Producer, topic: str, recorder: _Recorder, records: list[tuple[int, bytes]]
) -> None:
    for partition, value in records:
        producer.produce(topic, value=value, partition=partition, on_delivery=recorder)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not recorder.errors, recorder.errors


def _payloads(partitions: int, start: int, count: int, tag: str) -> list[tuple[int, bytes]]:
    return [
        (p, json.dumps({"p": p, "i": i, "tag": tag}).encode())
        for i in range(start, start + count)
        for p in range(partitions)
    ]


def produce_plain(
    settings: KafkaSettings, topic: str, records: list[tuple[int, bytes]]
) -> Delivered:
    producer = Producer(settings.config(**{"enable.idempotence": True, "linger.ms": 5}))
    recorder = _Recorder()
    _send(producer, topic, recorder, records)
    return recorder.delivered


def produce_transactions(
    settings: KafkaSettings, topic: str, batches: list[tuple[bool, list[tuple[int, bytes]]]]
) -> tuple[Delivered, Delivered]:
    """Produce each batch in its own transaction, committed or aborted; (committed, aborted)."""
    producer = Producer(settings.config(**{"transactional.id": f"tx-{topic}", "linger.ms": 5}))
    producer.init_transactions(30)
    committed: Delivered = {}
    aborted: Delivered = {}
    for commit, records in batches:
        recorder = _Recorder()
        producer.begin_transaction()
        _send(producer, topic, recorder, records)
        if commit:
            producer.commit_transaction(30)
            committed.update(recorder.delivered)
        else:
            producer.abort_transaction(30)
            aborted.update(recorder.delivered)
    return committed, aborted


def in_ranges(
    delivered: Delivered, topic: str, ranges: dict[TopicPartition, OffsetRange]
) -> Delivered:
    return {
        (p, o): v
        for (p, o), v in delivered.items()
        if (r := ranges.get(TopicPartition(topic, p))) is not None and o in r
    }


def _delete_records_before(
    settings: KafkaSettings, topic: str, partition: int, offset: int
) -> None:
    admin = AdminClient(settings.config())
    for future in admin.delete_records([KafkaTopicPartition(topic, partition, offset)]).values():
        future.result(30)


def hudi_resolved_checkpoint(spark: SparkSession, table: str) -> tuple[str, str]:
    """The checkpoint of the last completed commit as Hudi's own Java code resolves it."""
    jvm = spark.sparkContext._jvm
    storage = jvm.org.apache.hudi.hadoop.fs.HadoopFSUtils.getStorageConf(
        spark.sparkContext._jsc.hadoopConfiguration()
    )
    meta = (
        jvm.org.apache.hudi.common.table.HoodieTableMetaClient.builder()
        .setConf(storage)
        .setBasePath(table)
        .build()
    )
    timeline = meta.getActiveTimeline().getCommitsTimeline().filterCompletedInstants()
    metadata = timeline.readCommitMetadata(timeline.lastInstant().get())
    resolved = jvm.org.apache.hudi.common.table.checkpoint.CheckpointUtils.getCheckpoint(metadata)
    return resolved.getClass().getSimpleName(), resolved.getCheckpointKey()


def table_rows(spark: SparkSession, path: Path) -> DataFrame:
    return spark.read.format("hudi").load(str(path))


def coordinates(df: DataFrame) -> list[tuple[str, int, int]]:
    return [(r[0], r[1], r[2]) for r in df.select("_topic", "_partition", "_offset").collect()]


# --------------------------------------------------------------------------------------- tests


def test_smoke_dagster_asset_reads_fixed_range_into_hudi(
    spark: SparkSession,
    spark_config: dict[str, str],
    kafka_settings: KafkaSettings,
    topic_name: str,
    tmp_path: Path,
) -> None:
    create_topic(kafka_settings, topic_name, partitions=3)
    committed, _aborted = produce_transactions(
        kafka_settings,
        topic_name,
        [
            (True, _payloads(3, 0, 30, "a")),
            (False, _payloads(3, 30, 5, "aborted")),
            (True, _payloads(3, 35, 20, "b")),
        ],
    )
    # Per partition: 0-29 committed, 30 marker, 31-35 aborted, 36 marker, 37-56 committed, 57.
    assert sorted(o for p, o in committed if p == 0) == [*range(30), *range(37, 57)]
    ranges = {
        TopicPartition(topic_name, 0): OffsetRange(10, 45),  # crosses the aborted transaction
        TopicPartition(topic_name, 1): OffsetRange(0, 58),  # the whole log, markers included
        TopicPartition(topic_name, 2): OffsetRange(31, 37),  # only aborted records and markers
    }
    expected = in_ranges(committed, topic_name, ranges)
    assert {p for p, _ in expected} == {0, 1}  # partition 2's range holds no committed record
    checkpoint = {tp: r.end for tp, r in ranges.items()}
    table = tmp_path / "smoke"
    timings: dict[str, float] = {}

    @dg.asset(name="hudi_smoke")
    def hudi_smoke(pyspark: PySparkResource) -> dg.MaterializeResult:
        session = pyspark.spark_session
        assert session.conf.get("spark.sql.extensions") == spark_config["spark.sql.extensions"]
        df = read_kafka_ranges(session, kafka_settings.bootstrap_servers, {}, ranges)
        started = time.monotonic()
        commit = write_transaction(
            with_source_columns(df),
            str(table),
            "smoke",
            checkpoint,
            expected_previous=None,
            options=SMALL_TABLE_OPTIONS,
        )
        timings["write"] = time.monotonic() - started
        return dg.MaterializeResult(
            metadata={"instant": commit.instant_time, "checkpoint": str(commit.checkpoint)}
        )

    result = dg.materialize(
        [hudi_smoke], resources={"pyspark": PySparkResource(spark_config=spark_config)}
    )
    assert result.success

    started = time.monotonic()
    rows = table_rows(spark, table).select("_topic", "_partition", "_offset", "value").collect()
    timings["read"] = time.monotonic() - started
    print(f"[timing] first Hudi write {timings['write']:.1f}s, read back {timings['read']:.1f}s")

    assert len(rows) == len(expected)
    assert {(r["_partition"], r["_offset"]) for r in rows} == set(expected)
    assert {r["_topic"] for r in rows} == {topic_name}
    assert {(r["_partition"], r["_offset"]): bytes(r["value"]) for r in rows} == expected
    assert not any(b"aborted" in bytes(r["value"]) for r in rows)

    assert latest_checkpoint(str(table)) == checkpoint
    # The checkpoint is in the completed commit file itself (Hudi 1.x: Avro, in
    # .hoodie/timeline, named <requested>_<completed>.commit), written under the V2 key.
    # (The other completed commit is the empty one that starts a new table's timeline.)
    done = list((table / ".hoodie" / "timeline").glob("*_*.commit"))
    carrying = [p.read_bytes() for p in done if CHECKPOINT_KEY_V2.encode() in p.read_bytes()]
    assert len(done) == 2 and len(carrying) == 1
    raw = carrying[0]
    assert f"{topic_name},0:45,1:58,2:37".encode() in raw


def test_two_transactions_carry_untouched_partitions_forward(
    spark: SparkSession, kafka_settings: KafkaSettings, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka_settings, topic_name, partitions=3)
    delivered = produce_plain(kafka_settings, topic_name, _payloads(3, 0, 20, "first"))
    table = str(tmp_path / "mor")
    tps = [TopicPartition(topic_name, p) for p in range(3)]

    def write(
        ranges: dict[TopicPartition, OffsetRange],
        checkpoint: dict[TopicPartition, int],
        previous: dict[TopicPartition, int] | None,
    ) -> CommitInfo:
        df = with_source_columns(
            read_kafka_ranges(spark, kafka_settings.bootstrap_servers, {}, ranges)
        )
        return write_transaction(
            df,
            table,
            "mor",
            checkpoint,
            table_type="MERGE_ON_READ",
            partition_count=3,
            expected_previous=previous,
            options=SMALL_TABLE_OPTIONS,
        )

    first = {tps[0]: OffsetRange(0, 10), tps[1]: OffsetRange(0, 8), tps[2]: OffsetRange(0, 20)}
    cp1 = merge_checkpoint(None, {tp: r.end for tp, r in first.items()})
    commit1 = write(first, cp1, None)
    assert commit1.action == "deltacommit"
    assert latest_checkpoint(table) == {tps[0]: 10, tps[1]: 8, tps[2]: 20}

    delivered.update(produce_plain(kafka_settings, topic_name, [(1, b'{"late": 1}')] * 10))
    second = {tps[1]: OffsetRange(8, 30)}
    cp2 = merge_checkpoint(cp1, {tps[1]: 30})
    commit2 = write(second, cp2, cp1)

    assert latest_checkpoint(table) == {tps[0]: 10, tps[1]: 30, tps[2]: 20}
    assert commit2.extra_metadata[CHECKPOINT_KEY_V2] == f"{topic_name},0:10,1:30,2:20"
    assert [c.instant_time for c in checkpoint_history(table)] == [
        commit2.instant_time,
        commit1.instant_time,
    ]

    expected = {
        (topic_name, p, o)
        for (p, o) in in_ranges(delivered, topic_name, first)
        | in_ranges(delivered, topic_name, second)
    }
    assert len(expected) == 10 + 30 + 20
    rows = table_rows(spark, tmp_path / "mor")
    dupes = rows.groupBy("_topic", "_partition", "_offset").count().where("count != 1")
    assert dupes.count() == 0
    assert rows.count() == len(expected)
    assert set(coordinates(rows)) == expected

    # A stale writer (it started from cp1, but cp2 is committed) must not commit anything.
    with pytest.raises(HudiCommitError, match="another writer committed"):
        write(second, cp2, cp1)
    # Nor may a transaction move a partition backwards.
    with pytest.raises(CheckpointError, match="backwards"):
        write({tps[1]: OffsetRange(8, 20)}, {**cp2, tps[1]: 20}, cp2)
    assert len(checkpoint_history(table)) == 2
    assert latest_checkpoint(table) == cp2
    # Hudi's own resolver (what HoodieStreamer calls on resume) sees the same checkpoint.
    assert hudi_resolved_checkpoint(spark, table) == (
        "StreamerCheckpointV2",
        f"{topic_name},0:10,1:30,2:20",
    )


def test_failed_write_leaves_no_checkpoint_and_never_completes(
    spark: SparkSession, kafka_settings: KafkaSettings, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka_settings, topic_name, partitions=1)
    delivered = produce_plain(kafka_settings, topic_name, _payloads(1, 0, 20, "x"))
    tp = TopicPartition(topic_name, 0)
    table = str(tmp_path / "crash")
    df = with_source_columns(
        read_kafka_ranges(spark, kafka_settings.bootstrap_servers, {}, {tp: OffsetRange(0, 10)})
    )
    write_transaction(df, table, "crash", {tp: 10}, options=SMALL_TABLE_OPTIONS)

    # The task reaching offset 15 dies after Hudi has requested the commit: a crash mid-write.
    whole = with_source_columns(
        read_kafka_ranges(spark, kafka_settings.bootstrap_servers, {}, {tp: OffsetRange(10, 20)})
    )
    crashing = whole.withColumn(
        "value",
        F.when(F.assert_true(F.col("_offset") != 15, "injected crash").isNull(), F.col("value")),
    )
    with pytest.raises(Py4JJavaError, match="injected crash"):
        write_transaction(crashing, table, "crash", {tp: 20}, options=SMALL_TABLE_OPTIONS)
    assert latest_checkpoint(table) == {tp: 10}
    timeline = Path(table) / ".hoodie" / "timeline"

    def instant_times(pattern: str) -> set[str]:
        return {f.name.split(".")[0].split("_")[0] for f in timeline.glob(pattern)}

    # Hudi left the crashed commit pending (requested, not completed) and the checkpoint above
    # was read past it. In Hudi 1.x a completed instant keeps its .requested and .inflight files
    # next to <requested>_<completed>.commit, hence the set difference.
    pending = instant_times("[0-9]*.commit.requested") - instant_times("[0-9]*_*.commit")
    assert len(pending) == 1
    crashed = pending.pop()

    commit = write_transaction(
        whole, table, "crash", {tp: 20}, expected_previous={tp: 10}, options=SMALL_TABLE_OPTIONS
    )
    assert commit.checkpoint == {tp: 20}
    # The crashed instant never completes. Under optimistic concurrency control the next writer
    # does not roll it back (it could be a live writer's): the cleaner does, lazily, once its
    # heartbeat expired. Until then its files are simply never read.
    assert crashed not in instant_times("[0-9]*_*.commit")
    assert latest_checkpoint(table) == {tp: 20}
    rows = table_rows(spark, Path(table))
    assert rows.count() == 20
    assert set(coordinates(rows)) == {(topic_name, 0, o) for (_, o) in delivered}


def test_range_without_records_still_commits_its_checkpoint(
    spark: SparkSession, kafka_settings: KafkaSettings, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka_settings, topic_name, partitions=1)
    committed, aborted = produce_transactions(
        kafka_settings,
        topic_name,
        [(True, _payloads(1, 0, 5, "kept")), (False, _payloads(1, 5, 3, "aborted"))],
    )
    # 0-4 committed, 5 commit marker, 6-8 aborted, 9 abort marker: [6, 10) holds no record.
    assert sorted(o for _, o in committed) == [0, 1, 2, 3, 4]
    assert sorted(o for _, o in aborted) == [6, 7, 8]
    tp = TopicPartition(topic_name, 0)
    table = str(tmp_path / "empty")
    for rng in (OffsetRange(0, 6), OffsetRange(6, 10)):
        df = read_kafka_ranges(spark, kafka_settings.bootstrap_servers, {}, {tp: rng})
        write_transaction(
            with_source_columns(df), table, "empty", {tp: rng.end}, options=SMALL_TABLE_OPTIONS
        )
    assert latest_checkpoint(table) == {tp: 10}
    assert len(checkpoint_history(table)) == 2
    rows = table_rows(spark, Path(table))
    assert sorted(o for _, _, o in coordinates(rows)) == [0, 1, 2, 3, 4]


def test_table_checkpointed_by_an_older_streamer_is_continued(
    spark: SparkSession, kafka_settings: KafkaSettings, topic_name: str, tmp_path: Path
) -> None:
    """A table whose last commit has only the V1 key (pre-1.0 HoodieStreamer) is resumed."""
    create_topic(kafka_settings, topic_name, partitions=2)
    delivered = produce_plain(kafka_settings, topic_name, _payloads(2, 0, 6, "x"))
    tps = [TopicPartition(topic_name, p) for p in range(2)]
    table = str(tmp_path / "handover")
    first = {tps[0]: OffsetRange(0, 4), tps[1]: OffsetRange(0, 6)}
    df = with_source_columns(read_kafka_ranges(spark, kafka_settings.bootstrap_servers, {}, first))
    # What an older streamer leaves behind: the checkpoint under deltastreamer.checkpoint.key.
    legacy = hudi_write_options("handover", {tps[0]: 4, tps[1]: 6}, options=SMALL_TABLE_OPTIONS)
    legacy.pop(CHECKPOINT_KEY_V2)
    legacy["hoodie.datasource.write.commitmeta.key.prefix"] = "deltastreamer.checkpoint."
    legacy[CHECKPOINT_KEY_V1] = f"{topic_name},0:4,1:6"
    df.write.format("hudi").options(**legacy).mode("append").save(table)
    assert hudi_resolved_checkpoint(spark, table) == (
        "StreamerCheckpointV1",
        legacy[CHECKPOINT_KEY_V1],
    )
    assert latest_checkpoint(table) == {tps[0]: 4, tps[1]: 6}

    second = {tps[0]: OffsetRange(4, 6)}
    df = with_source_columns(read_kafka_ranges(spark, kafka_settings.bootstrap_servers, {}, second))
    cp = merge_checkpoint(latest_checkpoint(table), {tps[0]: 6})
    commit = write_transaction(
        df,
        table,
        "handover",
        cp,
        expected_previous={tps[0]: 4, tps[1]: 6},
        options=SMALL_TABLE_OPTIONS,
    )
    assert commit.checkpoint == {tps[0]: 6, tps[1]: 6}
    assert CHECKPOINT_KEY_V1 not in commit.extra_metadata
    rows = table_rows(spark, Path(table))
    assert sorted(coordinates(rows)) == sorted((topic_name, p, o) for (p, o) in delivered)


def test_write_options_carry_topic_id_and_fence_and_keep_concurrency_managed() -> None:
    tp = TopicPartition("t", 0)
    options = hudi_write_options("x", {tp: 5}, topic_id="id-1", fence_after="")
    assert options[CHECKPOINT_KEY_V2] == "t,0:5"
    # The datasource copies only options starting with its one prefix into the commit metadata.
    assert options[CHECKPOINT_KEY_V2 + TOPIC_ID_SUFFIX] == "id-1"
    prefix = options["hoodie.datasource.write.commitmeta.key.prefix"]
    assert (CHECKPOINT_KEY_V2 + TOPIC_ID_SUFFIX).startswith(prefix)
    assert options["hoodie.write.concurrency.mode"] == "optimistic_concurrency_control"
    assert options["hoodie.clean.failed.writes.policy"] == "LAZY"
    assert options["hoodie.write.lock.conflict.resolution.strategy"] == FENCING_STRATEGY_CLASS
    assert options[FENCING_EXPECTED_OPTION] == ""
    unfenced = hudi_write_options("x", {tp: 5})
    assert "hoodie.write.lock.conflict.resolution.strategy" not in unfenced
    zookeeper = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
    own_lock = hudi_write_options("x", {tp: 5}, options={"hoodie.write.lock.provider": zookeeper})
    assert own_lock["hoodie.write.lock.provider"] == zookeeper
    with pytest.raises(ValueError, match="managed"):
        hudi_write_options("x", {tp: 5}, options={"hoodie.write.concurrency.mode": "single_writer"})


def test_spark_failure_names_the_innermost_cause() -> None:
    java = RuntimeError(
        "An error occurred while calling o1.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 6.0 "
        "failed 1 times, most recent failure: Lost task 1.0: java.lang.IllegalStateException: x\n"
        "\tat org.apache.spark.Foo.bar(Foo.scala:1)\n"
        "Caused by: org.apache.kafka.common.errors.TimeoutException: outer\n"
        "Caused by: org.apache.kafka.clients.consumer.OffsetOutOfRangeException: out of range\n"
    )
    assert spark_failure(java) == (
        "Job aborted due to stage failure: Task 1 in stage 6.0 failed 1 times: "
        "org.apache.kafka.clients.consumer.OffsetOutOfRangeException: out of range"
    )
    python = RuntimeError(
        "An exception was thrown from the Python worker.\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in check\nRuntimeError: injected on attempt 0\n'
    )
    assert spark_failure(python) == "RuntimeError: injected on attempt 0"


def test_kafka_source_options_ask_for_exactly_the_ranges() -> None:
    t = "orders"
    options = kafka_source_options(
        "broker:9092",
        {"security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"},
        {TopicPartition(t, 1): OffsetRange(5, 9), TopicPartition(t, 0): OffsetRange(0, 3)},
        {"kafkaConsumer.pollTimeoutMs": "5000"},
    )
    assert json.loads(options["assign"]) == {t: [0, 1]}
    assert json.loads(options["startingOffsets"]) == {t: {"0": 0, "1": 5}}
    assert json.loads(options["endingOffsets"]) == {t: {"0": 3, "1": 9}}
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["failOnDataLoss"] == "true"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "PLAIN"
    assert options["kafkaConsumer.pollTimeoutMs"] == "5000"
    # The broker answers a small fetch at once (not after its 500 ms default); a caller may wait.
    assert options["kafka.fetch.max.wait.ms"] == "10"
    waiting = kafka_source_options(
        "b:1", {"fetch.max.wait.ms": "500"}, {TopicPartition(t, 0): OffsetRange(0, 1)}
    )
    assert waiting["kafka.fetch.max.wait.ms"] == "500"
    with pytest.raises(SparkKafkaError, match="set from the offset ranges"):
        kafka_source_options("b:1", {}, {TopicPartition(t, 0): OffsetRange(0, 1)}, {"subscribe": t})


def test_spark_conf_sizes_local_sessions_and_keeps_overrides() -> None:
    conf = spark_conf("local[3]", {"spark.sql.shuffle.partitions": "7"}, jars=["/a.jar", "/b.jar"])
    assert conf["spark.jars"] == "/a.jar,/b.jar"
    assert conf["spark.sql.shuffle.partitions"] == "7"
    assert conf["spark.default.parallelism"] == "3"
    assert conf["spark.serializer"] == "org.apache.spark.serializer.KryoSerializer"
    assert "TieredStopAtLevel" not in conf["spark.driver.extraJavaOptions"]
    remote = spark_conf("spark://master:7077", jars=[])
    assert "spark.sql.shuffle.partitions" not in remote
    assert "spark.driver.memory" not in remote
    assert remote["spark.sql.extensions"] == "org.apache.spark.sql.hudi.HoodieSparkSessionExtension"


def test_python_tasks_fork_from_the_daemon_that_imported_the_decoder(spark: SparkSession) -> None:
    """Each Python task runs in a worker forked from ``eos_pipeline.adapters.spark_daemon``
    (``spark.python.daemon.module``), which imported the decoder before forking."""

    def parent_of_worker(batches: Any) -> Any:
        import os
        import sys

        import pyarrow as pa

        cmdline = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ")
        preloaded = "eos_pipeline.core.decode" in sys.modules
        for batch in batches:
            n = batch.num_rows
            yield pa.RecordBatch.from_pydict(
                {"parent": [cmdline.decode()] * n, "preloaded": [preloaded] * n}
            )

    rows = (
        spark.range(4)
        .repartition(2)
        .mapInArrow(parent_of_worker, "parent string, preloaded boolean")
        .collect()
    )
    assert len(rows) == 4
    assert all("-m eos_pipeline.adapters.spark_daemon" in r.parent for r in rows), rows[0].parent
    assert all(r.preloaded for r in rows)


def test_decode_json_keeps_bad_records_with_their_coordinates(
    spark: SparkSession, kafka_settings: KafkaSettings, topic_name: str
) -> None:
    create_topic(kafka_settings, topic_name, partitions=1)
    values = [
        b'{"id": 1, "name": "a"}',
        b'{"id": 2}',  # name is optional
        b"not json",
        b'{"id": 4, "name": ',  # truncated
        b'{"id": "two"}',  # wrong type
        b'{"id": 1.5, "name": "f"}',  # float for an integer
        b'{"id": 5, "name": {"nested": true}}',  # an object for a string: refused (issue 17)
        b'{"name": "no id"}',  # required field missing
        b'{"id": null, "name": "x"}',  # required field null
        b'{"id": 3} trailing',
        b"[1, 2]",
        b"\xff\xfe",
        b"",
    ]
    delivered = produce_plain(kafka_settings, topic_name, [(0, v) for v in values])
    offset_of = {v: o for (_, o), v in delivered.items()}
    schema = TableSchema((Column("id", "Int64"), Column("name", "String", nullable=True)))
    df = read_kafka_ranges(
        spark,
        kafka_settings.bootstrap_servers,
        {},
        {TopicPartition(topic_name, 0): OffsetRange(0, len(values))},
    )
    good, bad = decode_json(df, schema)
    good_rows = {r["_offset"]: (r["id"], r["name"]) for r in good.collect()}
    bad_rows = {r["offset"]: (bytes(r["value"]), r["error"]) for r in bad.collect()}
    classes = {bytes(r["value"]): r["error_class"] for r in bad.collect()}

    assert good_rows == {
        offset_of[values[0]]: (1, "a"),
        offset_of[values[1]]: (2, None),
    }
    assert set(good_rows) | set(bad_rows) == {o for (_, o) in delivered}
    assert not set(good_rows) & set(bad_rows)
    errors = {value: error for value, error in bad_rows.values()}
    # The same classes and messages as the ClickHouse sink's decoder: both run the contract.
    assert classes == {
        b"not json": "DecodeError",
        b'{"id": 4, "name": ': "DecodeError",
        b'{"id": "two"}': "TypeMismatch",
        b'{"id": 1.5, "name": "f"}': "TypeMismatch",
        b'{"id": 5, "name": {"nested": true}}': "TypeMismatch",
        b'{"name": "no id"}': "MissingField",
        b'{"id": null, "name": "x"}': "MissingField",
        b'{"id": 3} trailing': "DecodeError",
        b"[1, 2]": "DecodeError",
        b"\xff\xfe": "DecodeError",
        b"": "DecodeError",
    }
    reference = core_decode_json(values, schema)
    assert errors == {values[b.index]: b.message for b in reference.bad}
    assert errors[b'{"id": "two"}'] == (
        "field 'id': string \"two\" does not fit Int64 (needs a JSON integer)"
    )
    assert errors[b'{"name": "no id"}'] == "required field 'id' is missing"
    assert errors[b"[1, 2]"] == "expected a JSON object, got array"
    assert set(good.columns) == {
        "_topic",
        "_partition",
        "_offset",
        "_kafka_timestamp",
        "id",
        "name",
    }
    # A size limit dead-letters larger records first, whatever else is wrong with them.
    small_good, small_bad = decode_json(df, schema, max_record_bytes=12)
    oversized = {
        bytes(r["value"]): r["error"]
        for r in small_bad.collect()
        if r["error_class"] == "Oversized"
    }
    assert {r["_offset"] for r in small_good.collect()} == {offset_of[values[1]]}
    assert (
        oversized[values[0]]
        == "key + value is 22 bytes, above the pipeline's max_record_bytes of 12"
    )
    assert set(oversized) == {v for v in values if len(v) > 12}


def test_read_fails_instead_of_skipping_offsets_lost_to_retention(
    spark: SparkSession, kafka_settings: KafkaSettings, topic_name: str
) -> None:
    create_topic(kafka_settings, topic_name, partitions=1)
    produce_plain(kafka_settings, topic_name, _payloads(1, 0, 10, "x"))
    _delete_records_before(kafka_settings, topic_name, 0, 5)  # as retention would
    ranges = {TopicPartition(topic_name, 0): OffsetRange(0, 10)}
    df = read_kafka_ranges(spark, kafka_settings.bootstrap_servers, {}, ranges)
    with pytest.raises(Py4JJavaError, match=r"(?s)Cannot fetch offset 0 .*data may have been lost"):
        df.collect()
    # The part still in the log reads fine.
    rest = read_kafka_ranges(
        spark,
        kafka_settings.bootstrap_servers,
        {},
        {TopicPartition(topic_name, 0): OffsetRange(5, 10)},
    )
    assert sorted(r["offset"] for r in rest.collect()) == [5, 6, 7, 8, 9]


def test_read_fails_when_the_range_ends_beyond_the_log(
    spark: SparkSession, kafka_settings: KafkaSettings, topic_name: str
) -> None:
    """Returning fewer records would let the checkpoint jump over records never read."""
    create_topic(kafka_settings, topic_name, partitions=1)
    produce_plain(kafka_settings, topic_name, _payloads(1, 0, 5, "x"))
    df = read_kafka_ranges(
        spark,
        kafka_settings.bootstrap_servers,
        {},
        {TopicPartition(topic_name, 0): OffsetRange(0, 8)},
        source_options={"kafkaConsumer.pollTimeoutMs": "1000"},
    )
    with pytest.raises(Py4JJavaError, match=r"(?s)Cannot fetch offset 5 .*data may have been lost"):
        df.collect()


def test_read_fails_when_the_range_ends_inside_an_open_transaction(
    spark: SparkSession, kafka_settings: KafkaSettings, topic_name: str
) -> None:
    """Records past the last stable offset have no fate yet: the read must not pretend."""
    create_topic(kafka_settings, topic_name, partitions=1)
    produce_plain(kafka_settings, topic_name, _payloads(1, 0, 5, "x"))
    producer = Producer(kafka_settings.config(**{"transactional.id": f"tx-{topic_name}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    recorder = _Recorder()
    _send(producer, topic_name, recorder, _payloads(1, 5, 3, "open"))
    assert sorted(recorder.delivered) == [(0, 5), (0, 6), (0, 7)]
    try:
        df = read_kafka_ranges(
            spark,
            kafka_settings.bootstrap_servers,
            {},
            {TopicPartition(topic_name, 0): OffsetRange(0, 8)},
            source_options={"kafkaConsumer.pollTimeoutMs": "1000"},
        )
        with pytest.raises(Py4JJavaError, match="Cannot fetch offset 5"):
            df.collect()
    finally:
        producer.abort_transaction(30)


def test_read_refuses_unsafe_client_options(spark: SparkSession) -> None:
    ranges = {TopicPartition("t", 0): OffsetRange(0, 1)}
    with pytest.raises(SparkKafkaError, match="read_committed"):
        read_kafka_ranges(spark, "127.0.0.1:1", {"isolation.level": "read_uncommitted"}, ranges)
    with pytest.raises(SparkKafkaError, match="failOnDataLoss"):
        read_kafka_ranges(
            spark, "127.0.0.1:1", {}, ranges, source_options={"failOnDataLoss": "false"}
        )
    empty = read_kafka_ranges(spark, "127.0.0.1:1", {}, {TopicPartition("t", 0): OffsetRange(3, 3)})
    assert empty.count() == 0
    assert empty.columns == ["topic", "partition", "offset", "timestamp", "key", "value"]
