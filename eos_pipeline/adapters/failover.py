"""Failover's I/O: the core's plan (:mod:`eos_pipeline.core.failover`) run against ZooKeeper and
Kafka.

:func:`switch` checks everything it can before its first write (replicated flows, no switch in
flight, each bounded mark's copy present, the Hudi table able to move), so a refused switch changes
nothing and a rerun after a crash ends as an uninterrupted switch would. Keeper layout:
``<root>/<pipeline>/@failover`` (active cluster), ``.../@syncs/<source>.<target>``
(:class:`SyncArchive`).

MM2 keeps a flow's offset syncs in a compacted topic on the flow's source, unreadable while that
cluster is down: hence the archive, refreshed by every run on the active cluster
(:func:`record_syncs`) and read by a switch that cannot reach the topic.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field, replace

from confluent_kafka import Consumer, IsolationLevel, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from eos_pipeline.adapters import hudi_timeline
from eos_pipeline.adapters.kafka import (
    KafkaReadError,
    KafkaSettings,
    TopicMissingError,
    admin_client,
    end_offsets_of,
    ends_and_starts,
    partition_count,
    range_consumer,
    read_range,
)
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.failover import (
    DEFAULT_POLICY,
    FRESH_SYNC_S,
    ActiveState,
    ClusterSet,
    FailoverError,
    Flow,
    FlowReplication,
    MirroredRecord,
    Move,
    PhysicalTopic,
    ReplicaFacts,
    ResumeError,
    SwitchRefused,
    SyncHistory,
    TablePosition,
    Window,
    carry_over,
    decode_offset_sync,
    failback_advice,
    flows_needed,
    move,
    partition_replication,
    plan_switch,
    resume_after,
    stored_position,
)
from eos_pipeline.core.keeper import KeeperKey, KeeperRecord, Mark
from eos_pipeline.core.offsets import OffsetRange, TopicPartition

log = logging.getLogger(__name__)

SYNCS_PARTITION = 0  # MM2 writes every sync of a flow to partition 0 of its syncs topic
#: How long a sequence of reads (a switch, a status) waits for a cluster's first answer before
#: it counts that cluster as down for the rest of the sequence.
PROBE_TIMEOUT = 3.0


class MirrorReadError(KafkaReadError):
    """The offset syncs or a re-read window could not be read as asked."""


def _cluster_key(settings: KafkaSettings) -> str:
    return repr(sorted(settings.config().items()))


class MirrorReaders(ExitStack):
    """One consumer and admin client per cluster for a sequence of reads, closed together: a fresh
    consumer's bootstrap was two thirds of a profiled failback."""

    def __init__(self, probe_timeout: float = PROBE_TIMEOUT) -> None:
        super().__init__()
        self.probe_timeout = probe_timeout
        self._consumers: dict[str, Consumer] = {}
        self._admins: dict[str, AdminClient] = {}
        self._answered: dict[str, str | None] = {}

    def unreachable(self, settings: KafkaSettings) -> str | None:
        """Why the cluster did not answer one metadata request (None: it did), asked once per
        cluster: a dead cluster costs one short wait per sequence."""
        key = _cluster_key(settings)
        if key not in self._answered:
            try:
                self.get(settings).list_topics(timeout=self.probe_timeout)
                self._answered[key] = None
            except KafkaException as exc:
                self._answered[key] = (
                    f"Kafka at {settings.bootstrap_servers} did not answer within "
                    f"{self.probe_timeout:g} s ({exc.args[0] if exc.args else exc})"
                )
        return self._answered[key]

    def get(self, settings: KafkaSettings) -> Consumer:
        key = _cluster_key(settings)
        if key not in self._consumers:
            self._consumers[key] = self.enter_context(range_consumer(settings))
        return self._consumers[key]

    def admin(self, settings: KafkaSettings) -> AdminClient:
        key = _cluster_key(settings)
        if key not in self._admins:
            self._admins[key] = admin_client(settings)
        return self._admins[key]


def _borrowed(
    settings: KafkaSettings, consumer: Consumer | None
) -> AbstractContextManager[Consumer]:
    """``consumer`` left open, or a consumer of this call only."""
    return nullcontext(consumer) if consumer is not None else range_consumer(settings)


