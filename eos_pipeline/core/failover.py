"""Failover and failback across MirrorMaker 2 (MM2), pure (the I/O is
:mod:`eos_pipeline.adapters.failover`).

MM2 copies topic ``T`` of cluster A to ``A.T`` on B (so a pipeline's topic is several physical
topics per cluster) and now and then records an *offset sync*: upstream record ``u`` was written
downstream at ``d``. Between two syncs only the order of records is known.

Invariants, kept by every step below:

1. **Never ahead.** A translated position (forward ``T`` -> ``A.T`` or inverse) comes from the
   latest sync at or before it: it may be behind the true position (records are re-read), never
   ahead (nothing is skipped). The re-read start may be tightened by time: Kafka's offset for
   the last written record's timestamp is never after its copy, since MM2 keeps timestamps.
2. **Exact by identity.** MM2 keeps key, value, timestamp and headers, so the fingerprint of the
   last record written finds its copy in the re-read window; the sink resumes right after it.
   Not found, or found twice: :class:`ResumeError`, never a guess.
3. **Every switch step is re-runnable.** Which cluster is active is keeper state. A switch is
   ``begin`` (record it in flight; sinks refuse to run), ``fence`` (bump every old position's
   epoch; read positions from what the fence took), ``positions`` (store each translated
   position with a pending mark on the new cluster; whole-record overwrites) and ``activate``
   (new active cluster, switch cleared, one write). A Hudi table keeps its position in its
   latest commit and moves by the same rule on its first run after the switch.
4. **Syncs are kept.** The offset-syncs topic is compacted, so :class:`SyncHistory` keeps every
   sync it is given; the adapter decides what to persist.

Replication lag (for failback) is an upper bound from the latest sync, exact when the replica's
last record is found by fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.keeper import KeeperRecord, Mark, validate_cluster
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.positions import SinkState, committed


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


@dataclass(frozen=True)
class ReplicationPolicy:
    """MM2's ``DefaultReplicationPolicy``: a remote topic is ``<source alias>.<topic>``."""

    separator: str = "."

    def remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def source_alias(self, topic: str, aliases: Iterable[str] | None = None) -> str | None:
        """The alias a remote topic came from, else None; with ``aliases`` only a known alias
        counts (MM2 takes any prefix), so ``orders.v1`` is no replica."""
        prefix, sep, rest = topic.partition(self.separator)
        known = aliases is None or prefix in set(aliases)
        return prefix if sep and prefix and rest and known else None

    def offset_syncs_topic(self, other_alias: str) -> str:
        """MM2 names a flow's syncs topic after the flow's *other* cluster."""
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

    def offset_syncs_topic(self, location: str = "source") -> str:
        other = self.target if self.offset_syncs_cluster(location) == self.source else self.source
        return DEFAULT_POLICY.offset_syncs_topic(other)

    def __str__(self) -> str:
        return f"{self.source}->{self.target}"


@dataclass(frozen=True, order=True)
class PhysicalTopic:
    """A topic on ``cluster`` whose records were first written on ``origin`` (``T`` there,
    ``B.T`` elsewhere for ``pipeline_topic`` ``T``)."""

    cluster: str
    topic: str
    origin: str
    pipeline_topic: str

    @property
    def is_local(self) -> bool:
        return self.origin == self.cluster

    def __str__(self) -> str:
        return f"{self.cluster}:{self.topic}"


def check_aliases(clusters: Sequence[str]) -> None:
    if len(clusters) < 2 or len(set(clusters)) != len(clusters):
        raise FailoverError(f"a failover pipeline needs two or more distinct clusters: {clusters}")
    sep = DEFAULT_POLICY.separator
    for alias in clusters:
        if not alias or sep in alias:
            raise FailoverError(f"cluster alias {alias!r} must be non-empty and free of {sep!r}")


def physical_topics(
    pipeline_topic: str, clusters: Sequence[str], active: str
) -> tuple[PhysicalTopic, ...]:
    """Every topic to read on ``active`` for ``pipeline_topic`` (on A: ``T``, ``B.T``); MM2 never
    copies a topic back, so no record is in two of them."""
    check_aliases(clusters)
    policy = DEFAULT_POLICY
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


_KEY_HEAD = struct.Struct(">h")
_PARTITION = struct.Struct(">i")
_VALUE = struct.Struct(">qq")


