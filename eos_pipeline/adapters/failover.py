"""The switch between clusters, carried out: the core's plan against ZooKeeper and Kafka.

:func:`switch` runs the steps of :mod:`eos_pipeline.core.failover`: it checks everything
it can before the first write (unknown alias, flows MM2 does not replicate, a switch in flight, a
write in flight, and for every position whose window is bounded, that the last written record's
copy is really there; for a pipeline's Hudi table, that its position can move:
:func:`check_hudi_table`), then records the switch in flight, fences the old
cluster's positions, stores the translated positions with their pending marks, and makes the new
cluster active. A crash anywhere leaves a state from which a rerun ends exactly as an
uninterrupted switch would.

The pipeline's active cluster lives at ``<root>/<pipeline>/@failover`` (``@`` keeps it apart
from sink names); positions at ``<root>/<pipeline>/<sink>/@<cluster>/<topic>/<partition>``.

It also keeps MirrorMaker 2's offset syncs in the keeper (:class:`SyncArchive`), for a switch away
from a cluster that is down: MM2 writes a flow's syncs to a compacted topic on the flow's source
cluster (its default ``offset-syncs.topic.location``), which a switch away from that cluster
cannot read, and compaction keeps only the latest sync per partition. Every sink run on the
active cluster folds the syncs written since the last copy into it (:func:`record_syncs`), and
every switch does too when it can read the topic, each stored trimmed to the latest :data:`KEEP`
syncs per partition at ``<root>/<pipeline>/@syncs/<source>.<target>``. When the topic cannot be
read the switch uses the copy: as conservative as the topic (the fingerprint makes the resume
exact), only the re-read may be longer.

And it looks at a pipeline's Hudi table before anything changes (:func:`check_hudi_table`): the
table moves itself on its first run on the new cluster (:mod:`eos_pipeline.sinks.hudi_clusters`);
the switch refuses up front what that run could not do, as for keeper positions. Read without a
JVM (the table's timeline via hudi-rs).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from eos_pipeline.adapters import hudi_timeline
from eos_pipeline.adapters.kafka import KafkaSettings, TopicMissingError, partition_count
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.adapters.mirror import (
    MirrorReadError,
    MirrorReaders,
    TimeFloors,
    first_offset,
    read_offset_syncs,
    read_window,
)
from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.failover import (
    ActiveState,
    ClusterSet,
    FailoverError,
    Flow,
    Move,
    PhysicalTopic,
    SwitchRefused,
    SyncHistory,
    Window,
    carry_over,
    flows_needed,
    move,
    plan_switch,
    resume_after,
    route,
    stored_position,
)
from eos_pipeline.core.keeper import KeeperKey, KeeperRecord
from eos_pipeline.core.offsets import TopicPartition

log = logging.getLogger(__name__)

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
    #: Per target partition (``cluster:topic[partition]``): records the check read in the
    #: mark's window (from the re-read start to the window's end, the next offset sync) and how
    #: many of them are the *re-read*: from the start through the copy, already written, which
    #: the sink skips (the docs' bound, ``offset.lag.max`` + 1). The rest lie after the copy:
    #: read by the check only, the sink writes them (:meth:`reread`, :meth:`past_copy`).
    checked: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Per moved position with a mark (same keys, Hudi's too): where its re-read starts, which
    #: bound set that (``"timestamp"`` or ``"syncs"``) and where the syncs alone would start it.
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
    store: KeeperStateStore,
    fp: FailoverPipeline,
    flows: set[Flow],
    readers: MirrorReaders | None = None,
) -> dict[Flow, SyncHistory]:
    """Each flow's syncs: from its topic, or the keeper's copy when the topic is unreachable."""

    return {flow: refresh(store, fp, flow, readers=readers) for flow in sorted(flows)}


def _plan_moves(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    positions: list[tuple[str, PhysicalTopic, int, KeeperRecord]],
    target: str,
    readers: MirrorReaders,
) -> list[tuple[str, Move]]:
    flows = {
        route(p, target, fp.clusters.aliases, fp.clusters.policy).flow for _, p, _, _ in positions
    }
    histories = _histories(store, fp, flows & set(fp.clusters.flows), readers)
    time_floor = TimeFloors(fp.settings[target], admin=readers.admin(fp.settings[target]))
    on_target = readers.get(fp.settings[target])
    moves = []
    for sink, physical, partition, record in positions:
        r = route(physical, target, fp.clusters.aliases, fp.clusters.policy)
        history = histories.get(r.flow, SyncHistory(r.flow))
        tp = TopicPartition(r.target.topic, partition)
        try:
            floor = first_offset(fp.settings[target], tp, consumer=on_target)
        except Exception as exc:  # the replica topic may not exist yet
            raise SwitchRefused(
                f"{physical}[{partition}]: its counterpart {r.target}[{partition}] cannot be read "
                f"({exc}); is MirrorMaker 2 replicating {r.flow}?"
            ) from None
        at_time = None if record.mark is None else time_floor(tp, record.mark)
        moves.append(
            (sink, move(physical, partition, record, target, fp.clusters, history, floor, at_time))
        )
    return moves


def describe_start(m: Move) -> dict[str, object]:
    """Where a moved position's re-read starts and what set it (the switch's report)."""
    return {"start": m.position, "bound": m.bound, "syncs_start": m.syncs_position}


def _check_marks(
    fp: FailoverPipeline, moves: list[tuple[str, Move]], readers: MirrorReaders
) -> dict[str, tuple[int, int]]:
    """Find each bounded mark's copy now, so that a missing one refuses the switch up front."""
    checked = {}
    for _, m in moves:
        if m.mark is None or m.mark.window_end is None:
            continue
        tp = TopicPartition(m.route.target.topic, m.partition)
        window = Window(m.position, m.mark.window_end)
        settings = fp.settings[m.route.target.cluster]
        records = read_window(
            settings, tp, window, consumer=readers.get(settings), admin=readers.admin(settings)
        )
        point = resume_after(tp, m.mark.fingerprint, records, window)
        checked[f"{m.route.target}[{m.partition}]"] = (len(records), point.skipped)
    return checked


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
        return _switch(store, fp, target, hook, writer, readers)