def _watermarks(consumer: Consumer, topic: str, partition: int, timeout: float) -> tuple[int, int]:
    meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None or partition not in meta.partitions:
        raise MirrorReadError(f"{topic}[{partition}] does not exist")
    low, high = consumer.get_watermark_offsets(
        KafkaTopicPartition(topic, partition), timeout=timeout, cached=False
    )
    return int(low), int(high)


def _consume(
    settings: KafkaSettings,
    consumer: Consumer,
    tp: TopicPartition,
    start: int,
    end: int,
    timeout: float,
) -> list[MirroredRecord]:
    """Every record of ``[start, end)`` (``end`` at most the last stable offset)."""
    try:
        batch = read_range(
            settings, tp, OffsetRange(start, max(start, end)), timeout=timeout, consumer=consumer
        )
    except KafkaReadError as exc:  # a MirrorReadError lets a switch fall back on the archive
        raise MirrorReadError(str(exc)) from exc
    return [
        MirroredRecord(
            offset, batch.keys[i], batch.values[i], batch.timestamps_ms[i], batch.headers.get(i, ())
        )
        for i, offset in enumerate(batch.offsets)
    ]


def read_offset_syncs(
    settings: KafkaSettings,
    flow: Flow,
    history: SyncHistory | None = None,
    *,
    location: str = "source",
    timeout: float = 30.0,
    consumer: Consumer | None = None,
    written_at: dict[TopicPartition, int] | None = None,
) -> SyncHistory:
    """Fold the syncs written since ``history.source_position`` into ``history`` (new if None), now
    at the topic's end; ``written_at`` gets when MM2 wrote each partition's latest sync (ms)."""
    history = history if history is not None else SyncHistory(flow)
    if history.flow != flow:
        raise MirrorReadError(f"a history of flow {history.flow} cannot take syncs of {flow}")
    topic = flow.offset_syncs_topic(location)
    with _borrowed(settings, consumer) as consumer:
        try:
            low, high = _watermarks(consumer, topic, SYNCS_PARTITION, timeout)
        except MirrorReadError:
            raise MirrorReadError(
                f"offset-syncs topic {topic!r} of flow {flow} not found on "
                f"{settings.bootstrap_servers}: MM2 has not replicated anything on this flow yet, "
                f"or its offset-syncs.topic.location is not {location!r}"
            ) from None
        tp = TopicPartition(topic, SYNCS_PARTITION)
        start = max(history.source_position, low)
        for record in _consume(settings, consumer, tp, start, high, timeout):
            sync = decode_offset_sync(record.key, record.value)
            history.add(sync)
            if written_at is not None:
                written_at[sync.tp] = record.timestamp_ms
        history.source_position = max(history.source_position, high)
    return history


def read_window(
    settings: KafkaSettings,
    tp: TopicPartition,
    window: Window,
    *,
    timeout: float = 60.0,
    consumer: Consumer | None = None,
    admin: AdminClient | None = None,
) -> list[MirroredRecord]:
    """The committed records of ``tp`` in ``window`` (an open one to the stable end), from no
    earlier than the partition's first offset (what retention removed is reported not found)."""
    with _borrowed(settings, consumer) as consumer:
        low, _ = _watermarks(consumer, tp.topic, tp.partition, timeout)
        # through the sequence's client: a cached one would keep reconnecting to a lost cluster
        admin = admin if admin is not None else admin_client(settings)
        stable = _list_offset(admin, tp, OffsetSpec.latest(), timeout)
        end = stable if window.end is None else min(window.end, stable)
        return _consume(settings, consumer, tp, max(window.start, low), end, timeout)


def _list_offset(admin: AdminClient, tp: TopicPartition, spec: OffsetSpec, timeout: float) -> int:
    future = admin.list_offsets(
        {KafkaTopicPartition(tp.topic, tp.partition): spec},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=timeout,
    )
    [result] = future.values()
    return int(result.result().offset)


def first_offset(
    settings: KafkaSettings,
    tp: TopicPartition,
    timeout: float = 10.0,
    *,
    consumer: Consumer | None = None,
) -> int:
    """The partition's first offset still held (the floor of a translation onto it)."""
    with _borrowed(settings, consumer) as consumer:
        return _watermarks(consumer, tp.topic, tp.partition, timeout)[0]