@dataclass(frozen=True, order=True, slots=True)
class OffsetSync:
    """Upstream record ``upstream`` of ``topic`` (named as on its source) was copied to
    ``downstream``."""

    topic: str
    partition: int
    upstream: int
    downstream: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def decode_offset_sync(key: bytes | None, value: bytes | None) -> OffsetSync:
    """An :class:`OffsetSync` from a record of MM2's offset-syncs topic: key int16 length, UTF-8
    topic, int32 partition; value int64 upstream, int64 downstream; all big-endian.
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


@dataclass(frozen=True, slots=True)
class Translation:
    """A translated position (invariant 1), ``exact`` when it fell on a sync; ``basis``: the sync
    used (None: none precedes, the caller's floor)."""

    position: int
    exact: bool
    basis: OffsetSync | None


@dataclass(frozen=True, slots=True)
class Window:
    """Offsets ``[start, end)`` that must hold a record's counterpart on the other cluster (``end``
    None: no later sync bounds it yet)."""

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


def _bracket(tp: TopicPartition, entry: _Syncs, x: int, floor: int, *, up: bool) -> Window:
    """Where the counterpart of the record at ``x`` is: from its translation to the next sync."""
    start = _translate(tp, entry, x, floor, up=up)
    if start.exact:
        return Window(start.position, start.position + 1)
    keys, values = (entry.ups, entry.downs) if up else (entry.downs, entry.ups)
    i = bisect_right(keys, x)
    return Window(start.position, values[i] if i < len(keys) else None)


class SyncHistory:
    """Every offset sync of one flow (invariant 4), in the syncs topic's order. A sync going back
    in either offset (topic recreated, replica truncated) drops the partition's older syncs, as
    MM2 does. ``source_position``: the next offset of the syncs topic to fold in."""

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

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._by_tp)

    def syncs(self, tp: TopicPartition) -> list[OffsetSync]:
        entry = self._entry(tp)
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
        """JSON-ready, to keep the history beyond what the compacted topic keeps."""
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
        """A copy with each partition's ``keep`` latest syncs: an older position then translates
        to the caller's floor (more re-read, never a skip)."""
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
        """The downstream position for an upstream one, by the latest sync at or before it."""
        return _translate(tp, self._entry(tp), upstream_position, floor, up=True)

    def inverse(self, tp: TopicPartition, downstream_position: int, floor: int = 0) -> Translation:
        """:meth:`forward`'s mirror image: a copy consumed means its original was too."""
        return _translate(tp, self._entry(tp), downstream_position, floor, up=False)

    def replica_window(self, tp: TopicPartition, upstream_offset: int, floor: int = 0) -> Window:
        return _bracket(tp, self._entry(tp), upstream_offset, floor, up=True)

    def origin_window(self, tp: TopicPartition, downstream_offset: int, floor: int = 0) -> Window:
        return _bracket(tp, self._entry(tp), downstream_offset, floor, up=False)


@dataclass(frozen=True)
class Route:
    """How positions of ``source`` map onto ``target``: ``forward`` (originals to copies) or
    ``inverse``; syncs are keyed by the pipeline topic."""

    source: PhysicalTopic
    target: PhysicalTopic
    flow: Flow
    direction: Literal["forward", "inverse"]

    def translate(
        self, history: SyncHistory, partition: int, position: int, floor: int = 0
    ) -> Translation:
        way = history.forward if self.direction == "forward" else history.inverse
        return way(self._key(history, partition), position, floor)

    def window(self, history: SyncHistory, partition: int, offset: int, floor: int = 0) -> Window:
        """Where on ``target`` the counterpart of the record at ``offset`` of ``source`` lies."""
        way = history.replica_window if self.direction == "forward" else history.origin_window
        return way(self._key(history, partition), offset, floor)

    def _key(self, history: SyncHistory, partition: int) -> TopicPartition:
        if history.flow != self.flow:
            raise FailoverError(
                f"route {self.source} -> {self.target} translates with the syncs of flow "
                f"{self.flow}, got a history of flow {history.flow}"
            )
        return TopicPartition(self.source.pipeline_topic, partition)


