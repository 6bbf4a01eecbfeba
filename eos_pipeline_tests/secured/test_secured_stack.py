"""The pipeline on a secured, replicated estate: exact on the data, refused where it has no right.

Everything runs on the session's secured stack (``conftest.py``): three SASL_SSL brokers with
ACLs (RF 3, ``min.insync.replicas=2``) and a ZooKeeper ensemble that admits only authenticated
clients, the keeper root owned by the pipeline's digest user. The pipeline is built from a
pipelines file whose secrets are ``{env: NAME}``s and materialized with Dagster, as the demo does.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import dagster as dg
import pytest
from clickhouse_connect.driver.client import Client
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from eos_dev.stack.secure_config import PIPELINE
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.kafka import end_offsets
from eos_pipeline.adapters.keeper import KeeperAuthError, KeeperStateStore
from eos_pipeline.components.config import parse_config
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import keys_for
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import OneCluster
from eos_pipeline_tests.secured.conftest import (
    Secured,
    materialize_clickhouse,
    materialize_hudi,
    names,
    outputs_of,
    secrets_of,
)
from eos_pipeline_tests.sinks.clickhouse_stage import SCHEMA
from eos_pipeline_tests.support.dead_letters import read_dead_letters
from eos_pipeline_tests.support.definitions import build_definitions

pytestmark = pytest.mark.integration


def _offsets_in_table(client: Client, database: str, topic: str, partition: int) -> dict[int, int]:
    rows = client.query(
        f"SELECT _offset, count() FROM `{database}`.events "
        "WHERE _topic = {t:String} AND _partition = {p:Int32} GROUP BY _offset",
        parameters={"t": topic, "p": partition},
    ).result_rows
    return {int(o): int(n) for o, n in rows}


def _dead(s: Secured) -> dict[int, set[int]]:
    """Dead-lettered source offsets per partition, read back as the admin."""
    dead: dict[int, set[int]] = {}
    for h in read_dead_letters(s.admin(), s.dead_letter_topic):
        if h["eos.source.topic"] == s.topic:
            dead.setdefault(int(h["eos.source.partition"]), set()).add(int(h["eos.source.offset"]))
    return dead


def _assert_exact(s: Secured, client: Client, database: str, partitions: int) -> None:
    ends = end_offsets(s.admin(), s.topic)
    dead = _dead(s)
    for p in range(partitions):
        kafka = set(_records(s, p, ends[p]))
        expected = {o: 1 for o in kafka - dead.get(p, set())}
        assert _offsets_in_table(client, database, s.topic, p) == expected, f"partition {p}"


def _records(s: Secured, partition: int, end: int) -> list[int]:
    from eos_pipeline.adapters.kafka import read_range
    from eos_pipeline.core.offsets import OffsetRange

    return read_range(s.admin(), TopicPartition(s.topic, partition), OffsetRange(0, end)).offsets


def _secrets(s: Secured) -> list[str]:
    return secrets_of(s.config)


def _sync(s: Secured, kafka, store, client: Client, database: str) -> ClickHousePartitionSync:
    spec = ClickHouseTableSpec(
        pipeline=s.pipeline, database=database, table="events", schema=SCHEMA, max_records=10
    )
    return ClickHousePartitionSync(
        spec,
        kafka,
        store,
        ClickHouseSink(client),
        DeadLetterWriter(kafka, s.dead_letter_topic, s.pipeline),
    )


# ------------------------------------------------------------------------------------- exact


def test_demo_pipeline_is_exact_on_the_secured_stack_and_no_secret_shows(
    secured: Secured,
    chdb_client: Client,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = secured
    s.create_topics(3, s.topic, s.dead_letter_topic)
    s.produce({0: 30, 1: 20, 2: 25}, bad_every=7)
    database = f"db_{s.pipeline}"
    config = parse_config(s.pipelines_yaml(chdb_client.path, database), "secured.yaml")
    assert s.config.password("eos-pipeline") not in repr(config)
    defs = build_definitions(config)
    pipeline = config.pipelines[0]
    keys = keys_for(s.topic, 3)
    storage = tmp_path / "dagster"
    storage.mkdir()
    with dg.instance_for_test(temp_dir=str(storage)) as instance:
        instance.add_dynamic_partitions(partitions_name(s.pipeline), keys)
        results = [materialize_clickhouse(defs, instance, k, pipeline) for k in keys]
        again = [
            materialize_clickhouse(defs, instance, k, pipeline) for k in keys
        ]  # nothing new, twice
        assert all(r.success for r in results + again), [
            e.message for r in results + again for e in r.all_events if e.is_failure
        ]
        for r in results:
            (check,) = r.get_asset_check_evaluations()
            assert check.passed
        logs = "\n".join(
            str(e.dagster_event or "") + str(e.user_message)
            for r in results + again
            for e in instance.all_logs(r.run_id)
        )
        metadata = "\n".join(
            repr(m.event_specific_data)
            for r in results
            for m in r.get_asset_materialization_events()
        )
        stored = outputs_of(storage)  # run and event storage, compute logs: while they exist
    _assert_exact(s, chdb_client, database, 3)
    assert sum(len(v) for v in _dead(s).values()) > 0
    headers = repr(read_dead_letters(s.admin(), s.dead_letter_topic))
    out, err = capfd.readouterr()
    everything = "\n".join(
        [logs, metadata, headers, out, err, caplog.text, stored, repr(defs.resources)]
    )
    for secret in _secrets(s):
        assert secret not in everything


def test_partition_leader_sigkilled_mid_run_then_next_run_completes_exact(
    secured: Secured, chdb_client: Client
) -> None:
    s = secured
    s.create_topics(1, s.topic, s.dead_letter_topic)
    s.produce({0: 60}, bad_every=9)
    database = f"db_{s.pipeline}"
    ClickHouseSink(chdb_client).ensure_table(database, "events", SCHEMA)
    meta = AdminClient(s.stack.admin_config()).list_topics(s.topic, timeout=10)
    leader = meta.topics[s.topic].partitions[0].leader
    tp = TopicPartition(s.topic, 0)
    batches = {"n": 0}

    def kill_leader_on_second_batch(step: str) -> None:
        if step == "after_keeper_before":
            batches["n"] += 1
            if batches["n"] == 2:
                s.stack.kill(f"kafka-{leader}")

    try:
        with KeeperStateStore(s.keeper()) as store:
            sync = _sync(s, s.kafka(), store, chdb_client, database)
            sync.fault = kill_leader_on_second_batch
            try:
                sync.run(tp)  # carries on with the new leader, or fails: both are allowed
            except Exception as exc:  # the point is what the next run does
                print(f"run with the leader killed failed: {exc!r}")
            assert batches["n"] >= 2, "the broker was never killed"
            again = _sync(s, s.kafka(), store, chdb_client, database).run(tp)
            assert again.end == end_offsets(s.admin(), s.topic)[0]
            _assert_exact(s, chdb_client, database, 1)
    finally:
        s.stack.restart(f"kafka-{leader}")


@pytest.mark.spark
def test_hudi_on_the_secured_stack_is_exact(
    secured: Secured, chdb_client: Client, spark: SparkSession, tmp_path: Path
) -> None:
    s = secured
    s.create_topics(2, s.topic, s.dead_letter_topic)
    s.produce({0: 12, 1: 9}, bad_every=5)
    hudi_path = str(tmp_path / "hudi")
    text = s.pipelines_yaml(chdb_client.path, f"db_{s.pipeline}", hudi_path)
    config = parse_config(text, "secured.yaml")
    defs = build_definitions(config)
    keys = keys_for(s.topic, 2)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(s.pipeline), keys)
        result = materialize_hudi(defs, instance, keys, config.pipelines[0])  # one commit
        assert result.success, [e.message for e in result.all_events if e.is_failure]
    rows = spark.read.format("hudi").load(hudi_path).groupBy("_partition", "_offset").count()
    counts = {(r[0], r[1]): r[2] for r in rows.collect()}
    ends = end_offsets(s.admin(), s.topic)
    dead = _dead(s)
    expected = {
        (p, o): 1 for p in ends for o in _records(s, p, ends[p]) if o not in dead.get(p, set())
    }
    assert counts == expected and sum(len(v) for v in dead.values()) == 4


def _kill_on_first_row(raw: DataFrame, pid: int, marker: Path) -> DataFrame:
    """``raw``, SIGKILLing process group ``pid`` from inside the read, as its first row passes
    (once: ``marker`` is made by the first call). The task's Kafka consumer goes on fetching the
    rest of the range from the killed leader."""

    def kill_once(partition: int) -> bool:
        import os
        import signal

        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return True
        os.killpg(pid, signal.SIGKILL)
        return True

    return raw.where(F.udf(kill_once, T.BooleanType())(F.col("partition")))


@pytest.mark.spark
def test_partition_leader_sigkilled_during_a_hudi_read_then_next_run_is_exact(
    secured: Secured, spark: SparkSession, tmp_path: Path
) -> None:
    s = secured
    s.create_topics(1, s.topic, s.dead_letter_topic)
    for _ in range(12):  # one batch per call: the read takes many fetches
        s.produce({0: 20}, bad_every=7)
    meta = AdminClient(s.stack.admin_config()).list_topics(s.topic, timeout=10)
    leader = f"kafka-{meta.topics[s.topic].partitions[0].leader}"
    pid = s.stack.pid(leader)
    assert pid is not None
    spec = HudiTableSpec(
        pipeline=s.pipeline,
        topic=s.topic,
        table_path=str(tmp_path / "hudi"),
        table_name=f"{s.pipeline}_events",
        schema=SCHEMA,
        hudi_options=SMALL_TABLE_OPTIONS,
        # a few records per fetch: most of the range is fetched after the kill
        kafka_options={**s.config.java_client_config(PIPELINE), "max.partition.fetch.bytes": "512"},
    )
    marker = tmp_path / "killed"

    def sync(hook=None) -> HudiTableSync:
        kafka = s.kafka()
        dlq = DeadLetterWriter(kafka, s.dead_letter_topic, s.pipeline)
        return HudiTableSync(spec, OneCluster(kafka), spark, dlq, source_hook=hook)

    try:
        started = time.monotonic()
        try:
            sync(lambda raw: _kill_on_first_row(raw, pid, marker)).run()
            print("the Hudi run carried on with the new leader")
        except Exception as exc:  # failing is allowed: the point is what the next run does
            print(f"the Hudi run with the leader killed failed: {exc!r}"[:2000])
        assert marker.exists() and s.stack.pid(leader) is None, "the leader was never killed"
        print(f"[timing] hudi run with the leader killed: {time.monotonic() - started:.1f}s")
        started = time.monotonic()
        sync().run()  # the next run: completes
        print(f"[timing] next hudi run: {time.monotonic() - started:.1f}s")
        end = end_offsets(s.admin(), s.topic)[0]
        rows = spark.read.format("hudi").load(spec.table_path).groupBy("_offset").count().collect()
        dead = _dead(s).get(0, set())
        expected = {o: 1 for o in _records(s, 0, end) if o not in dead}
        assert {r[0]: r[1] for r in rows} == expected and len(dead) == 24  # 2 of each 20
    finally:
        started = time.monotonic()
        s.stack.kill(leader)  # forget its pid file
        s.stack.restart(leader)
        print(f"[timing] {leader} back in {time.monotonic() - started:.1f}s")


def _zookeeper_leader(s: Secured) -> str:
    for node in s.config.keeper_nodes:
        try:
            with socket.create_connection((s.config.host, node.client_port), timeout=2) as sock:
                sock.sendall(b"srvr")
                if b"Mode: leader" in sock.recv(1024):
                    return f"zookeeper-{node.server_id}"
        except OSError:
            continue
    raise AssertionError("no ZooKeeper server says it leads")


def test_zookeeper_leader_sigkilled_between_before_and_after_then_next_run_is_exact(
    secured: Secured, chdb_client: Client
) -> None:
    s = secured
    s.create_topics(1, s.topic, s.dead_letter_topic)
    s.produce({0: 40}, bad_every=8)
    database = f"db_{s.pipeline}"
    ClickHouseSink(chdb_client).ensure_table(database, "events", SCHEMA)
    tp = TopicPartition(s.topic, 0)
    leader = _zookeeper_leader(s)
    killed = {"done": False}

    def kill_leader_after_insert(step: str) -> None:
        if step == "after_insert" and not killed["done"]:
            killed["done"] = True
            s.stack.kill(leader)  # the batch is in the table, its AFTER not yet in the keeper

    try:
        with KeeperStateStore(s.keeper()) as store:
            sync = _sync(s, s.kafka(), store, chdb_client, database)
            sync.fault = kill_leader_after_insert
            try:
                sync.run(tp)
            except Exception as exc:
                print(f"run with the ZooKeeper leader killed failed: {exc!r}")
            assert killed["done"]
        with KeeperStateStore(s.keeper()) as store:
            again = _sync(s, s.kafka(), store, chdb_client, database).run(tp)
            assert again.end == end_offsets(s.admin(), s.topic)[0]
        _assert_exact(s, chdb_client, database, 1)
    finally:
        s.stack.restart(leader)


# ------------------------------------------------------------------------------------ refusals


def _refused_materialization(s: Secured, chdb_client: Client, yaml_text: str) -> str:
    """Materialize partition 0 once and return the failure's message (it must fail)."""
    config = parse_config(yaml_text, "secured.yaml")
    defs = build_definitions(config)
    key = keys_for(s.topic, 1)[0]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(s.pipeline), [key])
        result = materialize_clickhouse(defs, instance, key, config.pipelines[0])
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures
    message = "\n".join(str(e.step_failure_data.error) for e in failures)
    for secret in _secrets(s):
        assert secret not in message
    return message