def _timestamps_kept(admin: AdminClient, topic: str) -> bool:
    """``LogAppendTime`` restamps MM2's copies; a config that cannot be read counts as that."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=10.0)
        entry = entries[resource].result().get("message.timestamp.type")
    except Exception as exc:  # any failure: do not rely on timestamps
        log.warning("%s: timestamp type unknown (%s); the offset syncs alone bound", topic, exc)
        return False
    return entry is not None and entry.value == "CreateTime"


#: Called with the name of each step boundary of the switch (the fault suite kills there).
SwitchHook = Callable[[str], None]


def _no_hook(step: str) -> None:
    """Nothing happens at a step boundary."""


@dataclass(frozen=True)
class FailoverPipeline:
    """What the switch needs to know about one pipeline (built from its configuration)."""

    name: str
    topics: tuple[str, ...]
    sinks: tuple[str, ...]
    clusters: ClusterSet
    settings: dict[str, KafkaSettings]
    #: The cluster read before any switch (the configured ``bootstrap_servers``).
    initial: str
    #: MM2's ``offset-syncs.topic.location``.
    offset_syncs_location: str = "source"
    #: The pipeline's Hudi table, checked by the switch (it moves on its own next run).
    hudi_table: str | None = None

    def copies(self, topic: str) -> Iterator[tuple[str, KafkaSettings, PhysicalTopic]]:
        """Each cluster's copies of ``topic`` (its own and the replicas MM2 makes there), in
        configured order: what a proof over every cluster reads."""
        for alias in self.clusters.aliases:
            for physical in self.clusters.topics(topic, alias):
                yield alias, self.settings[alias], physical


class SwitchInProgress(FailoverError):
    """A sink was asked to run while a switch is in flight."""


class FailoverStates:
    """The active-cluster node of each pipeline, moved only by compare-and-set."""

    def __init__(self, store: KeeperStateStore) -> None:
        self.store = store

    def path(self, pipeline: str) -> str:
        return f"{self.store.settings.root}/{pipeline}/@failover"

    def read(self, pipeline: str, initial: str) -> tuple[ActiveState, int | None]:
        """The stored state and its znode version; never switched: ``initial``, version None."""
        path = self.path(pipeline)
        try:
            data, stat = self.store.client.get(path)
        except NoNodeError:
            return ActiveState(initial), None
        return ActiveState.decode(data, path), stat.version

    def write(self, pipeline: str, state: ActiveState, version: int | None) -> int:
        """Store ``state`` if the node is still at ``version``; returns the new version."""
        path = self.path(pipeline)
        try:
            if version is None:
                self.store.client.create(path, state.encode(), makepath=True)
                return 0
            return int(self.store.client.set(path, state.encode(), version=version).version)
        except (BadVersionError, NodeExistsError):
            raise SwitchRefused(
                f"{pipeline}: the failover state changed under this switch (another switch "
                "ran at the same time); nothing more was written, rerun to see where it stands"
            ) from None

    def active(self, pipeline: str, initial: str) -> str:
        """The cluster to read now; refuses while a switch is in flight."""
        state, _ = self.read(pipeline, initial)
        if state.switch is not None:
            raise SwitchInProgress(
                f"{pipeline}: a switch {state.switch.source} -> {state.switch.target} is in "
                f"flight; run `eos-pipeline failover --pipeline {pipeline} --to "
                f"{state.switch.target}` to finish it"
            )
        return state.active


@dataclass
class SwitchReport:
    pipeline: str
    source: str
    target: str
    steps: tuple[str, ...]
    moves: list[Move] = field(default_factory=list)
    #: Per target partition (``cluster:topic[partition]``, Hudi's prefixed ``hudi``): records the
    #: check read in the mark's window, and how many of them precede the copy (re-read, skipped).
    checked: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Per moved position with a mark (same keys): where its re-read starts and which bound
    #: (``"timestamp"`` or ``"syncs"``) set that.
    starts: dict[str, dict[str, object]] = field(default_factory=dict)
    seconds: float = 0.0

    def reread(self) -> dict[str, int]:
        """Per partition, the records from the re-read start through the copy (skipped)."""
        return {k: through for k, (_, through) in self.checked.items()}

    def past_copy(self) -> dict[str, int]:
        """Per partition, the records after the copy the check read up to the window's end."""
        return {k: read - through for k, (read, through) in self.checked.items()}


