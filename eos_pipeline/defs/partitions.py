"""One Dagster partition per Kafka topic-partition, keyed ``<topic>__p0007``.

Partitions are dynamic: the set of keys follows the topics' partition counts (the partitions
sensor adds new ones, see :mod:`eos_pipeline.defs.sensors`), so a topic that grows needs no
restart and no code change. Keys use no commas, pipes, brackets or spaces, which the UI and the
CLI treat specially, and sort in partition order within a topic.
"""

from __future__ import annotations

import dagster as dg

from eos_pipeline.core.offsets import TopicPartition


def partition_key(tp: TopicPartition) -> str:
    """``topic__p0007``: no commas, pipes, brackets or spaces, sorts in partition order."""
    return f"{tp.topic}__p{tp.partition:04d}"


def parse_partition_key(key: str) -> TopicPartition:
    topic, _, number = key.rpartition("__p")
    if not topic or not number.isdigit():
        raise ValueError(f"partition key {key!r} is not of the form <topic>__p<NNNN>")
    return TopicPartition(topic, int(number))


def partitions_name(pipeline: str) -> str:
    return f"{pipeline}_topic_partitions"


def pipeline_partitions(pipeline: str) -> dg.DynamicPartitionsDefinition:
    """The partitions shared by every asset of one pipeline (all its topics' partitions)."""
    return dg.DynamicPartitionsDefinition(name=partitions_name(pipeline))


def keys_for(topic: str, count: int) -> list[str]:
    return [partition_key(TopicPartition(topic, p)) for p in range(count)]
