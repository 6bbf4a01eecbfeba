"""The dead-letter topic: records that cannot be stored, with where they came from and why.

A letter keeps the original key and value, with headers naming source topic, partition,
offset, pipeline and error; the producer is idempotent and a re-sent letter has the same
source coordinates, which readers de-duplicate on. A replay also writes *markers* here (no key
or value; headers naming a sink and range) that withdraw earlier letters of the range for that
sink (:func:`eos_pipeline.core.replay.dead_offsets`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from eos_pipeline.adapters.kafka import (
    KafkaReadError,
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    range_consumer,
    read_range,
    send_records,
)
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.replay import dead_offsets, marker_headers

HEADER_PREFIX = "eos."
#: Largest key + value a dead letter carries. Kafka refuses records above ``message.max.bytes``
#: (1 MB by default, producer and broker), and a source topic may allow larger ones: such a
#: record, if bad, would otherwise fail the send on every retry and wedge its partition. Above
#: this size the letter goes out without the value (header ``eos.value.omitted.bytes`` gives its
#: size; the source coordinates still point at the original in the source topic).
DLQ_MAX_VALUE_BYTES = 900_000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    offset: int
    key: bytes | None
    value: bytes | None
    error_class: str
    message: str


class DeadLetterWriter:
    """Sends dead letters of one pipeline to its dead-letter topic."""

    def __init__(
        self, settings: KafkaSettings, topic: str, pipeline: str, *, sink: str | None = None
    ) -> None:
        self.settings = settings
        self.topic = topic
        self.pipeline = pipeline
        #: Named in an ``eos.sink`` header when set (a replay's letters count for its sink only).
        self.sink = sink
        self._producer: Producer | None = None

    def ensure_topic(self, partitions: int = 1) -> None:
        """Create the topic if missing, with the broker's default replication factor (a replicated
        cluster's ``min.insync.replicas`` refuses a single copy). A principal that may write but not
        create is refused even for an existing topic (Kafka authorizes CREATE first): taken as
        "exists"; a topic really missing fails the send, named there.
        """
        try:
            create_topic(self.settings, self.topic, partitions, replication_factor=-1)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise

    def send(
        self, source: TopicPartition, letters: Sequence[DeadLetter], timeout: float = 60.0
    ) -> int:
        """Write ``letters`` and wait until every one is acknowledged; return how many."""
        records = []
        for letter in letters:
            key, value, omitted = _fit(letter.key, letter.value)
            headers = [
                (f"{HEADER_PREFIX}pipeline", self.pipeline.encode()),
                (f"{HEADER_PREFIX}source.topic", source.topic.encode()),
                (f"{HEADER_PREFIX}source.partition", str(source.partition).encode()),
                (f"{HEADER_PREFIX}source.offset", str(letter.offset).encode()),
                (f"{HEADER_PREFIX}error.class", letter.error_class.encode()),
                (f"{HEADER_PREFIX}error.message", letter.message[:1000].encode()),
                *omitted,
            ]
            if self.sink is not None:
                headers.append((f"{HEADER_PREFIX}sink", self.sink.encode()))
            records.append({"key": key, "value": value, "headers": headers})
        remaining, failures = self._produce(records, timeout)
        if remaining or failures:
            hint = (
                f"; the Kafka principal needs WRITE on topic {self.topic!r} (an ACL), and the "
                "topic must exist"
                if any("authoriz" in f.lower() or "unknown topic" in f.lower() for f in failures)
                else ""
            )
            raise RuntimeError(
                f"dead-letter topic {self.topic!r}: {remaining} records unacknowledged, "
                f"errors: {failures[:3]}; the partition's position was not moved{hint}"
            )
        return len(letters)

    def send_marker(
        self, source: TopicPartition, sink: str, replayed: OffsetRange, timeout: float = 60.0
    ) -> int:
        """Write a replay marker of ``replayed`` to every partition (order exists only within one:
        each earlier letter there is withdrawn for ``sink``); return how many.
        """
        self._ready()  # the topic exists before its partitions are listed
        headers = marker_headers(self.pipeline, sink, source, replayed)
        partitions = sorted(end_offsets(self.settings, self.topic))
        records = [{"partition": p, "headers": headers} for p in partitions]
        remaining, failures = self._produce(records, timeout)
        if remaining or failures:
            raise RuntimeError(
                f"dead-letter topic {self.topic!r}: replay marker not acknowledged "
                f"({remaining} pending, errors: {failures[:3]}); nothing else was done"
            )
        return len(partitions)

    def _produce(self, records: list[dict[str, Any]], timeout: float) -> tuple[int, list[str]]:
        """Send ``records`` and flush: how many are still unacknowledged, and the errors."""
        if not records:
            return 0, []
        _, remaining, failures = send_records(self._ready(), self.topic, records, timeout)
        return remaining, [error.str() for error in failures]

    def _ready(self) -> Producer:
        if self._producer is None:
            self.ensure_topic()  # idempotent; the broker may not auto-create topics
            self._producer = idempotent_producer(self.settings)
        return self._producer


def _fit(
    key: bytes | None, value: bytes | None
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """Key and value as sent, dropping what would make the record too big for Kafka."""
    omitted: list[tuple[str, bytes]] = []
    key_size, value_size = len(key or b""), len(value or b"")
    if key_size + value_size <= DLQ_MAX_VALUE_BYTES:
        return key, value, omitted
    omitted.append((f"{HEADER_PREFIX}value.omitted.bytes", str(value_size).encode()))
    if key_size > DLQ_MAX_VALUE_BYTES:
        omitted.append((f"{HEADER_PREFIX}key.omitted.bytes", str(key_size).encode()))
        key = None
    return key, None, omitted


def read_dead_letter_log(
    settings: KafkaSettings, topic: str, timeout: float = 30.0
) -> list[tuple[int, int, dict[str, str]]]:
    """``(partition, offset, headers)`` of every record in ``topic``, markers included."""
    try:
        ends = end_offsets(settings, topic)
    except KafkaReadError:
        return []
    out: list[tuple[int, int, dict[str, str]]] = []
    with range_consumer(settings, [topic]) as consumer:
        for partition, end in sorted(ends.items()):
            tp = TopicPartition(topic, partition)
            batch = read_range(
                settings, tp, OffsetRange(0, end), timeout=timeout, consumer=consumer
            )
            for i, offset in enumerate(batch.offsets):
                headers = {k: v.decode() for k, v in batch.headers.get(i, ())}
                out.append((partition, offset, headers))
    return out


def dead_letter_offsets(
    kafka: KafkaSettings, dlq_topic: str, pipeline: str, sink: str | None = None
) -> dict[TopicPartition, set[int]]:
    """Source offsets that are dead letters of ``pipeline`` per source partition; with ``sink``, as
    its proof counts them (:func:`eos_pipeline.core.replay.dead_offsets`).
    """
    return dead_offsets(read_dead_letter_log(kafka, dlq_topic), pipeline, sink)
