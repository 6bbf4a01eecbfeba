"""A table's position across clusters, kept in the table itself (a Hudi commit), and its move.

The ClickHouse sink keeps one keeper record per physical partition; a Hudi table keeps its whole
position in the metadata of its latest commit. For a pipeline with clusters, that commit says
which cluster the position belongs to, the next offset of every partition of every physical
topic read there (``T``, ``B.T``...) and, per partition, the mark of the last record written
(:class:`~eos_pipeline.core.keeper.Mark`, as the keeper records carry it).

When the active cluster is not the one of the latest commit, a switch happened: the position
moves to the active cluster by the same rule as a keeper record (:func:`move_position`), with
pending marks that the sink resolves by fingerprint before it writes. The table moves on its
own first run after the switch, from whatever commit is latest then, so a write that was in
flight on the old cluster during the switch is carried over too. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.failover.errors import FailoverError
from eos_pipeline.core.failover.naming import Flow, PhysicalTopic, physical_topics
from eos_pipeline.core.failover.switch import ClusterSet, Move, move_position
from eos_pipeline.core.failover.syncs import SyncHistory, route
from eos_pipeline.core.keeper import Mark, validate_cluster
from eos_pipeline.core.offsets import TopicPartition

FORMAT_VERSION = 1


class TablePositionError(FailoverError):
    """A table's cluster position is malformed or cannot be moved as asked."""


