"""Readings of pure decisions that only the tests ask for."""

from __future__ import annotations

from eos_pipeline.core.dedup import Decision
from eos_pipeline.core.failover import ROW_TOPIC_SEPARATOR, ReplicationPolicy


def writes_state(decision: Decision) -> bool:
    """Whether the keeper is written at all (only steps write it)."""
    return bool(decision.steps)


def upstream_topic(
    policy: ReplicationPolicy, topic: str, aliases: tuple[str, ...] | None = None
) -> str | None:
    """Name of a remote topic on the cluster it came from (one hop), or None."""
    if policy.source_alias(topic, aliases) is None:
        return None
    return topic.partition(policy.separator)[2]


def split_row_topic(value: str) -> tuple[str | None, str]:
    """``(cluster, topic)`` of a stored source topic; cluster None for a single-cluster row."""
    cluster, sep, topic = value.partition(ROW_TOPIC_SEPARATOR)
    return (cluster, topic) if sep else (None, value)
