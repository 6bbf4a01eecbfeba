"""Kafka through confluent-kafka: topic admin, end offsets, exact offset-range reads, producing.

Reads are by explicit assignment, never by consumer-group subscription: the pipeline keeps its
positions in its sinks (the keeper, the Hudi commit), so Kafka's committed group offsets play no
part and are never written. Consumers run in ``read_committed`` isolation so that records of
aborted transactions are never delivered, and with ``auto.offset.reset=error`` so that a range
whose start was deleted by retention fails loudly instead of silently jumping ahead.
"""

from confluent_kafka import OFFSET_END

from eos_pipeline.adapters.kafka.admin import (
    admin_client,
    create_topic,
    end_offsets,
    partition_count,
    shared_admin,
    start_offsets,
    topic_id,
)
from eos_pipeline.adapters.kafka.producer import idempotent_producer, produce_all
from eos_pipeline.adapters.kafka.reader import range_consumer, read_range
from eos_pipeline.adapters.kafka.settings import (
    KafkaBatch,
    KafkaReadError,
    KafkaSettings,
    TopicMissingError,
    is_secret_setting,
)

__all__ = [
    "OFFSET_END",
    "KafkaBatch",
    "KafkaReadError",
    "KafkaSettings",
    "TopicMissingError",
    "admin_client",
    "create_topic",
    "end_offsets",
    "idempotent_producer",
    "is_secret_setting",
    "partition_count",
    "produce_all",
    "range_consumer",
    "read_range",
    "shared_admin",
    "start_offsets",
    "topic_id",
]
