"""Producing: an idempotent producer, and a send that waits for every delivery."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import (
    KafkaError,
    Producer,
)

from eos_pipeline.adapters.kafka.settings import KafkaReadError, KafkaSettings


def idempotent_producer(settings: KafkaSettings, **extra: Any) -> Producer:
    """A producer whose retries never duplicate or reorder records within a partition."""
    return Producer(
        settings.config(
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "compression.type": "lz4",
                **extra,
            }
        )
    )


def produce_all(
    producer: Producer,
    topic: str,
    records: Iterable[tuple[int | None, bytes | None, bytes | None]],
    headers: list[tuple[str, bytes]] | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, int]]:
    """Send ``(partition, key, value)`` records and wait for all; return their (partition, offset).

    Any delivery failure raises: a caller never proceeds believing a record was written.
    """
    delivered: list[tuple[int, int]] = []
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            failures.append(err.str())
        else:
            delivered.append((msg.partition(), msg.offset()))

    for partition, key, value in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(timeout)
    if remaining or failures:
        raise KafkaReadError(
            f"producing to {topic!r} failed: {remaining} undelivered, errors: {failures[:3]}"
        )
    return delivered
