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


def _count_admin_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts DescribeTopics and ListOffsets calls made through the shared admin client."""
    from confluent_kafka.admin import AdminClient

    counts = {"describe_topics": 0, "list_offsets": 0}
    for name in counts:
        original = getattr(AdminClient, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(AdminClient, name, counted)
    return counts


def test_offsets_of_many_topics_take_one_request_each_and_name_a_missing_topic(
    kafka_settings: KafkaSettings, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eos_pipeline.adapters.kafka import end_offsets_of
    from eos_pipeline_tests.support.kafka import start_offsets_of

    other = f"{topic_name}_b"
    create_topic(kafka_settings, topic_name, partitions=3)
    create_topic(kafka_settings, other, partitions=2)
    _produce(kafka_settings, topic_name, partitions=3, per_partition=4)
    _produce(kafka_settings, other, partitions=2, per_partition=2)
    counts = _count_admin_calls(monkeypatch)
    ends = end_offsets_of(kafka_settings, [topic_name, other, f"{topic_name}_missing"])
    assert ends[topic_name] == {0: 4, 1: 4, 2: 4} and ends[other] == {0: 2, 1: 2}
    assert isinstance(ends[f"{topic_name}_missing"], KafkaReadError)
    assert counts == {"describe_topics": 1, "list_offsets": 1}
    assert start_offsets_of(kafka_settings, [topic_name, other]) == {
        topic_name: {0: 0, 1: 0, 2: 0},
        other: {0: 0, 1: 0},
    }


def test_topic_facts_ask_once_per_round_for_every_named_partition_and_again_when_old(
    kafka_settings: KafkaSettings, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eos_pipeline.adapters.kafka import TopicFacts

    other = f"{topic_name}_b"
    create_topic(kafka_settings, topic_name, partitions=4)
    create_topic(kafka_settings, other, partitions=2)
    _produce(kafka_settings, topic_name, partitions=4, per_partition=3)
    now = [0.0]
    facts = TopicFacts(kafka_settings, max_age_s=5.0, clock=lambda: now[0])
    named = [TopicPartition(topic_name, p) for p in range(4)] + [TopicPartition(other, 0)]
    facts.want(named)
    counts = _count_admin_calls(monkeypatch)
    assert [facts.end(tp) for tp in named] == [3, 3, 3, 3, 0]
    assert [facts.start(tp) for tp in named] == [0] * 5
    assert facts.topic_id(topic_name) != facts.topic_id(other)
    # one description of both topics, one ListOffsets per kind, for all five partitions
    assert counts == {"describe_topics": 1, "list_offsets": 2}
    assert facts.end(TopicPartition(topic_name, 9)) is None  # no such partition
    _produce(kafka_settings, topic_name, partitions=4, per_partition=1)
    assert facts.end(TopicPartition(topic_name, 0)) == 3  # within the round: the same answer
    assert facts.end(TopicPartition(topic_name, 0), fresh=True) == 4  # asked again
    now[0] = 6.0  # the round is over: the next lookup asks again, for all of them
    counts.update(describe_topics=0, list_offsets=0)
    assert facts.end(TopicPartition(topic_name, 1)) == 4
    assert facts.end(TopicPartition(other, 0)) == 0
    assert counts == {"describe_topics": 1, "list_offsets": 1}
    # without a round (max_age_s 0) every lookup asks, for its one partition
    single = TopicFacts(kafka_settings)
    assert single.end(TopicPartition(topic_name, 2)) == 4
    assert single.end(TopicPartition(topic_name, 2)) == 4
    assert counts == {"describe_topics": 3, "list_offsets": 3}