def _switch(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    target: str,
    hook: SwitchHook,
    writer: str | None,
    readers: MirrorReaders,
) -> SwitchReport:
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
    report.checked = _check_marks(fp, moves, readers)
    report.starts = {
        f"{m.route.target}[{m.partition}]": describe_start(m) for _, m in moves if m.mark
    }
    if fp.hudi_table is not None:
        report.checked.update(
            check_hudi_table(
                fp, fp.hudi_table, target, store, starts=report.starts, readers=readers
            )
        )
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
        try:
            self.store.client.set(path, data)
        except NoNodeError:
            try:
                self.store.client.create(path, data, makepath=True)
            except NodeExistsError:
                self.store.client.set(path, data)


def refresh(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    flow: Flow,
    *,
    timeout: float | None = None,
    readers: MirrorReaders | None = None,
) -> SyncHistory:
    """The flow's syncs: the stored copy plus what the topic holds since, stored again.

    When the topic cannot be read (its cluster is down) the stored copy is returned alone, with
    a warning; without a stored copy the read's error is raised. With a stored copy, the syncs'
    cluster gets one short probe first (``MirrorReaders.unreachable``): one that does not answer
    is not waited for. ``readers``: the clients of a sequence of reads (a switch), which probe
    each cluster once for all of them (a switch away from a dead cluster waits once, briefly).
    """
    if readers is None:
        with MirrorReaders() as own:
            return refresh(store, fp, flow, timeout=timeout, readers=own)
    archive = SyncArchive(store, fp.name)
    stored = archive.load(flow)
    holder = flow.offset_syncs_cluster(fp.offset_syncs_location)
    wait = timeout if timeout is not None else (SHORT_TIMEOUT if stored is not None else 30.0)
    before = None if stored is None else (stored.source_position, len(stored))
    consumer = readers.get(fp.settings[holder])
    down = None if stored is None else readers.unreachable(fp.settings[holder])
    if stored is not None and down is not None:
        _warn_stored(fp, flow, holder, down, stored)
        return stored
    try:
        history = read_offset_syncs(
            fp.settings[holder],
            flow,
            stored,
            location=fp.offset_syncs_location,
            policy=fp.clusters.policy,
            timeout=wait,
            consumer=consumer,
        )
    except (KafkaException, MirrorReadError) as exc:
        if stored is None:
            raise
        _warn_stored(fp, flow, holder, exc, stored)
        return stored
    if (history.source_position, len(history)) != before:
        archive.save(history)
    return history


