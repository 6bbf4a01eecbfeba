"""Infrastructure faults: ZooKeeper down or its session expired, Kafka restarted, ClickHouse
refusing inserts. Each ends in a run that rides it out, or a run that fails saying what broke;
never a moved position without the data. Then a retry converges and the data is exact.

ZooKeeper and Kafka are stopped and started for real, so these tests run on a stack of their own
on free ports (``own_stack``, shared with the Hudi broker-restart test; the session stack other
tests use is never touched).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from clickhouse_connect.driver.client import Client
from kazoo.client import KazooClient

from eos_pipeline.adapters.clickhouse import ClickHouseSink, ClickHouseSinkError
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore, KeeperUnavailableError
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.faults.harness import FaultRig
from eos_pipeline_tests.support.own_stack import OwnStack

pytestmark = pytest.mark.integration


@pytest.fixture
def own_rig(own_stack: OwnStack, chdb_client: Client, tmp_path: Path) -> FaultRig:
    return FaultRig(
        KafkaSettings(own_stack.config.kafka_bootstrap),
        own_stack.config.zookeeper_hosts,
        tmp_path,
        partitions=1,
        sink=ClickHouseSink(chdb_client),
    )


def _store(rig: FaultRig, timeout: float = 30.0) -> KeeperStateStore:
    return KeeperStateStore(
        KeeperSettings(
            hosts=rig.zookeeper,
            root=rig.keeper_root,
            session_timeout_s=4.0,
            operation_timeout_s=timeout,
        )
    )


def _once(step: str, action: Callable[[], None], nth: int = 1) -> Callable[[str], None]:
    seen = {"n": 0}

    def hook(at: str) -> None:
        if at == step:
            seen["n"] += 1
            if seen["n"] == nth:
                action()

    return hook


def _phase(rig: FaultRig, store: KeeperStateStore) -> tuple[str, int, int]:
    r = store.read(KeeperKey.of(rig.pipeline, "clickhouse", TopicPartition(rig.topic, 0))).record
    return (r.phase, r.range_start, r.range_end)


def test_zookeeper_outage_mid_run_is_ridden_out(own_stack: OwnStack, own_rig: FaultRig) -> None:
    """ZooKeeper killed for 6 s between an insert and its AFTER write: the write waits for the
    connection (ZooKeeper keeps sessions across its own restart) and the run completes."""
    rig = own_rig
    rig.produce(30, bad_every=8)
    tp = TopicPartition(rig.topic, 0)
    restarts: list[threading.Thread] = []

    def outage() -> None:
        own_stack.stop("zookeeper")
        restarts.append(own_stack.restart_later("zookeeper", 6.0))

    with _store(rig) as store:
        sync = rig.sync(store, max_records=10, fault=_once("after_insert", outage, nth=2))
        report = sync.run(tp)
        assert report.end == 30
        assert _phase(rig, store) == ("AFTER", 20, 30)
    restarts[0].join()
    assert rig.assert_exactly_once() == 30 - len(rig.produced.bad)


def test_keeper_session_expired_mid_run(
    own_rig: FaultRig, caplog: pytest.LogCaptureFixture
) -> None:
    """The session is expired by the server between an insert and its AFTER write (the classic
    trick: a second client takes the session id and closes it). kazoo opens a new session; the
    znodes are persistent and the CAS still names the right version, so the run completes."""
    rig = own_rig
    rig.produce(30, bad_every=8)
    tp = TopicPartition(rig.topic, 0)
    with _store(rig) as store:

        def expire() -> None:
            session_id, password = store.client.client_id
            thief = KazooClient(hosts=rig.zookeeper, client_id=(session_id, password))
            thief.start(timeout=10)
            thief.stop()
            thief.close()

        report = rig.sync(store, max_records=10, fault=_once("after_insert", expire, 2)).run(tp)
        assert report.end == 30 and _phase(rig, store) == ("AFTER", 20, 30)
    assert "session at" in caplog.text and "lost" in caplog.text
    assert rig.assert_exactly_once() == 30 - len(rig.produced.bad)


def test_zookeeper_down_longer_than_the_timeout_fails_clearly_then_retry_converges(
    own_stack: OwnStack, own_rig: FaultRig
) -> None:
    rig = own_rig
    rig.produce(30, bad_every=8)
    tp = TopicPartition(rig.topic, 0)
    try:
        with _store(rig, timeout=3.0) as store:
            sync = rig.sync(
                store,
                max_records=10,
                fault=_once("after_insert", lambda: own_stack.stop("zookeeper"), nth=2),
            )
            with pytest.raises(KeeperUnavailableError, match=r"ZooKeeper at .* did not answer|no"):
                sync.run(tp)
    finally:
        own_stack.start("zookeeper")
    with _store(rig) as store:
        # The insert landed, AFTER did not: the keeper says BEFORE [10, 20) and a retry re-sends
        # that block under the same token, which ClickHouse drops.
        assert _phase(rig, store) == ("BEFORE", 10, 20)
        retry = rig.sync(store, max_records=10).run(tp)
        assert retry.cases[0] == "SAME" and retry.end == 30
    assert rig.assert_exactly_once() == 30 - len(rig.produced.bad)


def test_kafka_restarted_between_runs_and_during_a_read(
    own_stack: OwnStack, own_rig: FaultRig
) -> None:
    rig = own_rig
    rig.produce(20, bad_every=6)
    tp = TopicPartition(rig.topic, 0)
    with _store(rig) as store:
        assert rig.sync(store, max_records=10).run(tp).end == 20
        own_stack.stop("kafka")
        own_stack.start("kafka")  # between runs
        rig.produce(20, bad_every=6)
        restarts: list[threading.Thread] = []

        def crash_broker() -> None:  # right before the next batch's read
            own_stack.stop("kafka")
            restarts.append(own_stack.restart_later("kafka", 2.0))

        sync = rig.sync(store, max_records=10, fault=_once("after_keeper_after", crash_broker))
        assert sync.run(tp).end == 40
        restarts[0].join()
    assert rig.assert_exactly_once() == 40 - len(rig.produced.bad)


def test_clickhouse_table_gone_mid_run_fails_clearly_and_never_moves_the_position(
    own_rig: FaultRig, chdb_client: Client
) -> None:
    """The table is detached between BEFORE and the insert (as if dropped or made unavailable):
    the insert fails naming the table, the keeper stays BEFORE; once the table is back the retry
    converges with no loss and no duplicate."""
    rig = own_rig
    rig.produce(30, bad_every=7)
    tp = TopicPartition(rig.topic, 0)
    ref = f"`{rig.database}`.`{rig.table}`"
    with _store(rig) as store:
        sync = rig.sync(
            store,
            max_records=10,
            fault=_once(
                "after_keeper_before", lambda: chdb_client.command(f"DETACH TABLE {ref}"), 2
            ),
        )
        with pytest.raises(ClickHouseSinkError, match=r"does not exist") as err:
            sync.run(tp)
        assert rig.table in str(err.value)
        assert _phase(rig, store) == ("BEFORE", 10, 20)
        chdb_client.command(f"ATTACH TABLE {ref}")
        retry = rig.sync(store, max_records=10).run(tp)
        assert retry.cases[0] == "SAME" and retry.end == 30
    assert rig.assert_exactly_once() == 30 - len(rig.produced.bad)