def route(physical: PhysicalTopic, to_cluster: str, clusters: Sequence[str]) -> Route:
    """``T`` read on C is ``C.T`` on D (forward through C->D); ``D.T`` read on C is D's ``T``
    (inverse through D->C); a third cluster's replica has no direct syncs to D: refused."""
    check_aliases(clusters)
    if to_cluster not in clusters:
        raise FailoverError(
            f"unknown cluster {to_cluster!r}: the pipeline's clusters are {clusters}"
        )
    if to_cluster == physical.cluster:
        raise FailoverError(f"{physical} is already on cluster {to_cluster!r}: nothing to route")
    base = physical.pipeline_topic
    if physical.is_local:
        target = PhysicalTopic(
            to_cluster, DEFAULT_POLICY.remote_topic(physical.cluster, base), physical.cluster, base
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


#: The re-read starts where the offset syncs put it.
SYNCS = "syncs"
#: The re-read starts at the first offset at the last written record's timestamp.
TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class ReadStart:
    """Where the re-read starts, which bound set it, and where the syncs alone would start."""

    position: int
    bound: str
    syncs_position: int


def read_start(window: Window, time_offset: int | None) -> ReadStart:
    """The later of the window's start and ``time_offset`` (the first offset at the last written
    record's timestamp). Trusted only inside the window: past it, timestamps were not kept."""
    if time_offset is not None and time_offset > window.start and time_offset in window:
        return ReadStart(time_offset, TIMESTAMP, window.start)
    return ReadStart(window.start, SYNCS, window.start)


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
    """A record's identity across clusters: BLAKE2b-128 of what MM2 copies unchanged (key, value,
    timestamp, headers in order), never its offset."""
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
    """A record as read on either cluster: its offset there and what MM2 preserves."""

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
    """Where to continue on the new cluster (match + 1); ``skipped``: the window's records up to
    the match, all written before the switch; ``bounded``: False for an open window."""

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
    """The next position after the record ``fingerprint`` names, among ``records`` (``window``'s
    on the new cluster, in order), by invariant 2. A unique match in an open window is exact unless
    only an identical earlier record is copied yet, which an up-to-date history rules out (MM2
    syncs each transaction's last record, closing the window)."""
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


STATE_VERSION = 1
STEPS = ("begin", "fence", "positions", "activate")


class SwitchRefused(FailoverError):
    """The switch cannot start as asked; nothing was changed."""


@dataclass(frozen=True, slots=True)
class SwitchInFlight:
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class ActiveState:
    """The keeper's word on which cluster a pipeline reads, and the switch in flight if any."""

    active: str
    switch: SwitchInFlight | None = None
    switches: int = 0

    def encode(self) -> bytes:
        switch = None if self.switch is None else [self.switch.source, self.switch.target]
        body = {
            "v": STATE_VERSION,
            "active": self.active,
            "switch": switch,
            "switches": self.switches,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, path: str) -> ActiveState:
        try:
            raw = json.loads(data.decode())
            if raw.get("v") != STATE_VERSION:
                raise ValueError(f"unknown version {raw.get('v')!r}")
            switch = raw["switch"]
            return cls(
                str(raw["active"]),
                None if switch is None else SwitchInFlight(str(switch[0]), str(switch[1])),
                int(raw["switches"]),
            )
        except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise FailoverError(f"corrupt failover state at {path}: {exc}") from None

    def begun(self, target: str) -> ActiveState:
        return ActiveState(self.active, SwitchInFlight(self.active, target), self.switches)

    def finished(self) -> ActiveState:
        assert self.switch is not None
        return ActiveState(self.switch.target, None, self.switches + 1)


@dataclass(frozen=True, slots=True)
class ClusterSet:
    """A pipeline's clusters (aliases, in configured order) and the flows MM2 replicates."""

    aliases: tuple[str, ...]
    flows: frozenset[Flow]

    @classmethod
    def both_ways(cls, aliases: Sequence[str]) -> ClusterSet:
        pairs = {Flow(a, b) for a in aliases for b in aliases if a != b}
        return cls(tuple(aliases), frozenset(pairs))

    @classmethod
    def parse(cls, aliases: Sequence[str], flows: Sequence[str] | None = None) -> ClusterSet:
        """Flows are written ``"A->B"``; None: every pair, both ways."""
        if len(aliases) < 2 or len(set(aliases)) != len(aliases):
            raise FailoverError(f"name two or more distinct clusters, got {list(aliases)}")
        for alias in aliases:
            validate_cluster(alias)
        if flows is None:
            return cls.both_ways(aliases)
        parsed = set()
        for text in flows:
            source, sep, target = text.partition("->")
            if not sep or source not in aliases or target not in aliases:
                raise FailoverError(f"flow {text!r} is not '<alias>-><alias>' of {list(aliases)}")
            parsed.add(Flow(source, target))
        return cls(tuple(aliases), frozenset(parsed))

    def route(self, physical: PhysicalTopic, to_cluster: str) -> Route:
        return route(physical, to_cluster, self.aliases)

    def topics(self, pipeline_topic: str, active: str) -> tuple[PhysicalTopic, ...]:
        """The local topic and each replica MM2 makes on ``active``."""
        return tuple(
            t
            for t in physical_topics(pipeline_topic, self.aliases, active)
            if t.is_local or Flow(t.origin, active) in self.flows
        )


@dataclass(frozen=True, slots=True)
class SwitchPlan:
    """What a run of the switch must still do (no ``steps``: nothing)."""

    source: str
    target: str
    steps: tuple[str, ...]


def plan_switch(state: ActiveState, clusters: ClusterSet, target: str) -> SwitchPlan:
    if target not in clusters.aliases:
        raise SwitchRefused(
            f"unknown cluster {target!r}: this pipeline's clusters are {list(clusters.aliases)}"
        )
    if state.switch is not None:
        if state.switch.target != target:
            raise SwitchRefused(
                f"a switch {state.switch.source} -> {state.switch.target} is in flight; finish "
                f"it first (rerun the failover to {state.switch.target!r}), then switch again"
            )
        return SwitchPlan(state.switch.source, target, STEPS[1:])
    if state.active == target:
        return SwitchPlan(target, target, ())
    if Flow(state.active, target) not in clusters.flows:
        raise SwitchRefused(
            f"MirrorMaker 2 does not replicate {state.active} -> {target} for this pipeline "
            f"(flows: {sorted(str(f) for f in clusters.flows)}): the records written on "
            f"{state.active!r} would not be on {target!r}"
        )
    return SwitchPlan(state.active, target, STEPS)


@dataclass(frozen=True, slots=True)
class Move:
    """One partition's position carried from ``route.source`` to ``route.target``; ``bound`` and
    ``syncs_position`` as in :class:`ReadStart`."""

    route: Route
    partition: int
    position: int
    mark: Mark | None
    bound: str = SYNCS
    syncs_position: int | None = None


def move(
    physical: PhysicalTopic,
    partition: int,
    record: KeeperRecord,
    to_cluster: str,
    clusters: ClusterSet,
    history: SyncHistory,
    floor: int = 0,
    time_offset: int | None = None,
) -> Move:
    """The position on ``to_cluster`` for a settled keeper position on ``physical``."""
    if record.phase == "BEFORE":  # only a settled position moves
        raise SwitchRefused(
            f"{physical}[{partition}]: a write is in flight (BEFORE {record.range_start}-"
            f"{record.range_end}); run the sink on the active cluster once so it finishes, "
            "then switch"
        )
    return move_position(
        physical,
        partition,
        record.range_end or 0,
        record.mark,
        to_cluster,
        clusters,
        history,
        floor,
        time_offset,
    )


def move_position(
    physical: PhysicalTopic,
    partition: int,
    end: int,
    mark: Mark | None,
    to_cluster: str,
    clusters: ClusterSet,
    history: SyncHistory,
    floor: int = 0,
    time_offset: int | None = None,
) -> Move:
    """A position (next offset ``end``) moved to ``to_cluster``: with a located mark, to the start
    of the window holding its copy (invariant 1; ``time_offset`` may start it later); a pending
    mark is carried with an open window; without a mark, only an exact translation."""
    where = f"{physical}[{partition}]"
    r = clusters.route(physical, to_cluster)
    if r.flow not in clusters.flows:
        raise SwitchRefused(
            f"{where}: positions move through flow {r.flow}, which MirrorMaker 2 does not "
            "replicate for this pipeline"
        )
    if mark is not None:
        if mark.last_offset is not None:
            window = r.window(history, partition, mark.last_offset, floor)
        else:  # still pending: its copy is somewhere after the translated position
            window = Window(r.translate(history, partition, end, floor).position, None)
        start = read_start(window, time_offset if mark.timestamp_ms is not None else None)
        pending = Mark(mark.fingerprint, None, window.end, mark.timestamp_ms)
        return Move(r, partition, start.position, pending, start.bound, start.syncs_position)
    translation = r.translate(history, partition, end, floor)
    if end == 0 or translation.exact:
        return Move(r, partition, translation.position, None, SYNCS, translation.position)
    raise SwitchRefused(
        f"{where}: the position {end} has no fingerprint of the last record written (it was "
        "stored before fingerprints were kept) and no offset sync lands on it exactly; run "
        "the sink once on the active cluster to store one, then switch"
    )


FORMAT_VERSION = 1


class TablePositionError(FailoverError):
    """A table's cluster position is malformed or cannot be moved as asked."""


@dataclass(frozen=True)
class TablePosition:
    """Where a table stands on one cluster: next offset and last-written mark per partition.
    ``since``: where its records on this cluster start (the exactly-once check compares
    ``[since, position)``; missing: written before clusters were configured)."""

    cluster: str
    positions: Mapping[TopicPartition, int]
    marks: Mapping[TopicPartition, Mark] = field(default_factory=dict)
    since: Mapping[TopicPartition, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_cluster(self.cluster)
        for tp, offset in [*self.positions.items(), *self.since.items()]:
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
        return {tp: m for tp, m in self.marks.items() if m.pending}

    def encode(self) -> str:
        """Sorted, compact JSON: the same position is always the same text."""
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
        """``positions`` moved, ``marks`` replaced (None: dropped), ``since`` set."""
        merged = {**self.positions, **positions}
        new_marks = {tp: m for tp, m in {**self.marks, **marks}.items() if m is not None}
        return TablePosition(self.cluster, merged, new_marks, {**self.since, **(since or {})})


def stored_position(
    cluster_position: str | None, checkpoint: Mapping[TopicPartition, int], initial: str
) -> TablePosition:
    """A commit's cluster position; a plain checkpoint (an older table) is on ``initial``."""
    if cluster_position is not None:
        return TablePosition.decode(cluster_position)
    return TablePosition(initial, dict(checkpoint))


#: Kafka topic names never contain it, so ``<cluster>:<topic>`` reads back unambiguously.
ROW_TOPIC_SEPARATOR = ":"


def row_topic(cluster: str, topic: str) -> str:
    """The source topic a clustered table stores: ``T`` on A is not ``T`` on B."""
    return f"{cluster}{ROW_TOPIC_SEPARATOR}{topic}"


def streamer_checkpoint(
    pipeline_topic: str, position: TablePosition, partition_count: int
) -> Checkpoint:
    """The HoodieStreamer checkpoint a clustered commit also carries (timeline readers look only
    at commits with one): a summary; the sink resumes from the cluster position."""
    tps = (TopicPartition(pipeline_topic, p) for p in range(partition_count))
    return {tp: position.positions.get(tp, 0) for tp in tps}


def physical_of(
    tp: TopicPartition, cluster: str, clusters: ClusterSet, pipeline_topics: Iterable[str]
) -> PhysicalTopic:
    for topic in pipeline_topics:
        # every name a replica could have, replicated or not: a flow no longer replicated is
        # refused by the move, with the flow named
        for physical in physical_topics(topic, clusters.aliases, cluster):
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
        clusters.route(physical_of(tp, position.cluster, clusters, topics), target).flow
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
    """The table's position moved to ``target`` partition by partition. ``floor``: a partition's
    first offset; ``time_floor``: its first offset at a mark's timestamp (None: syncs alone)."""
    if target == position.cluster:
        return position, []
    topics = tuple(pipeline_topics)
    moved: dict[TopicPartition, int] = {}
    marks: dict[TopicPartition, Mark] = {}
    moves = []
    for tp in sorted(position.positions):
        physical = physical_of(tp, position.cluster, clusters, topics)
        r = clusters.route(physical, target)
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


CAUGHT_UP = "caught up"
REPLICATING = "replicating"
STALLED = "stalled"
UNREACHABLE = "unreachable"

#: A sync younger than this (seconds) shows MM2 at work, by default.
FRESH_SYNC_S = 60.0


@dataclass(frozen=True, slots=True)
class ReplicaFacts:
    """What was read of one replicated partition (``topic`` as named on the flow's source)."""

    topic: str
    partition: int
    source_end: int
    remote_end: int
    synced_to: int
    copied_to: int | None = None
    #: Records (not offsets: transaction markers excluded) of the source not copied yet, when
    #: they were counted; None: only offsets are known.
    uncopied_records: int | None = None
    last_sync: tuple[int, int] | None = None
    sync_age_s: float | None = None
    remote_moved: bool = False


@dataclass(frozen=True, slots=True)
class PartitionReplication:
    facts: ReplicaFacts
    #: Records (or offsets, see ``exact``) of the source not on the target yet.
    lag: int
    #: True when the lag is counted from the replica's last record; False: an upper bound.
    exact: bool
    state: str


def partition_replication(
    facts: ReplicaFacts, fresh_s: float = FRESH_SYNC_S
) -> PartitionReplication:
    """Caught up when nothing of the source is missing on the target; else replicating when the
    replica's end moved or MM2 synced within ``fresh_s``; else stalled."""
    exact = facts.copied_to is not None
    copied = facts.copied_to if facts.copied_to is not None else facts.synced_to
    lag = max(0, facts.source_end - copied)
    if exact and facts.uncopied_records is not None:
        lag = facts.uncopied_records
    if lag == 0:
        state = CAUGHT_UP
    elif facts.remote_moved or (facts.sync_age_s is not None and facts.sync_age_s <= fresh_s):
        state = REPLICATING
    else:
        state = STALLED
    return PartitionReplication(facts, lag, exact, state)


@dataclass(frozen=True, slots=True)
class FlowReplication:
    """One direction: its partitions, or why it could not be read (a cluster unreachable)."""

    flow: Flow
    partitions: tuple[PartitionReplication, ...] = ()
    #: Per cluster alias that did not answer: the endpoint and the cause.
    unreachable: tuple[tuple[str, str], ...] = ()
    #: Partitions holding records whose replica does not exist yet (MM2 has not created it).
    missing: tuple[str, ...] = ()
    #: Pipeline topics the flow's source does not have: nothing to copy.
    absent: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        if self.unreachable:
            return UNREACHABLE
        states = {p.state for p in self.partitions}
        if STALLED in states or self.missing:
            return STALLED
        if REPLICATING in states:
            return REPLICATING
        return CAUGHT_UP

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


def failback_advice(active: str, flows: Sequence[FlowReplication]) -> list[str]:
    """Per cluster a failback could go to: whether it would wait for MM2, and why (failing back
    early loses nothing; records not copied yet are only delayed)."""
    advice = []
    for f in flows:
        if f.flow.source != active:
            continue
        to = f.flow.target
        state = f.state
        if state == CAUGHT_UP:
            advice.append(f"a switch to {to} need not wait: {f.flow} has copied everything")
        elif state == UNREACHABLE:
            names = ", ".join(alias for alias, _ in f.unreachable)
            advice.append(f"a switch to {to} must wait: {names} unreachable, {f.flow} unknown")
        elif state == REPLICATING:
            advice.append(
                f"a switch to {to} would wait for {f.lag} records MM2 is still copying on "
                f"{f.flow}; check again shortly"
            )
        else:
            advice.append(
                f"a switch to {to} would wait for {f.lag} records: MM2 is not copying {f.flow} "
                "(no sync lately, the replica does not move); restart it (local stack: "
                "`eos-pipeline stack restart-mirror`)"
            )
    return advice


def _behind(end: int, position: int | None) -> int:
    # Nothing stored counts from offset 0: a run then starts wherever the reset policy says,
    # and a needless run (an emptied log) reads nothing and stores the position.
    return end - (position or 0)


def fold_keeper_states(
    physical: Iterable[tuple[int, SinkState | None]],
) -> tuple[int, SinkState | None]:
    """The sensors see one state per Dagster partition: of its physical partitions, the one that
    most needs a run (``BEFORE`` first); none at all is a ``ValueError``."""

    def urgency(item: tuple[int, SinkState | None]) -> tuple[bool, int]:
        end, state = item
        before = state is not None and state.phase is Phase.BEFORE
        return before, _behind(end, committed(state))

    return max(physical, key=urgency)


def fold_positions(
    physical: Mapping[int, Iterable[tuple[int, int | None]]], moved: bool
) -> tuple[dict[int, int], dict[int, int]]:
    """Per partition ``(ends, positions)``, each the physical topic furthest behind (``physical``:
    partition -> ``(end, next offset or None)`` per topic); ``moved``: the latest commit is on
    another cluster."""
    ends: dict[int, int] = {}
    positions: dict[int, int] = {}
    for p, items in physical.items():
        listed = list(items)
        if not listed:
            continue
        if moved:
            ends[p], positions[p] = 1, 0  # behind by construction until a run moves the table
            continue
        end, position = max(listed, key=lambda item: _behind(*item))
        ends[p] = end
        if position is not None:
            positions[p] = position
    return ends, positions