def _nothing_moved(s: Secured, chdb_client: Client, database: str) -> None:
    with KeeperStateStore(s.keeper()) as store:
        record = store.read(KeeperKey.of(s.pipeline, "clickhouse", TopicPartition(s.topic, 0)))
    assert record is None or not record.record.range_end  # at most a lease, no position
    if chdb_client.command(f"EXISTS TABLE `{database}`.events") == 1:
        assert _offsets_in_table(chdb_client, database, s.topic, 0) == {}


def test_wrong_kafka_password_is_refused_and_named(secured: Secured, chdb_client: Client) -> None:
    s = secured
    s.create_topics(1, s.topic, s.dead_letter_topic)
    s.produce({0: 10}, bad_every=3)
    database = f"db_{s.pipeline}"
    text = s.pipelines_yaml(chdb_client.path, database).replace(
        "sasl.password: {env: EOS_TEST_SECURE_KAFKA_PASSWORD}", "sasl.password: not-the-password"
    )
    message = _refused_materialization(s, chdb_client, text)
    assert "refused this client" in message and "Authentication failed" in message, message
    assert "sasl.password" in message, message  # what to fix
    _nothing_moved(s, chdb_client, database)
    assert _dead(s) == {}


def test_topic_without_read_acl_is_refused_and_named(secured: Secured, chdb_client: Client) -> None:
    topic, dlq, pipeline = names("noread.")  # outside the pipeline's READ prefix
    s = Secured(secured.stack, topic, dlq, pipeline)
    s.create_topics(1, s.topic, s.dead_letter_topic)
    s.produce({0: 10})
    database = f"db_{s.pipeline}"
    message = _refused_materialization(s, chdb_client, s.pipelines_yaml(chdb_client.path, database))
    assert "authoriz" in message.lower(), message
    assert s.topic in message, message
    _nothing_moved(s, chdb_client, database)
    assert _dead(s) == {}


