"""One Dagster partition per Kafka topic-partition, keyed ``<topic>__p0007``.

Partitions are dynamic: the set of keys follows the topics' partition counts (the partitions
sensor adds new ones, see :mod:`eos_pipeline.components.sensors`), so a topic that grows needs no
restart and no code change. The key format is a pure rule of the core
(:mod:`eos_pipeline.core.planning`), re-exported here for the Dagster layer.
"""

from __future__ import annotations

import dagster as dg

from eos_pipeline.core.planning import keys_for, parse_partition_key, partition_key

__all__ = [
    "keys_for",
    "parse_partition_key",
    "partition_key",
    "partitions_name",
    "pipeline_partitions",
]


def partitions_name(pipeline: str) -> str:
    return f"{pipeline}_topic_partitions"


def pipeline_partitions(pipeline: str) -> dg.DynamicPartitionsDefinition:
    """The partitions shared by every asset of one pipeline (all its topics' partitions)."""
    return dg.DynamicPartitionsDefinition(name=partitions_name(pipeline))