def _positions(
    store: KeeperStateStore, fp: FailoverPipeline, cluster: str
) -> list[tuple[str, PhysicalTopic, int, KeeperRecord]]:
    found = []
    for sink in fp.sinks:
        for topic in fp.topics:
            for physical in fp.clusters.topics(topic, cluster):
                records = store.read_many(fp.name, sink, physical.topic, cluster)
                for partition, versioned in sorted(records.items()):
                    if versioned.record.has_state:
                        found.append((sink, physical, partition, versioned.record))
    return found


def _histories(
    store: KeeperStateStore, fp: FailoverPipeline, flows: set[Flow], readers: MirrorReaders
) -> dict[Flow, SyncHistory]:
    """Each flow's syncs (:func:`refresh`); one MM2 does not replicate is empty, and the move
    refuses it by name."""
    return {
        f: refresh(store, fp, f, readers) if f in fp.clusters.flows else SyncHistory(f)
        for f in sorted(flows)
    }


def _floors(
    fp: FailoverPipeline, target: str, readers: MirrorReaders, refuse: Callable[[str], Exception]
) -> tuple[Callable[[TopicPartition], int], Callable[[TopicPartition, Mark], int | None]]:
    """Where a translation onto ``target`` may start: a partition's first offset (``refuse``
    makes the error when it cannot be read: MM2 may not have created the replica yet), and its
    first offset at a mark's timestamp, the time bound of
    :func:`~eos_pipeline.core.failover.read_start` (None where it must not be used)."""
    settings = fp.settings[target]
    admin = readers.admin(settings)
    kept: dict[str, bool] = {}  # per topic, whether its timestamps are the originals'

    def floor(tp: TopicPartition) -> int:
        try:
            return first_offset(settings, tp, consumer=readers.get(settings))
        except Exception as exc:
            raise refuse(
                f"{target}:{tp} cannot be read ({exc}); is MirrorMaker 2 replicating to {target!r}?"
            ) from None

    def at_time(tp: TopicPartition, mark: Mark) -> int | None:
        if mark.timestamp_ms is None:
            return None
        if tp.topic not in kept:
            kept[tp.topic] = _timestamps_kept(admin, tp.topic)
        if not kept[tp.topic]:
            return None
        try:
            offset = _list_offset(admin, tp, OffsetSpec.for_timestamp(mark.timestamp_ms), 10.0)
        except Exception as exc:  # the syncs still bound the window
            log.warning(
                "%s: no offset for time %d (%s); the offset syncs alone bound",
                tp,
                mark.timestamp_ms,
                exc,
            )
            return None
        # -1: none so late. Markers count (stamped at commit): maybe before the record, not after.
        return offset if offset >= 0 else None

    return floor, at_time


def carry_table(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    stored: TablePosition,
    target: str,
    topic: str,
    readers: MirrorReaders,
    refuse: Callable[[str], Exception],
) -> tuple[TablePosition, list[Move]]:
    """The core's :func:`~eos_pipeline.core.failover.carry_over` of a Hudi table's position on
    ``target``'s Kafka; ``refuse`` as in :func:`_floors`."""
    topics = (topic,)
    histories = _histories(store, fp, flows_needed(stored, target, fp.clusters, topics), readers)
    floor, time_floor = _floors(fp, target, readers, refuse)
    return carry_over(stored, target, fp.clusters, topics, histories, floor, time_floor)


def _plan_moves(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    positions: list[tuple[str, PhysicalTopic, int, KeeperRecord]],
    target: str,
    readers: MirrorReaders,
) -> list[tuple[str, Move]]:
    routes = [fp.clusters.route(p, target) for _, p, _, _ in positions]
    histories = _histories(store, fp, {r.flow for r in routes}, readers)
    floor, time_floor = _floors(fp, target, readers, SwitchRefused)
    moves = []
    for (sink, physical, p, record), r in zip(positions, routes, strict=True):
        tp = TopicPartition(r.target.topic, p)
        low = floor(tp)  # first: a missing replica refuses before its time is asked
        at_time = None if record.mark is None else time_floor(tp, record.mark)
        m = move(physical, p, record, target, fp.clusters, histories[r.flow], low, at_time)
        moves.append((sink, m))
    return moves