def test_dead_letter_topic_without_write_acl_stops_the_partition_and_keeps_the_record(
    secured: Secured, chdb_client: Client
) -> None:
    topic, _, pipeline = names(secured.config.topic_prefix)
    s = Secured(secured.stack, topic, f"nowrite.{topic}", pipeline)  # no WRITE for the pipeline
    s.create_topics(1, s.topic, s.dead_letter_topic)
    s.produce({0: 10}, bad_every=5)  # offsets 4 and 9 do not decode
    database = f"db_{s.pipeline}"
    message = _refused_materialization(s, chdb_client, s.pipelines_yaml(chdb_client.path, database))
    assert "authoriz" in message.lower(), message
    assert s.dead_letter_topic in message, message
    assert _dead(s) == {}
    # The bad record was neither dead-lettered nor skipped: nothing at or past it is stored and
    # the position does not pass it.
    if chdb_client.command(f"EXISTS TABLE `{database}`.events") == 1:
        stored = _offsets_in_table(chdb_client, database, s.topic, 0)
        assert not [o for o in stored if o >= 4], stored
    with KeeperStateStore(s.keeper()) as store:
        record = store.read(KeeperKey.of(s.pipeline, "clickhouse", TopicPartition(s.topic, 0)))
    assert record is None or record.record.range_end <= 4 or record.record.phase == "BEFORE"