def _warn_stored(
    fp: FailoverPipeline, flow: Flow, holder: str, cause: object, stored: SyncHistory
) -> None:
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


def record_syncs(store: KeeperStateStore, fp: FailoverPipeline, active: str) -> int:
    """At a sink run on ``active``: fold in the syncs held there (what a switch away from it
    would need if it went down). Returns how many flows were stored; a flow whose syncs cannot
    be read now (MM2 has copied nothing on it yet) is left for the next run."""
    stored = 0
    for flow in sorted(fp.clusters.flows):
        if flow.offset_syncs_cluster(fp.offset_syncs_location) != active:
            continue
        try:
            refresh(store, fp, flow, timeout=SHORT_TIMEOUT)
            stored += 1
        except (KafkaException, MirrorReadError) as exc:
            # never a reason to stop the sink: the copy is refreshed again on the next run
            log.info("%s: offset syncs of %s not kept this time (%s)", fp.name, flow, exc)
    return stored


# ------------------------------------------------------------------- the switch and a Hudi table


def check_hudi_table(
    fp: FailoverPipeline,
    table_path: str,
    target: str,
    store: KeeperStateStore,
    *,
    starts: dict[str, dict[str, object]] | None = None,
    readers: MirrorReaders | None = None,
) -> dict[str, tuple[int, int]]:
    """Refuse (``SwitchRefused``, core errors) if the table's position cannot move to
    ``target``; per moved partition, records read to check its mark and how many precede it.
    ``starts`` gets where each marked partition's re-read will start, and by which bound."""
    commit = hudi_timeline.latest_commit(table_path)
    if commit is None:
        return {}
    stored = stored_position(commit.cluster_position, commit.checkpoint, fp.initial)
    if stored.cluster == target:
        return {}
    topics = fp.topics[:1]  # one Hudi table follows the pipeline's first topic
    flows = flows_needed(stored, target, fp.clusters, topics) & set(fp.clusters.flows)
    histories = _histories(store, fp, flows, readers)
    on_target = None if readers is None else readers.get(fp.settings[target])
    admin = None if readers is None else readers.admin(fp.settings[target])

    def floor(tp: TopicPartition) -> int:
        try:
            return first_offset(fp.settings[target], tp, consumer=on_target)
        except Exception as exc:  # the replica topic may not exist yet
            raise SwitchRefused(
                f"Hudi table {table_path}: {target}:{tp} cannot be read ({exc}); is MirrorMaker "
                f"2 replicating to {target!r}?"
            ) from None

    time_floor = TimeFloors(fp.settings[target], admin=admin)
    _, moves = carry_over(stored, target, fp.clusters, topics, histories, floor, time_floor)
    checked = {}
    for m in moves:
        if m.mark is not None and starts is not None:
            starts[f"hudi {m.route.target}[{m.partition}]"] = describe_start(m)
        if m.mark is None or m.mark.window_end is None:
            continue
        tp = TopicPartition(m.route.target.topic, m.partition)
        window = Window(m.position, m.mark.window_end)
        records = read_window(fp.settings[target], tp, window, consumer=on_target, admin=admin)
        point = resume_after(tp, m.mark.fingerprint, records, window)
        checked[f"hudi {m.route.target}[{m.partition}]"] = (len(records), point.skipped)
    return checked


__all__ = [
    "KEEP",
    "FailoverPipeline",
    "FailoverStates",
    "SwitchHook",
    "SwitchInProgress",
    "SwitchReport",
    "SyncArchive",
    "check_hudi_table",
    "describe_start",
    "partitions_of",
    "record_syncs",
    "refresh",
    "switch",
]