def _check_marks(
    fp: FailoverPipeline,
    moves: list[Move],
    readers: MirrorReaders,
    report: SwitchReport,
    prefix: str = "",
) -> None:
    """Find each bounded mark's copy now, so that a missing one refuses the switch up front."""
    for m in moves:
        if m.mark is None:
            continue
        key = f"{prefix}{m.route.target}[{m.partition}]"
        report.starts[key] = {
            "start": m.position,
            "bound": m.bound,
            "syncs_start": m.syncs_position,
        }
        if m.mark.window_end is None:
            continue
        tp = TopicPartition(m.route.target.topic, m.partition)
        window = Window(m.position, m.mark.window_end)
        settings = fp.settings[m.route.target.cluster]
        records = read_window(
            settings, tp, window, consumer=readers.get(settings), admin=readers.admin(settings)
        )
        point = resume_after(tp, m.mark.fingerprint, records, window)
        report.checked[key] = (len(records), point.skipped)


def _check_hudi_table(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    target: str,
    readers: MirrorReaders,
    report: SwitchReport,
) -> None:
    """Refuse (``SwitchRefused``, core errors) if the Hudi table's position cannot move to
    ``target``; the table moves on its own at its next run."""
    assert fp.hudi_table is not None
    commit = hudi_timeline.latest_commit(fp.hudi_table)
    if commit is None:
        return
    stored = stored_position(commit.cluster_position, commit.checkpoint, fp.initial)
    if stored.cluster == target:
        return
    _, moves = carry_table(
        store,
        fp,
        stored,
        target,
        fp.topics[0],  # one Hudi table follows the pipeline's first topic
        readers,
        lambda why: SwitchRefused(f"Hudi table {fp.hudi_table}: {why}"),
    )
    _check_marks(fp, moves, readers, report, prefix="hudi ")


def switch(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    target: str,
    *,
    hook: SwitchHook = _no_hook,
    writer: str | None = None,
) -> SwitchReport:
    """Switch ``fp`` to cluster ``target`` (idempotent; rerun after any crash)."""
    with MirrorReaders() as readers:
        began = time.monotonic()
        states = FailoverStates(store)
        state, version = states.read(fp.name, fp.initial)
        plan = plan_switch(state, fp.clusters, target)
        report = SwitchReport(fp.name, plan.source, plan.target, plan.steps)
        if not plan.steps:
            log.info("%s: already on %s; nothing to do", fp.name, target)
            return report
        source = plan.source
        positions = _positions(store, fp, source)
        moves = _plan_moves(store, fp, positions, target, readers)  # refuses before any write
        _check_marks(fp, [m for _, m in moves], readers, report)
        if fp.hudi_table is not None:
            _check_hudi_table(store, fp, target, readers, report)
        if "begin" in plan.steps:
            version = states.write(fp.name, state.begun(target), version)
            state = state.begun(target)
            log.info("%s: switch %s -> %s begun", fp.name, source, target)
        hook("switch_after_begin")
        # Fence the old cluster's writers, then plan from what the fence took (a writer may have
        # moved a position between the check and the fence).
        fenced = []
        for sink, physical, partition, _ in positions:
            key = KeeperKey(fp.name, sink, physical.topic, partition, source)
            fenced.append((sink, physical, partition, store.acquire(key, writer=writer).record))
        hook("switch_after_fence")
        if [_state(r) for *_, r in fenced] != [_state(r) for *_, r in positions]:
            moves = _plan_moves(store, fp, fenced, target, readers)
        for sink, m in moves:
            key = KeeperKey(fp.name, sink, m.route.target.topic, m.partition, target)
            lease = store.acquire(key, writer=writer)
            store.write(
                lease, m.position, m.position, Phase.AFTER.value, mark=m.mark, replace_mark=True
            )
            log.info("%s: %s[%d] -> %s", fp.name, m.route.source, m.partition, key)
        hook("switch_after_positions")
        states.write(fp.name, state.finished(), version)
        hook("switch_after_activate")
        report.moves = [m for _, m in moves]
        report.seconds = time.monotonic() - began
        log.info("%s: now active on %s (%d positions moved)", fp.name, target, len(moves))
        return report


