"""Failover and failback across MirrorMaker 2: naming, offset syncs, translation, exact resume.

MirrorMaker 2 (MM2) replicates topic ``T`` of cluster A to ``A.T`` on cluster B and records, now
and then, an *offset sync*: "upstream record ``u`` of ``T`` was written downstream at ``d``". Each
sync pairs the two offsets of one and the same record; between two syncs only the order of records
is known, not their offsets (transaction markers, and records MM2 has not copied yet, leave gaps).

From those pairs this module translates a position both ways, as the seed proposes:

* **forward** (A's ``T`` -> B's ``A.T``): take the latest sync whose upstream offset is at or
  before the position; land on its downstream offset if the position is exactly that record, else
  one past it (that record was consumed; how many after it were is unknown).
* **inverse** (B's ``A.T`` -> A's ``T``): the mirror image over the downstream offsets, which is
  what MM2's own proposal for "reverse checkpoints" would do with the same syncs.

Both are conservative by construction: never ahead of the true position, so nothing is skipped;
they may be behind, so records are re-read. The re-read is made exact by record identity: MM2
copies key, value, timestamp and headers unchanged, so a fingerprint of the last record a sink
wrote finds that record's copy on the other cluster, and the sink resumes right after it. When the
fingerprint is not where it must be, :func:`resume_after` stops with an error: it never guesses.

The offset-syncs topic is compacted (one sync per partition survives), so :class:`SyncHistory`
keeps every sync it is given; the adapter feeds it and the product decides what to persist.

Pure: no I/O. Reading the syncs topic and the re-read window lives in
``eos_pipeline.adapters.mirror``.
"""

from __future__ import annotations

import hashlib
import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from eos_pipeline.core.offsets import TopicPartition


class FailoverError(ValueError):
    """A failover rule was broken: bad names, bad sync bytes, or a position that cannot be found."""


class OffsetSyncDecodeError(FailoverError):
    """A record of the offset-syncs topic does not have MM2's layout."""


class ResumeError(FailoverError):
    """The exact resume point could not be determined; nothing should be written."""


class FingerprintNotFound(ResumeError):
    """The last written record is not in the window where its copy must be."""


class ReplicaPending(FingerprintNotFound):
    """The window is open-ended and does not hold the record yet: MM2 may still be copying it."""


class AmbiguousFingerprint(ResumeError):
    """Several records of the window carry the fingerprint: which one was written is unknown."""


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

    def checkpoints_topic(self, source_alias: str) -> str:
        return f"{source_alias}{self.separator}checkpoints{self.separator}internal"


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


def _check_aliases(clusters: Sequence[str], policy: ReplicationPolicy) -> None:
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
    _check_aliases(clusters, policy)
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
    _check_aliases(clusters, policy)
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


# --------------------------------------------------------------------------------------- identity

_FINGERPRINT_PERSON = b"eos-mm2-fp-v1"


def _feed(digest: hashlib.blake2b, data: bytes | None) -> None:
    # None and b"" differ (a null key is not an empty key); lengths keep fields from running into
    # each other, so (b"ab", b"c") and (b"a", b"bc") never collide.
    if data is None:
        digest.update(b"\x00")
    else:
        digest.update(b"\x01" + len(data).to_bytes(4, "big") + data)


def record_fingerprint(
    key: bytes | None,
    value: bytes | None,
    timestamp_ms: int,
    headers: Sequence[tuple[str | bytes, bytes | None]] | None = None,
) -> str:
    """A stable identity of a record across clusters: BLAKE2b-128 of what MM2 copies unchanged.

    Key, value, timestamp (ms) and headers (in order; a header without value differs from an
    empty one). Offsets are left out on purpose: they differ between a record and its copy.
    """
    digest = hashlib.blake2b(digest_size=16, person=_FINGERPRINT_PERSON)
    _feed(digest, key)
    _feed(digest, value)
    digest.update(int(timestamp_ms).to_bytes(8, "big", signed=True))
    items = list(headers or ())
    digest.update(len(items).to_bytes(4, "big"))
    for name, header_value in items:
        _feed(digest, name.encode("utf-8") if isinstance(name, str) else bytes(name))
        _feed(digest, header_value)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class MirroredRecord:
    """One record as read from either cluster: its offset there and what MM2 preserves."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def fingerprint(self) -> str:
        return record_fingerprint(self.key, self.value, self.timestamp_ms, self.headers)


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where to continue on the new cluster, found by record identity.

    ``position`` is the next offset to read (the match + 1); ``skipped`` counts the records of the
    window up to and including the match, all already written before the switch; ``bounded`` is
    False when the window had no upper sync (see :func:`resume_after`).
    """

    position: int
    matched_offset: int
    skipped: int
    bounded: bool


