"""The product's Hudi write path, run by a thin client of the stack's Spark Connect server.

The test session's one server (``spark_connect``, see ``support.spark_server``), started by the
stack's own code on a free port, ready only once it answered a real query; its teardown proves
``down`` leaves no process. The
client side is what a Dagster run would be: a ``sc://`` session, no JVM and no py4j in this
process for the Connect part. Kafka ranges are read with the product's ``read_kafka_ranges``
(the Kafka source runs on the server), written with ``write_transaction`` (the checkpoint
fence runs under the server's commit lock), and the checkpoint is read back with hudi-rs.

``EOS_TEST_SPARK_WORKERS=1`` runs the same tests with the server on a standalone master and
one worker (a real cluster; slower to start, so not the default).

PySpark 3.5 picks classic or Connect column functions by one process-wide environment variable
(``SPARK_CONNECT_MODE_ENABLED``) and refuses ``SparkSession.builder.remote()`` while a classic
session exists, which the test process has (the ``spark`` fixture). Tests here therefore build
the remote session with the Connect builder itself and set the variable only while they run.
The classic session is started before the first gRPC channel opens, and the channels are closed
when the module ends: PySpark launches its JVM with a ``fork`` that gRPC's fork handlers can
break while channels are live (seen here as ``JAVA_GATEWAY_EXITED``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
import pytest
from pyspark.sql import SparkSession

from eos_dev.stack.services import Stack, StackConfig
from eos_dev.stack.spark_connect import CONNECT, server_version
from eos_pipeline.adapters import hudi as hudi_adapter
from eos_pipeline.adapters import hudi_timeline
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi import (
    SMALL_TABLE_OPTIONS,
    HudiFencedError,
    write_transaction,
)
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
    topic_id,
)
from eos_pipeline.adapters.spark import read_kafka_ranges
from eos_pipeline.adapters.spark_remote import stable_session_id, with_session_id
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync, computed_once
from eos_pipeline.sinks.source import OneCluster
from eos_pipeline_tests.support.spark_rows import with_source_columns
from eos_pipeline_tests.support.spark_server import SessionServer

pytestmark = [pytest.mark.integration, pytest.mark.spark]

CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


_SESSIONS: list[SparkSession] = []


@pytest.fixture(scope="module")
def connect_server(spark_connect: StackConfig) -> Iterator[StackConfig]:
    """The test session's server; the Connect sessions of this module are closed at its end."""
    try:
        yield spark_connect
    finally:
        while _SESSIONS:
            _SESSIONS.pop().stop()


def remote_session(url: str, *, new: bool = False) -> SparkSession:
    """A Spark Connect client session (the caller has put the process in Connect mode)."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    builder = RemoteSparkSession.builder.remote(url)
    session = builder.create() if new else builder.getOrCreate()
    if session not in _SESSIONS:
        _SESSIONS.append(session)  # type: ignore[arg-type]
    return session  # type: ignore[return-value]


@pytest.fixture
def remote(connect_server: StackConfig, monkeypatch: pytest.MonkeyPatch) -> SparkSession:
    monkeypatch.setenv(CONNECT_MODE, "1")
    return remote_session(connect_server.spark_connect_url)


def produce(kafka: KafkaSettings, topic: str, count: int, partitions: int) -> set[tuple[int, int]]:
    """``count`` JSON records spread over the partitions; their (partition, offset) as acked."""
    records = [
        (i % partitions, str(i).encode(), json.dumps({"id": i, "name": f"n{i}"}).encode())
        for i in range(count)
    ]
    return set(produce_all(idempotent_producer(kafka), topic, records))


def hudi_rs_coordinates(table: str) -> set[tuple[int, int]]:
    """The table's (partition, offset) column pairs, read by hudi-rs: no Spark involved."""
    from hudi import HudiTableBuilder

    data = pa.Table.from_batches(HudiTableBuilder.from_base_uri(table).build().read())
    return set(zip(data["_partition"].to_pylist(), data["_offset"].to_pylist(), strict=True))


# --------------------------------------------------------------------------------------- tests


@pytest.mark.spark_cluster
def test_server_is_the_products_spark(connect_server: StackConfig, remote: SparkSession) -> None:
    statuses = {s.name: s for s in Stack(connect_server).status()}
    assert statuses[CONNECT].running
    assert statuses[CONNECT].endpoint == connect_server.spark_connect_url
    assert server_version(connect_server.spark_connect_url) == pyspark.__version__
    assert remote.conf.get("spark.sql.extensions") == (
        "org.apache.spark.sql.hudi.HoodieSparkSessionExtension"
    )
    jars = remote.conf.get("spark.jars")
    for jar in (
        "spark-connect_2.12",
        "hudi-spark3.5-bundle",
        "spark-sql-kafka",
        "eos-hudi-fencing",
    ):
        assert jar in jars, f"{jar} is not on the server's classpath"
    assert remote.sql("SELECT count(*) FROM range(10)").collect()[0][0] == 10


