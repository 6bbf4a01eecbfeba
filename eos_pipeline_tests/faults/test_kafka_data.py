"""Awkward but legal Kafka data: transactions, markers, compaction, retention, recreated topics.

Positions are about offsets, not record counts: every case here leaves holes in the offsets, or
moves the log under the pipeline's feet, and the sink must neither lose nor invent a record.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from eos_pipeline.adapters.kafka import (
    KafkaReadError,
    admin_client,
    create_topic,
    end_offsets,
    start_offsets,
    topic_id,
)
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.faults.harness import FaultRig, Produced

pytestmark = pytest.mark.integration


def _txn_producer(rig: FaultRig) -> Producer:
    producer = Producer(
        rig.kafka.config(**{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}", "acks": "all"})
    )
    producer.init_transactions(30)
    return producer


def _txn(rig: FaultRig, producer: Producer, partition: int, n: int, *, commit: bool | None):
    """Write ``n`` records in a transaction; ``commit=None`` leaves it open."""
    producer.begin_transaction()
    for i in range(n):
        producer.produce(
            rig.topic, json.dumps({"id": i, "name": "t"}).encode(), partition=partition
        )
    producer.flush(30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)


def _committed_offsets(rig: FaultRig, partition: int) -> list[int]:
    """What read_committed sees; recorded as the produced truth for the exactly-once check."""
    offsets = rig.kafka_offsets(partition)
    rig.produced.offsets[partition] = offsets
    return offsets


def test_aborted_transactions_open_transaction_and_marker_only_ranges(
    inproc_rig: FaultRig,
) -> None:
    rig = inproc_rig
    producer = _txn_producer(rig)
    tp = TopicPartition(rig.topic, 0)
    for n, commit in [(3, True), (4, False), (2, True), (5, False), (5, False), (1, True)]:
        _txn(rig, producer, 0, n, commit=commit)
    _txn(rig, producer, 1, 3, commit=False)  # partition 1: aborted records and a marker only
    # The coordinator writes the markers after commit/abort returns: wait for the LSOs.
    deadline = time.monotonic() + 30
    while ((ends := end_offsets(rig.kafka, rig.topic))[0], ends[1]) != (26, 4):
        assert time.monotonic() < deadline, f"last stable offsets stuck at {ends}"
        time.sleep(0.1)
    with rig.keeper() as store:
        sync = rig.sync(store, max_records=3)  # batch edges fall on markers and aborted records
        assert sync.run(tp).end == 26
        assert sync.run(TopicPartition(rig.topic, 1)).end == 4
        # An open transaction holds the last stable offset back: the run stops before it.
        other = _txn_producer(rig)
        _txn(rig, other, 0, 4, commit=None)
        assert end_offsets(rig.kafka, rig.topic)[0] == 26
        assert sync.run(tp).end == 26
        other.commit_transaction(30)
        assert sync.run(tp).end == end_offsets(rig.kafka, rig.topic)[0] == 31
    assert len(_committed_offsets(rig, 0)) == 3 + 2 + 1 + 4
    assert _committed_offsets(rig, 1) == []
    assert rig.assert_exactly_once() == 10


def test_compacted_topic_with_offset_gaps(inproc_rig: FaultRig) -> None:
    rig = FaultRig(
        inproc_rig.kafka,
        inproc_rig.zookeeper,
        inproc_rig.workdir,
        partitions=1,
        sink=inproc_rig.sink,
        topic_config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.001",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
        },
    )
    for round_ in range(3):  # rewrite the same 10 keys: compaction keeps the last of each
        rig.produce_raw(
            0,
            [
                (f"k{k}".encode(), json.dumps({"id": k, "name": f"r{round_}"}).encode(), None)
                for k in range(10)
            ],
        )
        time.sleep(0.2)  # let the segment roll so the cleaner may take the older ones
    deadline = time.monotonic() + 90
    # Wait for holes, not for a count: each tick below adds a record (and rolls a segment so
    # the cleaner can take the older ones), so the count alone says nothing.
    while len(present := _committed_offsets(rig, 0)) == present[-1] + 1:
        assert time.monotonic() < deadline, "the log cleaner never compacted the topic"
        rig.produce_raw(0, [(b"tick", b'{"id": -1, "name": "tick"}', None)])
        time.sleep(1)
    # Stop the cleaner before the run, so the log the proof compares against holds still.
    admin = admin_client(rig.kafka)
    resource = ConfigResource(
        "topic",
        rig.topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    while True:  # a cleaning pass already under way may still finish
        present = _committed_offsets(rig, 0)
        time.sleep(2)
        if rig.kafka_offsets(0) == present:
            break
        assert time.monotonic() < deadline, "the log kept changing after compaction was stopped"
    with rig.keeper() as store:
        report = rig.sync(store, max_records=4).run(TopicPartition(rig.topic, 0))
    assert report.end == end_offsets(rig.kafka, rig.topic)[0]
    assert rig.assert_exactly_once() == len(_committed_offsets(rig, 0))


def test_retention_deleting_unread_offsets_is_a_clear_error(inproc_rig: FaultRig) -> None:
    rig = inproc_rig
    rig.produce(30, partitions=[0])
    tp = TopicPartition(rig.topic, 0)
    key = KeeperKey.of(rig.pipeline, "clickhouse", tp)
    with rig.keeper() as store:
        rig.sync(store).run(tp, until=10)
        before = store.read(key)
        # Retention (here forced with DeleteRecords) removes [0, 20) while we stand at 10.
        admin = admin_client(rig.kafka)  # keep a reference: the futures die with their client
        futures = admin.delete_records([KafkaTopicPartition(rig.topic, 0, 20)])
        for f in futures.values():
            f.result(30)
        assert start_offsets(rig.kafka, rig.topic)[0] == 20
        with pytest.raises(KafkaReadError, match=r"no longer in the log.*refusing to skip"):
            rig.sync(store).run(tp)
        after = store.read(key)
    assert (after.record.phase, after.record.range_end) == (before.record.phase, 10)
    assert rig.table_offsets()[0] == {o: 1 for o in range(10)}


@pytest.mark.parametrize("new_records", [5, 35], ids=["new-log-shorter", "new-log-longer"])
def test_topic_deleted_and_recreated_is_detected(inproc_rig: FaultRig, new_records: int) -> None:
    """Refused by Kafka's topic id, even once the new log has grown past the stored position."""
    rig = inproc_rig
    rig.produce(20, partitions=[0])
    tp = TopicPartition(rig.topic, 0)
    with rig.keeper() as store:
        assert rig.sync(store).run(tp).end == 20
        key = KeeperKey.of(rig.pipeline, "clickhouse", tp)
        old_id = store.read(key).record.topic_id
        assert old_id == topic_id(rig.kafka, rig.topic)
        admin = admin_client(rig.kafka)
        for f in admin.delete_topics([rig.topic], operation_timeout=30).values():
            f.result(30)
        deadline = time.monotonic() + 30
        while True:  # deletion is asynchronous on the broker
            try:
                create_topic(rig.kafka, rig.topic, rig.partitions)
                if end_offsets(rig.kafka, rig.topic)[0] == 0:
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, "topic was not recreated"
            time.sleep(0.5)
        rig.produced = Produced()
        rig.produce(new_records, partitions=[0])
        new_id = topic_id(rig.kafka, rig.topic)
        assert new_id != old_id
        with pytest.raises(
            KafkaReadError, match=rf"topic id {re.escape(old_id)}.* now has id {re.escape(new_id)}"
        ):
            rig.sync(store).run(tp)
        record = store.read(key).record
    assert (record.phase, record.range_end, record.topic_id) == ("AFTER", 20, old_id)
    # Nothing of the new log reached the table: still exactly the first log's 20 offsets.
    assert rig.table_offsets()[0] == {o: 1 for o in range(20)}