def _state(record: KeeperRecord) -> tuple[object, ...]:
    return (record.range_start, record.range_end, record.phase, record.mark)


def partitions_of(settings: KafkaSettings, topic: str) -> int:
    """Partitions of a physical topic, 0 when it does not exist (yet) on that cluster; a cluster
    that does not answer raises (read as "no topic", it would hide what it holds)."""
    try:
        return partition_count(settings, topic)
    except TopicMissingError:
        return 0


# ------------------------------------------------------------------------- the kept offset syncs


#: Syncs kept per partition: MM2 syncs at most every ``offset.lag.max`` records, so this covers
#: the last KEEP * offset.lag.max records of each partition at least.
KEEP = 64
#: How long a switch waits for the syncs topic when a stored copy can stand in for it.
SHORT_TIMEOUT = 10.0


class SyncArchive:
    """The stored copies of one pipeline's sync histories, one znode per flow."""

    def __init__(self, store: KeeperStateStore, pipeline: str) -> None:
        self.store = store
        self.pipeline = pipeline

    def path(self, flow: Flow) -> str:
        # '.' is not allowed in a cluster alias, so the two aliases read back unambiguously
        return f"{self.store.settings.root}/{self.pipeline}/@syncs/{flow.source}.{flow.target}"

    def load(self, flow: Flow) -> SyncHistory | None:
        try:
            data, _ = self.store.client.get(self.path(flow))
        except NoNodeError:
            return None
        try:
            history = SyncHistory.from_dict(json.loads(data.decode()))
        except (ValueError, UnicodeDecodeError) as exc:
            raise FailoverError(
                f"corrupt stored offset syncs at {self.path(flow)}: {exc}"
            ) from None
        if history.flow != flow:
            raise FailoverError(f"{self.path(flow)} holds the syncs of {history.flow}, not {flow}")
        return history

    def save(self, history: SyncHistory) -> None:
        """Store ``history`` trimmed (last writer wins: every copy is a prefix of the topic)."""
        data = json.dumps(history.trimmed(KEEP).to_dict(), separators=(",", ":")).encode()
        path = self.path(history.flow)
        self.store.client.ensure_path(path)
        self.store.client.set(path, data)


def refresh(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    flow: Flow,
    readers: MirrorReaders,
    timeout: float | None = None,
) -> SyncHistory:
    """The flow's syncs: the stored copy plus what the topic holds since, stored again. With a
    copy, a syncs' cluster that does not answer a short probe leaves the copy alone (a warning);
    without one the read's error is raised."""
    archive = SyncArchive(store, fp.name)
    stored = archive.load(flow)
    holder = flow.offset_syncs_cluster(fp.offset_syncs_location)
    settings = fp.settings[holder]
    before = None if stored is None else (stored.source_position, len(stored))
    cause: object = None if stored is None else readers.unreachable(settings)
    if cause is None:
        try:
            history = read_offset_syncs(
                settings,
                flow,
                stored,
                location=fp.offset_syncs_location,
                timeout=timeout
                if timeout is not None
                else (SHORT_TIMEOUT if stored is not None else 30.0),
                consumer=readers.get(settings),
            )
        except (KafkaException, MirrorReadError) as exc:
            if stored is None:
                raise
            cause = exc
        else:
            if (history.source_position, len(history)) != before:
                archive.save(history)
            return history
    assert stored is not None
    log.warning(
        "%s: offset syncs of %s unreadable on %s (%s); using the %d stored syncs up to "
        "position %d of the syncs topic",
        fp.name,
        flow,
        holder,
        cause,
        len(stored),
        stored.source_position,
    )
    return stored


def record_syncs(store: KeeperStateStore, fp: FailoverPipeline, active: str) -> int:
    """At a sink run on ``active``: fold in the syncs held there (what a switch away from it would
    need if it went down); returns how many flows were stored (one with no syncs yet waits)."""
    stored = 0
    with MirrorReaders() as readers:
        for flow in sorted(fp.clusters.flows):
            if flow.offset_syncs_cluster(fp.offset_syncs_location) != active:
                continue
            try:
                refresh(store, fp, flow, readers, timeout=SHORT_TIMEOUT)
                stored += 1
            except (KafkaException, MirrorReadError) as exc:
                # never a reason to stop the sink: the copy is refreshed again on the next run
                log.info("%s: offset syncs of %s not kept this time (%s)", fp.name, flow, exc)
    return stored