@pytest.mark.spark_cluster
def _this_machines_other_address() -> str | None:
    """An address of this machine that is not loopback (None if it has none)."""
    import ipaddress
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 9))  # no packet is sent: it only picks a route
            address = probe.getsockname()[0]
    except OSError:
        return None
    return None if ipaddress.ip_address(address).is_loopback else address


def test_the_server_serves_loopback_peers_only(connect_server: StackConfig) -> None:
    """Spark Connect 3.5 listens on every interface; the stack's interceptor refuses a client
    that reaches it through another address of this very machine, and says why."""
    from pyspark.sql.connect.client import SparkConnectClient

    address = _this_machines_other_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    port = connect_server.spark_connect_port
    client = SparkConnectClient(f"sc://{address}:{port}", retry_policy={"max_retries": 0})
    try:
        with pytest.raises(Exception, match="loopback"):
            client._analyze(method="spark_version")
    finally:
        client.close()
    assert server_version(connect_server.spark_connect_url) == pyspark.__version__


def test_kafka_ranges_into_hudi_through_connect(
    remote: SparkSession,
    kafka_settings: KafkaSettings,
    topic_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _kafka_ranges_into_hudi(remote, kafka_settings, topic_name, tmp_path, monkeypatch)


def test_the_same_on_a_standalone_master_and_worker(
    spark_connect: StackConfig,
    kafka_settings: KafkaSettings,
    topic_name: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real distributed Spark in every CI run: a second Connect server, started by the stack's
    own code on a standalone master with one worker, runs the Kafka read and the fenced Hudi
    commits of the test above; the executors ran in the worker's JVM, not in the server's.
    (``make test-cluster`` runs every ``spark_cluster`` test this way.)"""
    server = SessionServer(tmp_path_factory.mktemp("standalone"), workers=1)
    try:
        config = server.ready()
        monkeypatch.setenv(CONNECT_MODE, "1")
        remote = remote_session(config.spark_connect_url, new=True)
        assert remote.conf.get("spark.master") == config.spark_master_url
        _kafka_ranges_into_hudi(remote, kafka_settings, topic_name, tmp_path, monkeypatch)
        executors = list((config.state_dir / "spark-worker-1").glob("work/app-*/*/stderr"))
        assert executors, "no executor of the server's application ran on the worker"
        remote.stop()
        _SESSIONS.remove(remote)
    finally:
        server.stop()


def _kafka_ranges_into_hudi(
    remote: SparkSession,
    kafka_settings: KafkaSettings,
    topic_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    create_topic(kafka_settings, topic_name, partitions=3)
    delivered = produce(kafka_settings, topic_name, 1000, 3)
    ends = end_offsets(kafka_settings, topic_name)
    tps = [TopicPartition(topic_name, p) for p in range(3)]
    table = str(tmp_path / "connect")
    kafka_id = topic_id(kafka_settings, topic_name)

    def write(ranges: dict[TopicPartition, OffsetRange], checkpoint: dict, previous: Any) -> Any:
        df = read_kafka_ranges(remote, kafka_settings.bootstrap_servers, {}, ranges)
        return write_transaction(
            with_source_columns(df),
            table,
            "connect",
            checkpoint,
            expected_previous=previous,
            partition_count=3,
            topic_id=kafka_id,
            options=SMALL_TABLE_OPTIONS,
        )

    # Partitions 0 and 1 whole, partition 2 only in part: the server reads an `assign`ed subset.
    first_ranges = {tps[0]: OffsetRange(0, ends[0]), tps[1]: OffsetRange(0, ends[1])}
    first_ranges[tps[2]] = OffsetRange(0, 50)
    first = write(first_ranges, {tp: r.end for tp, r in first_ranges.items()}, None)
    assert hudi_timeline.latest_commit(table) == first
    assert first.topic_id == kafka_id
    final = {tp: ends[tp.partition] for tp in tps}
    second = write({tps[2]: OffsetRange(50, ends[2])}, final, first.checkpoint)
    assert hudi_timeline.latest_checkpoint(table) == final
    assert [c.instant_time for c in hudi_timeline.checkpoint_history(table)] == [
        second.instant_time,
        first.instant_time,
    ]

    # Every produced record exactly once, seen through the server and without any Spark.
    rows = remote.read.format("hudi").load(table).select("_partition", "_offset").collect()
    assert len(rows) == 1000
    assert {(r[0], r[1]) for r in rows} == delivered
    assert hudi_rs_coordinates(table) == delivered

    # A writer that planned from the first commit is fenced on the server, under Hudi's
    # commit lock: its early check is made to see the stale commit, so only the fence stops it.
    real = hudi_adapter.latest_commit
    calls = iter([first])
    monkeypatch.setattr(hudi_adapter, "latest_commit", lambda p: next(calls, None) or real(p))
    with pytest.raises(HudiFencedError, match="moved the table's checkpoint"):
        write({tps[2]: OffsetRange(50, ends[2])}, final, first.checkpoint)
    monkeypatch.setattr(hudi_adapter, "latest_commit", real)
    assert hudi_timeline.latest_commit(table) == second
    assert hudi_rs_coordinates(table) == delivered


def _sync(
    spark: SparkSession, kafka: KafkaSettings, topic: str, table: str, name: str
) -> HudiTableSync:
    spec = HudiTableSpec(
        pipeline=name,
        topic=topic,
        table_path=table,
        table_name=name,
        schema=TableSchema.from_mapping({"id": "Int64", "name": "String"}),
        hudi_options=SMALL_TABLE_OPTIONS,
    )
    return HudiTableSync(
        spec, OneCluster(kafka), spark, DeadLetterWriter(kafka, f"{topic}.dlq", name)
    )


def test_sink_runs_in_process_and_through_connect_alike(
    spark: SparkSession,
    connect_server: StackConfig,
    kafka_settings: KafkaSettings,
    topic_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sink's whole transaction (plan, read, decode, dead letters, commit) in both modes.

    Also the measurements of issue 14: connect, a run with nothing to do, and runs of 1,000
    records, through the server and on the test session's in-process Spark.
    """
    create_topic(kafka_settings, topic_name, partitions=2)
    create_topic(kafka_settings, f"{topic_name}.dlq", partitions=2)
    timings: dict[str, float] = {}

    def timed(label: str, action: Any) -> Any:
        started = time.monotonic()
        result = action()
        timings[label] = time.monotonic() - started
        return result

    url = connect_server.spark_connect_url
    monkeypatch.setenv(CONNECT_MODE, "1")
    remote = timed("connect: new session", lambda: remote_session(url, new=True))
    timed("connect: first query", lambda: remote.sql("SELECT 1").collect())
    monkeypatch.delenv(CONNECT_MODE)
    timed("in-process: first query", lambda: spark.sql("SELECT 1").collect())

    # The fence is found on the classpath of either kind of session (no SparkContext needed).
    assert hudi_adapter._fencing_available(spark)
    monkeypatch.setenv(CONNECT_MODE, "1")
    assert hudi_adapter._fencing_available(remote)
    monkeypatch.delenv(CONNECT_MODE)

    modes = {"connect": remote, "in-process": spark}
    syncs = {
        mode: _sync(session, kafka_settings, topic_name, str(tmp_path / mode), mode)
        for mode, session in modes.items()
    }
    produced: set[tuple[int, int]] = set()
    for round_ in (1, 2):
        batch = produce(kafka_settings, topic_name, 1000, 2)
        produce_all(idempotent_producer(kafka_settings), topic_name, [(0, None, b"{bad")])
        produced |= batch
        for mode, sync in syncs.items():
            if mode == "connect":
                monkeypatch.setenv(CONNECT_MODE, "1")
            report = timed(f"{mode}: run of 1,000 records (round {round_})", sync.run)
            assert report.total_rows_written == 1000 and report.total_dead_letters == 1
            noop = timed(f"{mode}: run with nothing to do", sync.run)
            assert noop.instant_time is None and noop.total_records_read == 0
            monkeypatch.delenv(CONNECT_MODE, raising=False)

    expected_ends = end_offsets(kafka_settings, topic_name)
    for mode, sync in syncs.items():
        table = sync.spec.table_path
        checkpoint = hudi_timeline.latest_checkpoint(table)
        assert checkpoint == {TopicPartition(topic_name, p): e for p, e in expected_ends.items()}
        assert hudi_rs_coordinates(table) == produced, f"{mode}: table is not exact"
    for label, seconds in timings.items():
        print(f"[timing] {label}: {seconds:.2f}s")


def test_rows_computed_once_are_computed_once_through_connect(
    remote: SparkSession, tmp_path: Path
) -> None:
    """``computed_once``: the actions after the first read the cache, through Connect too.

    Over Connect, ``DataFrame.persist()`` of a plan holding a Python function is never used
    (each action's plan is analyzed afresh): the sink's decode ran again for every action.
    """
    calls = tmp_path / "calls"
    calls.mkdir()
    where = str(calls)

    def mark(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import os
        import uuid

        with open(os.path.join(where, uuid.uuid4().hex), "w"):
            pass
        yield from batches

    frame = remote.range(0, 100, 1, 2).mapInArrow(mark, "id long")
    with computed_once(remote, frame) as rows:
        assert rows.count() == 100
        assert rows.where("id % 2 = 0").count() == 50
        assert sorted(r["id"] for r in rows.collect()) == list(range(100))
    assert len(list(calls.iterdir())) == 2  # one call per partition, for all three actions
    left = [t.name for t in remote.catalog.listTables() if t.name.startswith("eos_rows_")]
    assert left == []


def test_clients_with_the_same_session_id_share_one_server_session(
    connect_server: StackConfig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What ``connect(session_id=stable_session_id(key))`` gives runs of one key: one session
    on the server (its temporary views, and its Python workers), not one per run."""
    monkeypatch.setenv(CONNECT_MODE, "1")
    url = connect_server.spark_connect_url
    shared = with_session_id(url, stable_session_id(str(tmp_path)))
    remote_session(shared, new=True).range(3).createOrReplaceTempView("eos_shared_view")
    assert remote_session(shared, new=True).table("eos_shared_view").count() == 3
    assert not remote_session(url, new=True).catalog.tableExists("eos_shared_view")