def resume_after(
    partition: TopicPartition | str,
    fingerprint: str,
    records: Iterable[MirroredRecord],
    window: Window,
) -> ResumePoint:
    """The exact next position after the record whose identity is ``fingerprint``.

    ``records`` are the records read from ``window`` on the new cluster (in offset order; for an
    open window, up to the end of what is readable now). The match must be unique: no match in a
    closed window means the record is not where the syncs say it must be (FingerprintNotFound);
    none in an open window means it may not be copied yet (ReplicaPending); two or more means the
    partition holds identical records (same key, value, timestamp and headers) and the written
    one cannot be told apart (AmbiguousFingerprint).

    A unique match in an open window is returned with ``bounded=False``: it is exact unless an
    identical record was written shortly before the last one and only that earlier one is copied
    yet. With an up-to-date history that cannot happen (MM2 syncs the last record of each of its
    transactions, which closes the window); a caller working from an older history and unable to
    rule out identical records re-reads the syncs until the window closes.
    """
    matches: list[tuple[int, int]] = []
    count = 0
    last = None
    for record in records:
        if record.offset not in window or (last is not None and record.offset <= last):
            raise ResumeError(
                f"{partition}: record at offset {record.offset} is outside the re-read window "
                f"{window} or out of order; read exactly the window's records"
            )
        last = record.offset
        count += 1
        if record.fingerprint == fingerprint:
            matches.append((record.offset, count))
    if len(matches) == 1:
        offset, seen = matches[0]
        return ResumePoint(offset + 1, offset, seen, window.closed)
    if matches:
        raise AmbiguousFingerprint(
            f"{partition}: the last written record (fingerprint {fingerprint}) matches "
            f"{len(matches)} records at offsets {[m[0] for m in matches][:10]} of window {window}; "
            "the partition holds identical records and the resume point cannot be told. Resume "
            "this partition by hand (set its position) after checking the tables."
        )
    if window.closed:
        raise FingerprintNotFound(
            f"{partition}: the last written record (fingerprint {fingerprint}) is not among the "
            f"{count} records of window {window}, where MM2's offset syncs place its copy. The "
            "replica was changed in flight (a transform, a LogAppendTime topic) or the syncs "
            "belong to another topic incarnation; nothing was written. Check the replica topic "
            "and the MM2 configuration, then resume this partition by hand."
        )
    raise ReplicaPending(
        f"{partition}: the last written record (fingerprint {fingerprint}) is not among the "
        f"{count} records read from {window}: MirrorMaker 2 has probably not copied it yet. "
        "Nothing was written; wait for replication to catch up (or for the old cluster to come "
        "back) and retry."
    )


__all__ = [
    "DEFAULT_POLICY",
    "AmbiguousFingerprint",
    "FailoverError",
    "FingerprintNotFound",
    "Flow",
    "MirroredRecord",
    "OffsetSync",
    "OffsetSyncDecodeError",
    "PhysicalTopic",
    "ReplicaPending",
    "ReplicationPolicy",
    "ResumeError",
    "ResumePoint",
    "Route",
    "SyncHistory",
    "Translation",
    "Window",
    "decode_offset_sync",
    "encode_offset_sync",
    "physical_topics",
    "record_fingerprint",
    "resume_after",
    "route",
]