@dataclass(frozen=True)
class TablePosition:
    """Where a table stands on one cluster: next offset and last-written mark per partition."""

    cluster: str
    positions: Mapping[TopicPartition, int]
    marks: Mapping[TopicPartition, Mark] = field(default_factory=dict)
    #: Where the table's records of each partition on this cluster start (the resume point after
    #: the switch that brought it here, or where it first read): the exactly-once check compares
    #: ``[since, position)``. Missing: unknown (a table written before clusters were configured).
    since: Mapping[TopicPartition, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_cluster(self.cluster)
        for tp, offset in self.positions.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise TablePositionError(f"{tp}: offset must be an integer >= 0, got {offset!r}")
        stray = sorted((set(self.marks) | set(self.since)) - set(self.positions))
        if stray:
            raise TablePositionError(f"marks or starts for partitions without a position: {stray}")
        late = sorted(tp for tp, at in self.since.items() if at > self.positions[tp])
        if late:
            raise TablePositionError(f"partitions starting after their position: {late}")

    @property
    def pending(self) -> dict[TopicPartition, Mark]:
        """Partitions moved here by a switch whose last written record is still to be found."""
        return {tp: m for tp, m in self.marks.items() if m.pending}

    def encode(self) -> str:
        """Compact JSON, topics and partitions sorted (the same position, the same text)."""
        topics: dict[str, dict[str, list[object]]] = {}
        for tp in sorted(self.positions):
            mark = self.marks.get(tp)
            entry = [
                self.positions[tp],
                None if mark is None else mark.to_json(),
                self.since.get(tp),
            ]
            topics.setdefault(tp.topic, {})[str(tp.partition)] = entry
        body = {"v": FORMAT_VERSION, "cluster": self.cluster, "topics": topics}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> TablePosition:
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or raw.get("v") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {raw.get('v') if raw else raw!r}")
            positions: dict[TopicPartition, int] = {}
            marks: dict[TopicPartition, Mark] = {}
            since: dict[TopicPartition, int] = {}
            for topic, partitions in raw["topics"].items():
                for partition, (offset, mark, start) in partitions.items():
                    tp = TopicPartition(topic, int(partition))
                    positions[tp] = offset
                    if start is not None:
                        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
                            raise ValueError(f"{tp}: bad start {start!r}")
                        since[tp] = start
                    decoded = Mark.from_json(mark)
                    if decoded is not None:
                        marks[tp] = decoded
            return cls(str(raw["cluster"]), positions, marks, since)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TablePositionError(f"corrupt cluster position {text[:200]!r}: {exc}") from None

    def advanced(
        self,
        positions: Mapping[TopicPartition, int],
        marks: Mapping[TopicPartition, Mark | None],
        since: Mapping[TopicPartition, int] | None = None,
    ) -> TablePosition:
        """This position with ``positions`` moved and ``marks`` replaced (None: mark dropped);
        ``since`` sets where partitions start on this cluster."""
        merged = {**self.positions, **positions}
        new_marks = dict(self.marks)
        for tp, mark in marks.items():
            if mark is None:
                new_marks.pop(tp, None)
            else:
                new_marks[tp] = mark
        return TablePosition(self.cluster, merged, new_marks, {**self.since, **(since or {})})


def stored_position(
    cluster_position: str | None, checkpoint: Mapping[TopicPartition, int], initial: str
) -> TablePosition:
    """A commit's cluster position; a plain checkpoint (an older table) is on ``initial``."""
    if cluster_position is not None:
        return TablePosition.decode(cluster_position)
    return TablePosition(initial, dict(checkpoint))


#: Separates the cluster alias from the topic in a clustered table's source-topic column. Kafka
#: topic names never contain it, so the pair reads back unambiguously.
ROW_TOPIC_SEPARATOR = ":"


def row_topic(cluster: str, topic: str) -> str:
    """The source topic a clustered table stores for a record read from ``topic`` on ``cluster``.

    The same name holds different records on each cluster (``T`` written on A is not ``T``
    written on B), so source coordinates identify a record only with the cluster in them.
    """
    return f"{cluster}{ROW_TOPIC_SEPARATOR}{topic}"


def split_row_topic(value: str) -> tuple[str | None, str]:
    """``(cluster, topic)`` of a stored source topic; cluster None for a single-cluster row."""
    cluster, sep, topic = value.partition(ROW_TOPIC_SEPARATOR)
    return (cluster, topic) if sep else (None, value)


def streamer_checkpoint(
    pipeline_topic: str, position: TablePosition, partition_count: int
) -> Checkpoint:
    """The HoodieStreamer-format checkpoint a clustered table's commit also carries.

    Hudi's timeline readers (and this project's) only look at commits carrying one, so every
    commit has it: the local topic's positions on the commit's cluster, 0 where that topic has
    no position yet. It is a summary; the cluster position is what the sink resumes from.
    """
    return {
        TopicPartition(pipeline_topic, p): position.positions.get(
            TopicPartition(pipeline_topic, p), 0
        )
        for p in range(partition_count)
    }


def physical_of(
    tp: TopicPartition, cluster: str, clusters: ClusterSet, pipeline_topics: Iterable[str]
) -> PhysicalTopic:
    """The physical topic ``tp.topic`` names on ``cluster`` for one of the pipeline's topics."""
    for topic in pipeline_topics:
        # every name a replica could have, replicated or not: a flow no longer replicated is
        # refused by the move, with the flow named
        for physical in physical_topics(topic, clusters.aliases, cluster, clusters.policy):
            if physical.topic == tp.topic:
                return physical
    raise TablePositionError(
        f"{cluster}:{tp}: the table holds a position for a topic that is none of the pipeline's "
        f"topics {sorted(pipeline_topics)} or their replicas on {cluster!r}"
    )


def flows_needed(
    position: TablePosition, target: str, clusters: ClusterSet, pipeline_topics: Iterable[str]
) -> set[Flow]:
    """The flows whose offset syncs :func:`carry_over` needs."""
    topics = tuple(pipeline_topics)
    return {
        route(
            physical_of(tp, position.cluster, clusters, topics),
            target,
            clusters.aliases,
            clusters.policy,
        ).flow
        for tp in position.positions
    }


def carry_over(
    position: TablePosition,
    target: str,
    clusters: ClusterSet,
    pipeline_topics: Iterable[str],
    histories: Mapping[Flow, SyncHistory],
    floor: Callable[[TopicPartition], int],
    time_floor: Callable[[TopicPartition, Mark], int | None] | None = None,
) -> tuple[TablePosition, list[Move]]:
    """The position on ``target`` for a table standing on another cluster, with pending marks.

    Each partition moves as a keeper record would (:func:`move_position`): with a mark, to the
    start of the window holding its copy; without one, only an exact translation is accepted.
    ``floor`` gives the first offset still held by a target partition; ``time_floor`` the first
    offset of a target partition at a mark's timestamp (None: unknown, the syncs alone bound).
    """
    if target == position.cluster:
        return position, []
    topics = tuple(pipeline_topics)
    moved: dict[TopicPartition, int] = {}
    marks: dict[TopicPartition, Mark] = {}
    moves = []
    for tp in sorted(position.positions):
        physical = physical_of(tp, position.cluster, clusters, topics)
        r = route(physical, target, clusters.aliases, clusters.policy)
        history = histories.get(r.flow, SyncHistory(r.flow))
        to = TopicPartition(r.target.topic, tp.partition)
        mark = position.marks.get(tp)
        m = move_position(
            physical,
            tp.partition,
            position.positions[tp],
            mark,
            target,
            clusters,
            history,
            floor(to),
            None if time_floor is None or mark is None else time_floor(to, mark),
        )
        moved[to] = m.position
        if m.mark is not None:
            marks[to] = m.mark
        moves.append(m)
    return TablePosition(target, moved, marks), moves


__all__ = [
    "ROW_TOPIC_SEPARATOR",
    "TablePosition",
    "TablePositionError",
    "carry_over",
    "flows_needed",
    "physical_of",
    "row_topic",
    "split_row_topic",
    "stored_position",
    "streamer_checkpoint",
]
