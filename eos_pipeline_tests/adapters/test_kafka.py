"""The Kafka adapter against the real local broker."""

from __future__ import annotations

import socket
import time

import pytest

from eos_pipeline.adapters.kafka import (
    KafkaReadError,
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    partition_count,
    produce_all,
    read_range,
)
from eos_pipeline.core.offsets import OffsetRange, TopicPartition

pytestmark = pytest.mark.integration


def _produce(settings: KafkaSettings, topic: str, partitions: int, per_partition: int) -> dict:
    producer = idempotent_producer(settings)
    records = [
        (p, f"k{p}".encode(), f'{{"p": {p}, "i": {i}}}'.encode())
        for i in range(per_partition)
        for p in range(partitions)
    ]
    delivered = produce_all(producer, topic, records)
    by_partition: dict[int, list[int]] = {}
    for partition, offset in delivered:
        by_partition.setdefault(partition, []).append(offset)
    return by_partition


def test_topic_with_partitions_is_read_back_by_offset_range(
    kafka_settings: KafkaSettings, topic_name: str
) -> None:
    create_topic(kafka_settings, topic_name, partitions=4)
    assert partition_count(kafka_settings, topic_name) == 4
    delivered = _produce(kafka_settings, topic_name, partitions=4, per_partition=50)

    ends = end_offsets(kafka_settings, topic_name)
    assert ends == {p: 50 for p in range(4)}
    # The idempotent producer delivered each record once, at consecutive offsets.
    assert {p: sorted(offs) for p, offs in delivered.items()} == {
        p: list(range(50)) for p in range(4)
    }

    tp = TopicPartition(topic_name, 2)
    batch = read_range(kafka_settings, tp, OffsetRange(10, 30))
    assert batch.offsets == list(range(10, 30))
    assert batch.values == [f'{{"p": 2, "i": {i}}}'.encode() for i in range(10, 30)]
    assert batch.range == OffsetRange(10, 30)

    again = read_range(kafka_settings, tp, OffsetRange(10, 30))
    assert again.offsets == batch.offsets and again.values == batch.values


def test_read_range_with_byte_limit_cuts_at_a_record_boundary_deterministically(
    kafka_settings: KafkaSettings, topic_name: str
) -> None:
    create_topic(kafka_settings, topic_name, partitions=1)
    produce_all(
        idempotent_producer(kafka_settings),
        topic_name,
        [(0, None, b"x" * 100) for _ in range(20)],
    )
    tp = TopicPartition(topic_name, 0)
    first = read_range(kafka_settings, tp, OffsetRange(0, 20), max_bytes=750)
    # 7 records of 100 bytes fit under 750; the eighth would not.
    assert first.offsets == list(range(7))
    assert first.range == OffsetRange(0, 7)
    assert read_range(kafka_settings, tp, OffsetRange(0, 20), max_bytes=750).range == first.range


def test_empty_range_reads_nothing(kafka_settings: KafkaSettings, topic_name: str) -> None:
    create_topic(kafka_settings, topic_name, partitions=1)
    batch = read_range(kafka_settings, TopicPartition(topic_name, 0), OffsetRange(0, 0))
    assert len(batch) == 0 and batch.range == OffsetRange(0, 0)


def test_unknown_topic_names_the_topic(kafka_settings: KafkaSettings) -> None:
    with pytest.raises(Exception, match="no-such-topic"):
        partition_count(kafka_settings, "no-such-topic")


def test_creating_a_topic_on_a_cluster_that_never_answers_names_it_after_the_tries() -> None:
    """A hung broker (its port accepts, nothing answers): three tries, then an error naming the
    cluster, not a bare TimeoutError."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen()
        address = f"127.0.0.1:{hung.getsockname()[1]}"
        began = time.monotonic()
        with pytest.raises(
            KafkaReadError, match=rf"creating topic 't' on {address}: no answer in 3"
        ):
            create_topic(KafkaSettings(bootstrap_servers=address), "t", 1, timeout=0.5)
        assert time.monotonic() - began >= 3 * 0.5


def test_creating_an_existing_topic_again_is_accepted(
    kafka_settings: KafkaSettings, topic_name: str
) -> None:
    create_topic(kafka_settings, topic_name, partitions=2)
    create_topic(kafka_settings, topic_name, partitions=2)
    assert partition_count(kafka_settings, topic_name) == 2
