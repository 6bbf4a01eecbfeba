"""MirrorMaker 2 offset syncs: their bytes, the history kept of them, translation both ways.

Forward (upstream -> downstream) and inverse (downstream -> upstream) translation from the
latest sync at or before a position; both never ahead of the true position. Pure: no I/O.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from eos_pipeline.core.failover.errors import FailoverError, OffsetSyncDecodeError
from eos_pipeline.core.failover.naming import (
    DEFAULT_POLICY,
    Flow,
    PhysicalTopic,
    ReplicationPolicy,
    check_aliases,
)
from eos_pipeline.core.offsets import TopicPartition

# --------------------------------------------------------------------------------------- syncs


_KEY_HEAD = struct.Struct(">h")
_PARTITION = struct.Struct(">i")
_VALUE = struct.Struct(">qq")


@dataclass(frozen=True, order=True, slots=True)
class OffsetSync:
    """Upstream record ``upstream`` of ``topic``/``partition`` was copied to ``downstream``.

    ``topic`` is the name on the source cluster (``T``, not ``A.T``).
    """

    topic: str
    partition: int
    upstream: int
    downstream: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def decode_offset_sync(key: bytes | None, value: bytes | None) -> OffsetSync:
    """An :class:`OffsetSync` from a record of MM2's offset-syncs topic.

    Key: int16 length, the topic in UTF-8, int32 partition; value: int64 upstream offset, int64
    downstream offset; all big-endian (Kafka's protocol types STRING, INT32, INT64).
    """
    if key is None or value is None:
        raise OffsetSyncDecodeError("offset sync record without key or value (a tombstone?)")
    if len(key) < _KEY_HEAD.size:
        raise OffsetSyncDecodeError(f"offset sync key too short ({len(key)} bytes)")
    (length,) = _KEY_HEAD.unpack_from(key)
    if length < 0 or len(key) != _KEY_HEAD.size + length + _PARTITION.size:
        raise OffsetSyncDecodeError(
            f"offset sync key of {len(key)} bytes does not hold a topic of {length} bytes and a "
            "partition"
        )
    try:
        topic = key[_KEY_HEAD.size : _KEY_HEAD.size + length].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OffsetSyncDecodeError(f"offset sync topic is not UTF-8: {exc}") from None
    (partition,) = _PARTITION.unpack_from(key, _KEY_HEAD.size + length)
    if len(value) != _VALUE.size:
        raise OffsetSyncDecodeError(f"offset sync value is {len(value)} bytes, expected 16")
    upstream, downstream = _VALUE.unpack(value)
    if partition < 0 or upstream < 0 or downstream < 0:
        raise OffsetSyncDecodeError(
            f"offset sync with a negative number: {topic}[{partition}] {upstream}->{downstream}"
        )
    return OffsetSync(topic, partition, upstream, downstream)


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """The (key, value) bytes MM2 writes for ``sync``: the inverse of the decoder."""
    name = sync.topic.encode("utf-8")
    key = _KEY_HEAD.pack(len(name)) + name + _PARTITION.pack(sync.partition)
    return key, _VALUE.pack(sync.upstream, sync.downstream)


@dataclass(frozen=True, slots=True)
class Translation:
    """A translated position and what it rests on.

    ``exact`` means the position is the true one (it fell on a sync); otherwise it is at most
    behind. ``basis`` is the sync used, None when no sync precedes the position (the caller's
    floor, e.g. the partition's first offset, is returned then).
    """

    position: int
    exact: bool
    basis: OffsetSync | None


@dataclass(frozen=True, slots=True)
class Window:
    """Offsets ``[start, end)`` on the other cluster that must hold a record's counterpart.

    ``end`` is None when no later sync bounds it: the counterpart is at ``start`` or after, maybe
    not written yet.
    """

    start: int
    end: int | None

    @property
    def closed(self) -> bool:
        return self.end is not None

    def __contains__(self, offset: object) -> bool:
        return (
            isinstance(offset, int)
            and offset >= self.start
            and (self.end is None or offset < self.end)
        )

    def __str__(self) -> str:
        return f"[{self.start}, {'end of log' if self.end is None else self.end})"


@dataclass
class _Syncs:
    """One partition's syncs of one epoch, ascending in both offsets."""

    ups: list[int] = field(default_factory=list)
    downs: list[int] = field(default_factory=list)


def _bracket(keys: list[int], values: list[int], x: int, floor: int) -> Window:
    """Where the counterpart of the record at ``x`` is, between the syncs around it."""
    i = bisect_right(keys, x) - 1
    if i >= 0 and keys[i] == x:
        return Window(values[i], values[i] + 1)
    start = floor if i < 0 else values[i] + 1
    end = values[i + 1] if i + 1 < len(keys) else None
    return Window(start, end)


def _translate(tp: TopicPartition, entry: _Syncs, x: int, floor: int, *, up: bool) -> Translation:
    """The rule shared by both directions; ``up`` says ``x`` is an upstream position."""
    keys, values = (entry.ups, entry.downs) if up else (entry.downs, entry.ups)
    i = bisect_right(keys, x) - 1
    if i < 0:
        return Translation(floor, exact=False, basis=None)
    basis = OffsetSync(tp.topic, tp.partition, entry.ups[i], entry.downs[i])
    if keys[i] == x:
        return Translation(values[i], exact=True, basis=basis)
    return Translation(values[i] + 1, exact=False, basis=basis)


class SyncHistory:
    """Every offset sync seen for one flow, per upstream topic-partition.

    Syncs must be added in the order of the syncs topic. A sync that goes back in either offset
    starts a new epoch (the upstream topic was recreated, or the replica truncated) and the older
    syncs of that partition are dropped, as MM2 does: they describe records that no longer
    correspond. ``source_position`` is the next offset of the syncs topic to fold in, so that a
    reader continues where the history stops.
    """

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.source_position = 0
        self.resets = 0
        self._by_tp: dict[TopicPartition, _Syncs] = {}

    def add(self, sync: OffsetSync) -> None:
        entry = self._by_tp.setdefault(sync.tp, _Syncs())
        if entry.ups:
            last_up, last_down = entry.ups[-1], entry.downs[-1]
            if (sync.upstream, sync.downstream) == (last_up, last_down):
                return
            if sync.upstream <= last_up or sync.downstream <= last_down:
                entry.ups.clear()
                entry.downs.clear()
                self.resets += 1
        entry.ups.append(sync.upstream)
        entry.downs.append(sync.downstream)

    def extend(self, syncs: Iterable[OffsetSync]) -> None:
        for sync in syncs:
            self.add(sync)

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._by_tp)

    def syncs(self, tp: TopicPartition) -> list[OffsetSync]:
        entry = self._by_tp.get(tp)
        if entry is None:
            return []
        return [
            OffsetSync(tp.topic, tp.partition, u, d)
            for u, d in zip(entry.ups, entry.downs, strict=True)
        ]

    def __iter__(self) -> Iterator[OffsetSync]:
        for tp in self.partitions():
            yield from self.syncs(tp)

    def __len__(self) -> int:
        return sum(len(e.ups) for e in self._by_tp.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, for keeping the history beyond what the compacted topic keeps."""
        return {
            "flow": [self.flow.source, self.flow.target],
            "source_position": self.source_position,
            "resets": self.resets,
            "syncs": [
                [tp.topic, tp.partition, [[u, d] for u, d in zip(e.ups, e.downs, strict=True)]]
                for tp, e in sorted(self._by_tp.items())
            ],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SyncHistory:
        """The history :meth:`to_dict` wrote; its syncs are re-checked as they are added."""
        try:
            source, target = raw["flow"]
            history = cls(Flow(str(source), str(target)))
            for topic, partition, pairs in raw["syncs"]:
                for upstream, downstream in pairs:
                    history.add(
                        OffsetSync(str(topic), int(partition), int(upstream), int(downstream))
                    )
            history.source_position = int(raw["source_position"])
            history.resets = int(raw.get("resets", 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise FailoverError(f"not a stored sync history: {exc!r}") from None
        return history

    def trimmed(self, keep: int) -> SyncHistory:
        """A copy keeping each partition's ``keep`` latest syncs (what a stored copy holds).

        Recent positions translate as before; a position older than the oldest sync kept
        translates to the caller's floor: more re-read, never a skip.
        """
        if keep < 1:
            raise FailoverError(f"keep at least one sync per partition, not {keep}")
        copy = SyncHistory(self.flow)
        copy.source_position, copy.resets = self.source_position, self.resets
        for tp, entry in self._by_tp.items():
            copy._by_tp[tp] = _Syncs(entry.ups[-keep:], entry.downs[-keep:])
        return copy

    def _entry(self, tp: TopicPartition) -> _Syncs:
        return self._by_tp.get(tp) or _Syncs()

    def forward(self, tp: TopicPartition, upstream_position: int, floor: int = 0) -> Translation:
        """Downstream position for upstream position ``upstream_position`` (next to read).

        Latest sync with upstream <= position: its downstream offset if the position is that very
        record, else one past it. ``floor`` (the replica partition's first offset) when no sync
        precedes the position. Never ahead of the true position.
        """
        return _translate(tp, self._entry(tp), upstream_position, floor, up=True)

    def inverse(self, tp: TopicPartition, downstream_position: int, floor: int = 0) -> Translation:
        """Upstream position for downstream position ``downstream_position`` (next to read).

        Latest sync with downstream <= position: its upstream offset if the position is that very
        copy, else one past it (that copy was consumed, so its original was too). ``floor`` when no
        sync precedes the position. Never ahead of the true position.
        """
        return _translate(tp, self._entry(tp), downstream_position, floor, up=False)

    def replica_window(self, tp: TopicPartition, upstream_offset: int, floor: int = 0) -> Window:
        """Where the copy of upstream record ``upstream_offset`` lies downstream."""
        entry = self._entry(tp)
        return _bracket(entry.ups, entry.downs, upstream_offset, floor)

    def origin_window(self, tp: TopicPartition, downstream_offset: int, floor: int = 0) -> Window:
        """Where the original of downstream record ``downstream_offset`` lies upstream."""
        entry = self._entry(tp)
        return _bracket(entry.downs, entry.ups, downstream_offset, floor)


@dataclass(frozen=True)
class Route:
    """How a position on one physical topic maps onto another cluster, and through which syncs.

    ``forward``: ``source`` holds the originals, ``target`` their copies (flow source->target).
    ``inverse``: ``source`` holds copies whose originals are ``target`` (the same flow reversed).
    The syncs are keyed by the original topic's name, which is the pipeline topic.
    """

    source: PhysicalTopic
    target: PhysicalTopic
    flow: Flow
    direction: Literal["forward", "inverse"]

    def key(self, partition: int) -> TopicPartition:
        return TopicPartition(self.source.pipeline_topic, partition)

    def translate(
        self, history: SyncHistory, partition: int, position: int, floor: int = 0
    ) -> Translation:
        """The position on ``target`` for ``position`` on ``source`` (never ahead).

        ``floor`` is the first offset of the target partition, used when no sync precedes.
        """
        self._check(history)
        tp = self.key(partition)
        if self.direction == "forward":
            return history.forward(tp, position, floor)
        return history.inverse(tp, position, floor)

    def window(self, history: SyncHistory, partition: int, offset: int, floor: int = 0) -> Window:
        """Where on ``target`` the counterpart of the record at ``offset`` of ``source`` lies."""
        self._check(history)
        tp = self.key(partition)
        if self.direction == "forward":
            return history.replica_window(tp, offset, floor)
        return history.origin_window(tp, offset, floor)

    def _check(self, history: SyncHistory) -> None:
        if history.flow != self.flow:
            raise FailoverError(
                f"route {self.source} -> {self.target} translates with the syncs of flow "
                f"{self.flow}, got a history of flow {history.flow}"
            )


def route(
    physical: PhysicalTopic,
    to_cluster: str,
    clusters: Sequence[str],
    policy: ReplicationPolicy = DEFAULT_POLICY,
) -> Route:
    """The route of ``physical`` to ``to_cluster`` (a position there, and the flow to use).

    Records written on cluster C and read there from ``T`` are on another cluster D as ``C.T``
    (forward through flow C->D); records read on C from ``D.T`` came from D's ``T`` (inverse
    through flow D->C). A replica of a third cluster's topic has no direct syncs to D: refused.
    """
    check_aliases(clusters, policy)
    if to_cluster not in clusters:
        raise FailoverError(
            f"unknown cluster {to_cluster!r}: the pipeline's clusters are {clusters}"
        )
    if to_cluster == physical.cluster:
        raise FailoverError(f"{physical} is already on cluster {to_cluster!r}: nothing to route")
    base = physical.pipeline_topic
    if physical.is_local:
        target = PhysicalTopic(
            to_cluster, policy.remote_topic(physical.cluster, base), physical.cluster, base
        )
        return Route(physical, target, Flow(physical.cluster, to_cluster), "forward")
    if physical.origin == to_cluster:
        target = PhysicalTopic(to_cluster, base, to_cluster, base)
        return Route(physical, target, Flow(to_cluster, physical.cluster), "inverse")
    raise FailoverError(
        f"{physical} holds records of cluster {physical.origin!r}, which MM2 does not copy "
        f"between {physical.cluster!r} and {to_cluster!r} directly; translate through "
        f"{physical.origin!r} instead"
    )