def test_keeper_client_without_the_acl_cannot_move_a_position(
    secured: Secured, chdb_client: Client
) -> None:
    s = secured
    s.create_topics(1, s.topic, s.dead_letter_topic)
    s.produce({0: 12})
    database = f"db_{s.pipeline}"
    ClickHouseSink(chdb_client).ensure_table(database, "events", SCHEMA)
    tp = TopicPartition(s.topic, 0)
    key = KeeperKey.of(s.pipeline, "clickhouse", tp)
    with KeeperStateStore(s.keeper()) as store:
        _sync(s, s.kafka(), store, chdb_client, database).run(tp)
        before = store.read(key)
    assert before is not None and before.record.range_end == 12
    # Another digest identity (or the pipeline's name with a wrong password) is refused by
    # ZooKeeper itself, reading or writing.
    for intruder in (s.keeper("eos-intruder", "guess"), s.keeper(password="wrong")):
        with KeeperStateStore(intruder) as other:
            with pytest.raises(KeeperAuthError, match="ACL"):
                other.acquire(key)
            with pytest.raises(NoAuthError):  # straight through kazoo: ZooKeeper says no
                other.client.set(store_path(other, key), b"{}")
    # A client that does not authenticate at all is not served.
    bare = KazooClient(hosts=s.config.zookeeper_hosts, timeout=5)
    refused = False
    try:
        bare.start(timeout=10)
        bare.get(s.config.keeper_root)
    except Exception:  # kazoo raises AuthFailed/NoAuth/ConnectionLoss here
        refused = True
    finally:
        bare.stop()
        bare.close()
    assert refused, "ZooKeeper served a client without credentials"
    with KeeperStateStore(s.keeper()) as store:
        after = store.read(key)
    assert after is not None and after.record == before.record


def store_path(store: KeeperStateStore, key: KeeperKey) -> str:
    return store.path(key)
