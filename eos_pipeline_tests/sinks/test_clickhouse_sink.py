"""The exactly-once ClickHouse loop on the real stack: Kafka, ZooKeeper and the chDB engine.

Every claim is checked on the data: the source offsets stored in the table, counted per offset,
against the offsets read back from Kafka (read_committed) minus the ones sent to the DLQ.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from clickhouse_connect.driver.client import Client
from confluent_kafka import Producer

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    end_offsets,
    idempotent_producer,
    produce_all,
    read_range,
)
from eos_pipeline.core.dedup import OffsetRegressionError
from eos_pipeline.core.keeper import FencedError, KeeperKey
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.sinks.clickhouse import (
    ClickHousePartitionSync,
    ClickHouseTableSpec,
)
from eos_pipeline_tests.sinks.clickhouse_stage import (
    SCHEMA,
    ClickHouseStage,
    InjectedCrash,
    clickhouse_stage,
)
from eos_pipeline_tests.support.dead_letters import read_dead_letters
from eos_pipeline_tests.support.sink_runs import run_range

pytestmark = pytest.mark.integration


@dataclass
class Rig(ClickHouseStage):
    produced: dict[int, list[int]] = field(default_factory=dict)

    @property
    def dlq_topic(self) -> str:
        return f"{self.topic}.dlq"

    def spec(self, **kw: object) -> ClickHouseTableSpec:
        return ClickHouseTableSpec(
            pipeline=self.pipeline, database=self.database, table="events", schema=SCHEMA, **kw
        )

    def sync(self, fault: Callable[[str], None] = lambda _: None, **kw: object):
        return ClickHousePartitionSync(
            self.spec(**kw),
            self.kafka,
            self.store,
            self.sink,
            DeadLetterWriter(self.kafka, self.dlq_topic, self.pipeline),
            fault=fault,
        )

    def kafka_offsets(self, partition: int) -> list[int]:
        end = end_offsets(self.kafka, self.topic)[partition]
        tp = TopicPartition(self.topic, partition)
        return read_range(self.kafka, tp, OffsetRange(0, end)).offsets

    def dlq_offsets(self, partition: int) -> list[int]:
        return [
            int(h["eos.source.offset"])
            for h in read_dead_letters(self.kafka, self.dlq_topic)
            if h["eos.source.topic"] == self.topic and int(h["eos.source.partition"]) == partition
        ]

    def assert_exactly_once(self, partition: int) -> None:
        in_table = self.table_offsets(partition)
        duplicates = {o: n for o, n in in_table.items() if n != 1}
        assert not duplicates, f"offsets stored more than once: {duplicates}"
        dead = set(self.dlq_offsets(partition))
        expected = set(self.kafka_offsets(partition)) - dead
        assert set(in_table) == expected, (
            f"missing {sorted(expected - set(in_table))[:10]}, "
            f"unexpected {sorted(set(in_table) - expected)[:10]}"
        )


@pytest.fixture
def rig(
    kafka_settings: KafkaSettings, zookeeper_hosts: str, chdb_client: Client, topic_name: str
) -> Iterator[Rig]:
    with clickhouse_stage(
        Rig, kafka_settings, zookeeper_hosts, chdb_client, topic_name, partitions=3
    ) as rig:
        yield rig


def produce_events(rig: Rig, per_partition: int, partitions: int = 3, bad_every: int = 0) -> None:
    producer = idempotent_producer(rig.kafka)
    records = []
    for i in range(per_partition):
        for p in range(partitions):
            if bad_every and i % bad_every == bad_every - 1:
                value = b"{not json"
            else:
                value = json.dumps({"id": i, "name": f"e{p}-{i}"}).encode()
            records.append((p, None, value))
    for partition, offset in produce_all(producer, rig.topic, records):
        rig.produced.setdefault(partition, []).append(offset)


def test_catch_up_writes_every_offset_once_and_dead_letters_bad_records(rig: Rig) -> None:
    produce_events(rig, per_partition=40, bad_every=10)
    sync = rig.sync(max_records=15)
    for p in range(3):
        report = sync.run(TopicPartition(rig.topic, p))
        assert report.end == 40 and report.dead_letters == 4
        assert report.cases[0] == "FIRST" and set(report.cases[1:]) == {"NEW"}
    for p in range(3):
        rig.assert_exactly_once(p)
        assert sorted(rig.dlq_offsets(p)) == [9, 19, 29, 39]
    # A second run finds nothing to do and changes nothing.
    again = sync.run(TopicPartition(rig.topic, 0))
    assert again.batches == [] and again.end == 40
    rig.assert_exactly_once(0)


def test_replaying_the_same_range_three_times_leaves_each_offset_once(rig: Rig) -> None:
    produce_events(rig, per_partition=25)
    tp = TopicPartition(rig.topic, 1)
    sync = rig.sync()
    cases = [run_range(sync, tp, OffsetRange(0, 25)).case for _ in range(3)]
    assert cases == ["FIRST", "SAME", "SAME"]
    assert rig.table_offsets(1) == {o: 1 for o in range(25)}
    rig.assert_exactly_once(1)


def test_crash_between_insert_and_after_then_retry_leaves_each_offset_once(rig: Rig) -> None:
    produce_events(rig, per_partition=30)
    tp = TopicPartition(rig.topic, 0)

    def crash_after_insert(step: str) -> None:
        if step == "after_insert":
            raise InjectedCrash(step)

    with pytest.raises(InjectedCrash):
        rig.sync(fault=crash_after_insert).run(tp)
    # The rows landed but the keeper still says BEFORE: the retry must not insert them again.
    assert rig.table_offsets(0) == {o: 1 for o in range(30)}
    record = rig.store.read(KeeperKey.of(rig.pipeline, "clickhouse", tp)).record
    assert (record.phase, record.range_start, record.range_end) == ("BEFORE", 0, 30)

    retry = rig.sync().run(tp)
    assert retry.cases == ["SAME"] and retry.rows_sent == 30  # re-sent, dropped by its token
    rig.assert_exactly_once(0)
    record = rig.store.read(KeeperKey.of(rig.pipeline, "clickhouse", tp)).record
    assert (record.phase, record.range_end) == ("AFTER", 30)


def test_crash_at_every_step_boundary_then_retry_converges(rig: Rig) -> None:
    produce_events(rig, per_partition=24)
    tp = TopicPartition(rig.topic, 2)
    boundaries = [
        "before_keeper_before",
        "after_keeper_before",
        "after_insert",
        "after_keeper_after",
    ]
    for boundary in boundaries:
        hits = {"n": 0}

        def crash(step: str, boundary: str = boundary, hits: dict = hits) -> None:
            if step == boundary:
                hits["n"] += 1
                if hits["n"] == 2:  # let one step through, crash on the second
                    raise InjectedCrash(step)

        with pytest.raises(InjectedCrash):
            rig.sync(fault=crash, max_records=4).run(
                tp, until=min(24, 8 * (boundaries.index(boundary) + 1))
            )
    rig.sync(max_records=4).run(tp)
    rig.assert_exactly_once(2)


def test_older_epoch_writer_is_fenced_and_data_stays_exact(rig: Rig) -> None:
    produce_events(rig, per_partition=20)
    tp = TopicPartition(rig.topic, 0)
    newer = rig.sync()

    def take_over_midway(step: str) -> None:
        if step == "after_keeper_before":
            newer.run(tp)  # a second writer takes the partition while the first is mid-batch

    zombie = rig.sync(fault=take_over_midway)
    with pytest.raises(FencedError, match=r"fenced"):
        zombie.run(tp)
    rig.assert_exactly_once(0)
    record = rig.store.read(KeeperKey.of(rig.pipeline, "clickhouse", tp)).record
    assert record.epoch == 2 and (record.phase, record.range_end) == ("AFTER", 20)


def test_batch_entirely_below_stored_start_fails_and_writes_nothing(rig: Rig) -> None:
    produce_events(rig, per_partition=30)
    tp = TopicPartition(rig.topic, 1)
    rig.sync(max_records=10).run(tp)  # stored: AFTER [20, 30)
    key = KeeperKey.of(rig.pipeline, "clickhouse", tp)
    before = rig.store.read(key)
    rows_before = rig.table_offsets(1)

    with pytest.raises(OffsetRegressionError) as err:
        run_range(rig.sync(), tp, OffsetRange(0, 10))
    message = str(err.value)
    assert str(tp) in message and "[0, 10)" in message and "[20, 30)" in message
    after = rig.store.read(key)
    assert after.version == before.version and after.record == before.record
    assert rig.table_offsets(1) == rows_before


def _transactional_producer(rig: Rig) -> Producer:
    producer = Producer(
        rig.kafka.config(**{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}", "acks": "all"})
    )
    producer.init_transactions(30)
    return producer


def _txn(producer: Producer, topic: str, partition: int, ids: range, commit: bool) -> None:
    producer.begin_transaction()
    for i in ids:
        producer.produce(
            topic, json.dumps({"id": i, "name": f"t{i}"}).encode(), partition=partition
        )
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def test_aborted_transactions_are_filtered_and_marker_only_ranges_advance(rig: Rig) -> None:
    producer = _transactional_producer(rig)
    # partition 0: committed 0-4, marker 5, aborted 6-10, marker 11, committed 12-16, marker 17
    _txn(producer, rig.topic, 0, range(0, 5), commit=True)
    _txn(producer, rig.topic, 0, range(5, 10), commit=False)
    _txn(producer, rig.topic, 0, range(10, 15), commit=True)
    # partition 1: only an aborted transaction: records 0-4 aborted, marker 5
    _txn(producer, rig.topic, 1, range(100, 105), commit=False)

    # A finished transaction's markers are written by the coordinator after the producer's
    # commit/abort returns, so the last stable offsets catch up a moment later.
    deadline = time.monotonic() + 30
    while ((ends := end_offsets(rig.kafka, rig.topic))[0], ends[1]) != (18, 6):
        assert time.monotonic() < deadline, f"last stable offsets stuck at {ends}"
        time.sleep(0.1)

    sync = rig.sync()
    r0 = sync.run(TopicPartition(rig.topic, 0))
    r1 = sync.run(TopicPartition(rig.topic, 1))
    assert rig.table_offsets(0) == {o: 1 for o in [*range(0, 5), *range(12, 17)]}
    rig.assert_exactly_once(0)
    # Nothing to insert on partition 1, yet its position moved past the markers.
    assert r1.rows_sent == 0 and r1.end == 6 and rig.table_offsets(1) == {}
    assert r0.end == 18
    record = rig.store.read(KeeperKey.of(rig.pipeline, "clickhouse", TopicPartition(rig.topic, 1)))
    assert (record.record.phase, record.record.range_end) == ("AFTER", 6)


def test_reset_latest_pins_the_start_then_reads_only_newer_records(rig: Rig) -> None:
    produce_events(rig, per_partition=5, partitions=1)
    tp = TopicPartition(rig.topic, 0)
    sync = rig.sync(reset="latest")

    first = sync.run(tp)

    assert first.batches == [] and first.end == 5
    produce_events(rig, per_partition=7, partitions=1)
    second = sync.run(tp)
    assert (second.start, second.end) == (5, 12)
    assert rig.table_offsets(0) == {o: 1 for o in range(5, 12)}


@pytest.mark.parametrize(("first", "second"), [("native", "arrow"), ("arrow", "native")])
def test_a_step_one_json_parser_wrote_is_dropped_when_the_other_retries_it(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, first: str, second: str
) -> None:
    """ClickHouse's own parser and Arrow write the same rows under the same token: a crash after
    one inserted, retried by the other, leaves every offset once with the first attempt's rows."""
    produce_events(rig, per_partition=30)
    tp = TopicPartition(rig.topic, 0)
    native_calls: list[str] = []
    real = rig.sink.insert_json

    def counted(*args: object, **kwargs: object) -> int:
        native_calls.append(str(kwargs["dedup_token"]))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rig.sink, "insert_json", counted)

    def crash_after_insert(step: str) -> None:
        if step == "after_insert":
            raise InjectedCrash(step)

    with pytest.raises(InjectedCrash):
        rig.sync(fault=crash_after_insert, json_parser=first).run(tp)
    query = f"SELECT * FROM `{rig.database}`.`events` WHERE _partition = 0 ORDER BY _offset"
    written = rig.sink.client.query(query).result_rows
    assert [row[2] for row in written] == list(range(30))
    retry = rig.sync(json_parser=second).run(tp)
    assert retry.cases == ["SAME"] and retry.rows_sent == 30
    rig.assert_exactly_once(0)
    assert rig.sink.client.query(query).result_rows == written
    assert len(native_calls) == 1  # ClickHouse parsed exactly one of the two attempts