#: The replica's last record is looked for among its last this many offsets (markers between).
_TAIL = 20
#: Longest stretch of the source read to find an original, or to count what is not copied.
_MAX_READ = 10_000


@dataclass(frozen=True)
class FailoverStatus:
    pipeline: str
    state: ActiveState
    flows: tuple[FlowReplication, ...]

    def lines(self) -> list[str]:
        """The report, as the command prints it."""
        s = self.state
        switch = (
            "no switch in flight"
            if s.switch is None
            else f"a switch {s.switch.source} -> {s.switch.target} is in flight (rerun "
            f"`eos-pipeline failover --pipeline {self.pipeline} --to {s.switch.target}`)"
        )
        done = f"{s.switches} switch{'' if s.switches == 1 else 'es'} so far"
        out = [f"{self.pipeline}: active cluster {s.active} ({done}); {switch}"]
        for f in self.flows:
            head = f"{f.flow}: {f.state}"
            if f.unreachable:
                head += ": " + "; ".join(f"{alias}: {why}" for alias, why in f.unreachable)
            elif f.partitions or f.missing:
                head += f", lag {f.lag} records"
            out.append(head)
            out += [f"  {name}: no replica on {f.flow.target} yet" for name in f.missing]
            out += [f"  {name}: not on {f.flow.source}, nothing to copy" for name in f.absent]
            for p in f.partitions:
                x = p.facts
                sync = (
                    "no offset sync"
                    if x.last_sync is None
                    else f"last sync {x.last_sync[0]}->{x.last_sync[1]}"
                    + ("" if x.sync_age_s is None else f" {x.sync_age_s:.0f} s ago")
                )
                copied = x.copied_to if p.exact else f"at least {x.synced_to} (by the syncs)"
                out.append(
                    f"  {x.topic}[{x.partition}]: {p.state}, lag {p.lag}"
                    f"{'' if p.exact else ' at most'}; source end {x.source_end}, copied up to "
                    f"{copied}; replica end {x.remote_end} "
                    f"({'moving' if x.remote_moved else 'not moving'}); {sync}"
                )
        out += failback_advice(s.active, self.flows)
        return out


def read_status(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    *,
    sample_s: float = 1.0,
    fresh_s: float = FRESH_SYNC_S,
    probe_timeout: float = PROBE_TIMEOUT,
) -> FailoverStatus:
    """The pipeline's active cluster and, per flow MM2 replicates for it, the replication."""
    state, _ = FailoverStates(store).read(fp.name, fp.initial)
    with MirrorReaders(probe_timeout) as readers:
        flows = sorted(fp.clusters.flows)
        down = {
            f: tuple(
                (alias, why)
                for alias in (f.source, f.target)
                if (why := readers.unreachable(fp.settings[alias])) is not None
            )
            for f in flows
        }
        before: dict[Flow, dict[str, dict[int, int] | KafkaReadError]] = {}
        for f in flows:
            if not down[f]:
                try:
                    remotes = [DEFAULT_POLICY.remote_topic(f.source, t) for t in fp.topics]
                    before[f] = end_offsets_of(fp.settings[f.target], remotes)
                except KafkaReadError as exc:  # it answered the probe, then stopped
                    down[f] = ((f.target, str(exc)),)
        if before and sample_s > 0:
            time.sleep(sample_s)
        read = []
        for f in flows:
            try:
                read.append(
                    _flow(fp, f, before[f], readers, fresh_s)
                    if f in before
                    else FlowReplication(f, unreachable=down[f])
                )
            except KafkaReadError as exc:  # a cluster lost after its probe: named, not raised
                read.append(FlowReplication(f, unreachable=((str(f), str(exc)),)))
    return FailoverStatus(fp.name, state, tuple(read))


