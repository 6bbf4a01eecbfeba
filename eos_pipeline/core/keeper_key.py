"""Which keeper record: its key (pipeline, sink, topic, partition, cluster) and znode path.

Every name here becomes a znode path part, so each is checked on the way in: pipeline and sink
names are a safe subset with no separators or relative parts, topics follow Kafka's own rule,
partitions are canonical numbers, cluster aliases carry no ``.`` (MirrorMaker 2's separator), and
the root is absolute and outside ZooKeeper's reserved tree. Pure: no I/O. The record stored
under the key is :mod:`eos_pipeline.core.keeper_record`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eos_pipeline.core.errors import NeedsPerson
from eos_pipeline.core.offsets import TopicPartition

__all__ = [
    "DEFAULT_ROOT",
    "InvalidKeyError",
    "KeeperKey",
    "topic_path",
    "validate_cluster",
    "validate_name",
    "validate_partition",
    "validate_root",
    "validate_topic",
]

DEFAULT_ROOT = "/eos_pipeline"

# Pipeline and sink names become znode names: a safe subset, no separators, no relative parts.
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_CLUSTER_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class InvalidKeyError(NeedsPerson, ValueError):
    """A pipeline, sink, topic, partition or root cannot be used as a znode path part."""

    code = "invalid-key"


def validate_name(field_name: str, value: object) -> str:
    """Check a pipeline/sink/root component: ``[A-Za-z0-9_.-]``, no ``.``/``..``, no ``/``."""
    if not isinstance(value, str):
        raise InvalidKeyError(f"{field_name} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidKeyError(f"{field_name} must not be empty")
    if "/" in value:
        raise InvalidKeyError(f"{field_name} {value!r} must not contain '/'")
    if ".." in value or value == ".":
        raise InvalidKeyError(f"{field_name} {value!r} must not be '.' or contain '..'")
    if not _NAME_RE.match(value):
        raise InvalidKeyError(f"{field_name} {value!r} must be 1-200 of [A-Za-z0-9_.-]")
    return value


def validate_topic(value: object) -> str:
    """Check a topic name by Kafka's own rule (1-249 of ``[A-Za-z0-9._-]``, not ``.``/``..``)."""
    if not isinstance(value, str):
        raise InvalidKeyError(f"topic must be a string, got {type(value).__name__}")
    try:
        TopicPartition(value, 0)
    except ValueError as exc:
        raise InvalidKeyError(f"topic: {exc}") from None
    return value


def validate_partition(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidKeyError(f"partition must be an int, got {type(value).__name__}")
    if not 0 <= value < 2**31:
        raise InvalidKeyError(f"partition must be in [0, 2**31), got {value}")
    return value


def validate_root(root: object) -> str:
    """Check the znode root under which every record lives, e.g. ``/eos_pipeline``.

    The root must be absolute with at least one component, and must not be under ZooKeeper's
    reserved ``/zookeeper`` tree. A trailing ``/`` is dropped.
    """
    if not isinstance(root, str) or not root.startswith("/"):
        raise InvalidKeyError(f"root must be an absolute znode path like {DEFAULT_ROOT!r}")
    parts = root.strip("/").split("/")
    if parts == [""]:
        raise InvalidKeyError("root must not be '/': give it a name like '/eos_pipeline'")
    for part in parts:
        validate_name("root", part)
    if parts[0] == "zookeeper":
        raise InvalidKeyError("root must not be under /zookeeper, ZooKeeper's reserved tree")
    return "/" + "/".join(parts)


@dataclass(frozen=True, order=True, slots=True)
class KeeperKey:
    """Which record: one per (pipeline, sink, topic, partition). Validated on construction."""

    pipeline: str
    sink: str
    topic: str
    partition: int
    #: Cluster alias for a pipeline with several clusters (None: the single-cluster layout).
    cluster: str | None = None

    def __post_init__(self) -> None:
        validate_name("pipeline", self.pipeline)
        validate_name("sink", self.sink)
        validate_topic(self.topic)
        validate_partition(self.partition)
        if self.cluster is not None:
            validate_cluster(self.cluster)

    @classmethod
    def of(
        cls, pipeline: str, sink: str, tp: TopicPartition, cluster: str | None = None
    ) -> KeeperKey:
        return cls(pipeline, sink, tp.topic, tp.partition, cluster)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def path(self, root: str = DEFAULT_ROOT) -> str:
        """The znode path: ``<root>/<pipeline>/<sink>[/@<cluster>]/<topic>/<partition>``."""
        parent = topic_path(root, self.pipeline, self.sink, self.topic, self.cluster)
        return f"{parent}/{self.partition}"

    def __str__(self) -> str:
        where = f"@{self.cluster}:" if self.cluster else ""
        return f"{self.pipeline}/{self.sink}/{where}{self.topic}[{self.partition}]"


def validate_cluster(value: object) -> str:
    """A cluster alias: 1-64 of ``[A-Za-z0-9_-]`` (no ``.``, MM2's separator in topic names)."""
    if not isinstance(value, str) or not _CLUSTER_RE.match(value):
        raise InvalidKeyError(f"cluster alias {value!r} must be 1-64 of [A-Za-z0-9_-]")
    return value


def topic_path(root: str, pipeline: str, sink: str, topic: str, cluster: str | None = None) -> str:
    """The parent znode of all partition records of one topic for one sink (and cluster).

    A cluster's part starts with ``@``, which no topic name can hold, so the layouts with and
    without clusters never meet.
    """
    parts = [validate_root(root), validate_name("pipeline", pipeline), validate_name("sink", sink)]
    if cluster is not None:
        parts.append("@" + validate_cluster(cluster))
    parts.append(validate_topic(topic))
    return "/".join(parts)