def test_batches_keep_their_order_of_steps(rig: Rig) -> None:
    produce_events(rig, per_partition=40)
    tp = TopicPartition(rig.topic, 0)
    steps: list[str] = []
    report = rig.sync(fault=steps.append, max_records=15).run(tp)
    assert report.end == 40
    order = ["before_keeper_before", "after_keeper_before", "after_insert", "after_keeper_after"]
    assert steps == order * 3
    rig.assert_exactly_once(0)
    assert rig.sync(max_records=15).run(TopicPartition(rig.topic, 1)).end == 40
    rig.assert_exactly_once(1)


def test_a_run_of_several_partitions_on_one_consumer_decides_each_from_the_keeper(
    rig: Rig,
) -> None:
    produce_events(rig, per_partition=40)
    tps = [TopicPartition(rig.topic, p) for p in range(3)]
    sync = rig.sync(max_records=15)
    # Another writer takes partition 1 to offset 20 while partition 0's last batch is inserted.
    other = rig.sync(max_records=15)

    inserts: list[str] = []

    def interfere(step: str) -> None:
        if step == "after_insert":
            inserts.append(step)
            if len(inserts) == 3:  # partition 0's last batch
                other.run(tps[1], until=20)

    sync.fault = interfere
    with sync.reading():
        reports = [sync.run(tp) for tp in tps]
    assert [r.end for r in reports] == [40, 40, 40]
    assert reports[1].start == 20  # the run decided from the keeper
    for p in range(3):
        rig.assert_exactly_once(p)