def _flow(
    fp: FailoverPipeline,
    flow: Flow,
    before: dict[str, dict[int, int] | KafkaReadError],
    readers: MirrorReaders,
    fresh_s: float,
) -> FlowReplication:
    source, target = fp.settings[flow.source], fp.settings[flow.target]
    holder = fp.settings[flow.offset_syncs_cluster(fp.offset_syncs_location)]
    written_at: dict[TopicPartition, int] = {}  # when MM2 wrote each partition's latest sync
    try:
        history = read_offset_syncs(
            holder,
            flow,
            location=fp.offset_syncs_location,
            timeout=10.0,
            consumer=readers.get(holder),
            written_at=written_at,
        )
    except KafkaReadError:  # no syncs topic yet: MM2 has copied nothing on this flow
        history, written_at = SyncHistory(flow), {}
    now_ms = time.time() * 1000
    ends, starts = ends_and_starts(source, fp.topics)
    r_ends, r_starts = ends_and_starts(
        target, [DEFAULT_POLICY.remote_topic(flow.source, t) for t in fp.topics]
    )
    parts, missing, absent = [], [], []
    for topic in fp.topics:
        remote = DEFAULT_POLICY.remote_topic(flow.source, topic)
        t_ends, t_starts = ends[topic], starts[topic]
        if isinstance(t_ends, KafkaReadError) or isinstance(t_starts, KafkaReadError):
            absent.append(topic)
            continue
        for p in sorted(t_ends):
            got, low = r_ends.get(remote), r_starts.get(remote)
            if isinstance(got, KafkaReadError) or got is None or p not in got:
                if t_ends[p] > t_starts[p]:  # records to copy, and nowhere to copy them yet
                    missing.append(f"{topic}[{p}]")
                continue
            earlier = before.get(remote)
            tp = TopicPartition(topic, p)
            r_low = low[p] if isinstance(low, dict) else 0
            facts = _facts(
                fp, flow, tp, history, (t_starts[p], t_ends[p]), (r_low, got[p]), readers
            )
            sync = history.syncs(tp)
            facts = replace(
                facts,
                last_sync=(sync[-1].upstream, sync[-1].downstream) if sync else None,
                sync_age_s=None
                if tp not in written_at
                else max(0.0, (now_ms - written_at[tp]) / 1000),
                remote_moved=isinstance(earlier, dict) and got[p] > earlier.get(p, got[p]),
            )
            parts.append(partition_replication(facts, fresh_s))
    return FlowReplication(flow, tuple(parts), missing=tuple(missing), absent=tuple(absent))


def _facts(
    fp: FailoverPipeline,
    flow: Flow,
    tp: TopicPartition,
    history: SyncHistory,
    source_range: tuple[int, int],
    remote_range: tuple[int, int],
    readers: MirrorReaders,
) -> ReplicaFacts:
    """The ends, the syncs' bound and, when it can be found, the exact copied position."""
    (s_low, s_end), (r_low, r_end) = source_range, remote_range

    def read(cluster: str, tp: TopicPartition, start: int, end: int) -> list[MirroredRecord]:
        settings = fp.settings[cluster]
        consumer, admin = readers.get(settings), readers.admin(settings)
        return read_window(
            settings, tp, Window(start, end), timeout=10.0, consumer=consumer, admin=admin
        )

    synced_to = history.inverse(tp, r_end, floor=s_low).position
    copied_to = s_low if r_end == r_low else None  # an empty replica: nothing copied yet
    rtp = TopicPartition(DEFAULT_POLICY.remote_topic(flow.source, tp.topic), tp.partition)
    tail = read(flow.target, rtp, max(r_low, r_end - _TAIL), r_end)
    if tail:
        window = history.origin_window(tp, tail[-1].offset, floor=s_low)
        end = min(s_end, window.end if window.end is not None else s_end)
        if end - window.start <= _MAX_READ:
            records = read(flow.source, tp, window.start, end)
            try:
                copied_to = resume_after(tp, tail[-1].fingerprint, records, window).position
            except ResumeError:
                copied_to = None  # not where the syncs say: the bound stands in
    uncopied = None
    if copied_to is not None and 0 < s_end - copied_to <= _MAX_READ:
        uncopied = len(read(flow.source, tp, copied_to, s_end))
    return ReplicaFacts(tp.topic, tp.partition, s_end, r_end, synced_to, copied_to, uncopied)
