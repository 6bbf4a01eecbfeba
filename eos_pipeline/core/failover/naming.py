"""Replication naming: remote topics, flows between clusters, the physical topics to read.

MM2's default replication policy names the copy of topic ``T`` from cluster ``A`` ``A.T``; a
pipeline's topic therefore lives as several physical topics on each cluster. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from eos_pipeline.core.failover.errors import FailoverError
from eos_pipeline.core.offsets import TopicPartition

# --------------------------------------------------------------------------------------- naming


@dataclass(frozen=True)
class ReplicationPolicy:
    """MM2's ``DefaultReplicationPolicy``: a remote topic is ``<source alias>.<topic>``."""

    separator: str = "."

    def remote_topic(self, source_alias: str, topic: str) -> str:
        """Name on another cluster of ``topic`` first written on ``source_alias``."""
        return f"{source_alias}{self.separator}{topic}"

    def source_alias(self, topic: str, aliases: Iterable[str] | None = None) -> str | None:
        """Alias of the cluster a remote topic came from, or None for a local topic.

        MM2 itself takes whatever precedes the first separator; with ``aliases`` given, only a
        known alias counts, so a local topic like ``orders.v1`` is not mistaken for a replica.
        """
        prefix, sep, rest = topic.partition(self.separator)
        if not sep or not prefix or not rest:
            return None
        if aliases is not None and prefix not in set(aliases):
            return None
        return prefix

    def upstream_topic(self, topic: str, aliases: Iterable[str] | None = None) -> str | None:
        """Name of a remote topic on the cluster it came from (one hop), or None."""
        if self.source_alias(topic, aliases) is None:
            return None
        return topic.partition(self.separator)[2]

    def offset_syncs_topic(self, other_alias: str) -> str:
        """MM2's offset-syncs topic of a flow, named after the flow's *other* cluster."""
        return f"mm2-offset-syncs{self.separator}{other_alias}{self.separator}internal"


DEFAULT_POLICY = ReplicationPolicy()


@dataclass(frozen=True, order=True)
class Flow:
    """One direction of replication, ``source`` -> ``target`` (cluster aliases)."""

    source: str
    target: str

    def __post_init__(self) -> None:
        if self.source == self.target:
            raise FailoverError(f"a replication flow needs two clusters, got {self.source!r} twice")

    def offset_syncs_cluster(self, location: str = "source") -> str:
        """The cluster holding this flow's syncs for MM2's ``offset-syncs.topic.location``."""
        if location not in ("source", "target"):
            raise FailoverError(f"offset-syncs location must be 'source' or 'target': {location!r}")
        return self.source if location == "source" else self.target

    def offset_syncs_topic(
        self, location: str = "source", policy: ReplicationPolicy = DEFAULT_POLICY
    ) -> str:
        """Name of this flow's syncs topic (on :meth:`offset_syncs_cluster`)."""
        other = self.target if self.offset_syncs_cluster(location) == self.source else self.source
        return policy.offset_syncs_topic(other)

    def __str__(self) -> str:
        return f"{self.source}->{self.target}"


@dataclass(frozen=True, order=True)
class PhysicalTopic:
    """A topic as it exists on one cluster, and where its records were first written.

    ``pipeline_topic`` is the name the pipeline is configured with (``T``); ``topic`` is the name
    on ``cluster`` (``T`` when ``origin == cluster``, else the remote name such as ``B.T``).
    """

    cluster: str
    topic: str
    origin: str
    pipeline_topic: str

    @property
    def is_local(self) -> bool:
        return self.origin == self.cluster

    def __str__(self) -> str:
        return f"{self.cluster}:{self.topic}"


def check_aliases(clusters: Sequence[str], policy: ReplicationPolicy) -> None:
    if len(clusters) < 2 or len(set(clusters)) != len(clusters):
        raise FailoverError(f"a failover pipeline needs two or more distinct clusters: {clusters}")
    for alias in clusters:
        if not alias or policy.separator in alias:
            raise FailoverError(
                f"cluster alias {alias!r} must be non-empty and free of {policy.separator!r}"
            )


def physical_topics(
    pipeline_topic: str,
    clusters: Sequence[str],
    active: str,
    policy: ReplicationPolicy = DEFAULT_POLICY,
) -> tuple[PhysicalTopic, ...]:
    """Every topic to read on ``active`` for ``pipeline_topic``: its own, then each replica.

    With clusters A and B: on A, ``T`` (written on A) and ``B.T`` (written on B, copied by MM2);
    on B, ``T`` and ``A.T``. MM2 never copies a topic back to where it came from, so these are
    all, and no record appears in two of them.
    """
    check_aliases(clusters, policy)
    if active not in clusters:
        raise FailoverError(f"unknown cluster {active!r}: the pipeline's clusters are {clusters}")
    TopicPartition(pipeline_topic, 0)  # validates the name
    if policy.source_alias(pipeline_topic, clusters) is not None:
        raise FailoverError(
            f"pipeline topic {pipeline_topic!r} starts with a cluster alias and "
            f"{policy.separator!r}: it would be read as a replica; name the original topic"
        )
    found = [PhysicalTopic(active, pipeline_topic, active, pipeline_topic)]
    for other in clusters:
        if other != active:
            remote = policy.remote_topic(other, pipeline_topic)
            found.append(PhysicalTopic(active, remote, other, pipeline_topic))
    return tuple(found)
