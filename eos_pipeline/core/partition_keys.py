"""Partition keys: one key per Kafka topic-partition, ``<topic>__p0007``.

The keys name the Dagster dynamic partitions (:mod:`eos_pipeline.components.partitions`) and
appear in run keys and run tags, so the sensors' planner (:mod:`eos_pipeline.core.planning`)
builds them too. They use no commas, pipes, brackets or spaces, which Dagster's UI and CLI
treat specially, and sort in partition order within a topic.
"""

from __future__ import annotations

from eos_pipeline.core.offsets import TopicPartition

__all__ = ["keys_for", "parse_partition_key", "partition_key"]


def partition_key(tp: TopicPartition) -> str:
    """``topic__p0007``: no commas, pipes, brackets or spaces, sorts in partition order."""
    return f"{tp.topic}__p{tp.partition:04d}"


def parse_partition_key(key: str) -> TopicPartition:
    topic, _, number = key.rpartition("__p")
    if not topic or not number.isdigit():
        raise ValueError(f"partition key {key!r} is not of the form <topic>__p<NNNN>")
    return TopicPartition(topic, int(number))


def keys_for(topic: str, count: int) -> list[str]:
    """The keys of partitions ``0 .. count - 1`` of ``topic``, in order."""
    return [partition_key(TopicPartition(topic, p)) for p in range(count)]
