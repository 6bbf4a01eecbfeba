"""Where a pipeline reads: its one Kafka cluster, or the active one of several (MM2 failover).

The sinks and the Dagster layer ask a :class:`Source` and never test which kind they hold: this
is the one place that knows about clusters (the Hudi sink plans its transactions through it).

* :class:`OneCluster`: topic ``T`` of the configured cluster, named as it is.
* :class:`ActiveCluster`: ``T`` and each replica MM2 makes of it (``B.T`` on A) on the cluster
  the keeper says is active, refused while a switch is in flight (``SwitchInProgress``); keeper
  positions, rows (``A:T``) and tokens name the cluster, and the physical topics fold into one
  state per Dagster partition.

  A Hudi table's position stays in its commits, each also storing a cluster position
  (:class:`~eos_pipeline.core.failover.TablePosition`) read in one transaction. A switch moves
  only the keeper's active cluster; the first run that finds the latest commit on another cluster
  carries the position over by the core's rule and skips the copies of what was written
  (``sinks.clickhouse.locate_copy``). Starting from whatever commit is latest also carries over a
  write in flight on the old cluster at the switch; Hudi's commit fence keeps an old- and a
  new-cluster writer from both committing. A table written before clusters were configured (no
  cluster position) is on the initial cluster, keeps the plain topic in its rows, and has the
  record before each position marked on its first run so that it can move.

Built per run or sensor tick by ``components.source.PipelineSource.at``; the rules are in the core.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.failover import (
    FailoverPipeline,
    FailoverStates,
    MirrorReaders,
    carry_table,
    partitions_of,
    record_syncs,
)
from eos_pipeline.adapters.hudi_timeline import CommitInfo, latest_checkpoint, latest_commit
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    TopicInfo,
    describe,
    end_offsets,
    end_offsets_of,
    range_consumer,
    read_range,
    start_offsets,
    topic_id,
)
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.failover import (
    TablePosition,
    fold_keeper_states,
    fold_positions,
    row_topic,
    stored_position,
    streamer_checkpoint,
)
from eos_pipeline.core.keeper import Mark
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import PlanLogChanged, TopicState, TransactionRefused, plan_ranges
from eos_pipeline.core.positions import (
    PartitionLag,
    Reset,
    check_same_log,
    committed,
    partition_lags,
    sink_state,
)
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec, locate_copy
from eos_pipeline.sinks.hooks import FaultHook, no_fault

log = logging.getLogger(__name__)

#: Whether a topic's stored positions need its log starts (``core.planning``'s rules).
NeedsStarts = Callable[[TopicState], bool]
#: ``(ends, checkpoint) -> bool``: the same for a Hudi table's checkpoint.
HudiNeedsStarts = Callable[[Mapping[int, int], Checkpoint], bool]
#: ``(ends, positions per partition, checkpoint-less lows)`` of a Hudi table, as a sensor reads.
HudiPositions = tuple[dict[int, int], Checkpoint, dict[int, int] | None]


@dataclass(frozen=True)
class HudiPlan:
    """One Hudi transaction, fixed by its source before anything is read: ranges in, positions
    out. ``start`` and ``after`` are per partition read here (each physical topic's, with
    clusters); ``checkpoint`` is what the commit stores under HoodieStreamer's key."""

    previous: CommitInfo | None
    start: Checkpoint  # position of every partition before (stored, or from the reset policy)
    ranges: dict[TopicPartition, OffsetRange]  # the partitions of this transaction
    checkpoint: Checkpoint  # the commit's checkpoint (every partition of the topic)
    end_offsets: Checkpoint  # Kafka's last stable offsets when the plan was made
    topic_id: str | None  # Kafka's id of the topic, stored next to the checkpoint
    partition_count: int  # partitions the checkpoint must name
    after: Checkpoint  # position of every partition read here after the commit
    #: The position before is not the latest commit's, so a commit is due even with nothing to
    #: read: a first position (it pins ``reset="latest"``, see ``core.positions``), or with
    #: clusters one carried over or new marks.
    recorded: bool
    #: The commit may move the checkpoint back (the latest commit was on another cluster).
    allow_rewind: bool = False
    #: With clusters: the cluster read, its position before (carried over after a switch, past
    #: the copies of what was written), and the records re-read and skipped to resume exactly.
    cluster: str | None = None
    position: TablePosition | None = None
    reread: int = 0
    skipped: int = 0

    @property
    def has_work(self) -> bool:
        """A commit is due if records are to be read or a position is to be recorded."""
        return self.recorded or any(not r.is_empty for r in self.ranges.values())


class Source(ABC):
    """What a run or a sensor tick reads, whatever the number of clusters."""

    #: Alias of the cluster read (positions and rows are keyed by it); None with one cluster.
    cluster: str | None
    #: The Kafka settings of that cluster.
    kafka: KafkaSettings

    @abstractmethod
    def partitions(self, tp: TopicPartition) -> list[TopicPartition]:
        """The physical partitions a run of the Dagster partition ``tp`` reads."""

    @abstractmethod
    def partition_counts(self, topics: Sequence[str]) -> tuple[dict[str, int], list[str]]:
        """Partitions per topic, and the topics not found (an unreachable cluster raises)."""

    @abstractmethod
    def clickhouse_states(
        self,
        store: KeeperStateStore,
        pipeline: str,
        sink: str,
        topics: Sequence[str],
        needs_starts: NeedsStarts,
    ) -> list[TopicState]:
        """One state per topic found: its ends and the keeper's positions (log starts where
        ``needs_starts`` says)."""

    @abstractmethod
    def hudi_positions(
        self, table_path: str, topic: str, needs_starts: HudiNeedsStarts
    ) -> HudiPositions:
        """The Hudi table's position per partition against the ends here (``HudiTimelineError``
        when the table's timeline cannot be read)."""

    @abstractmethod
    def before_write(self) -> None:
        """What to keep before a sink writes from here."""

    @abstractmethod
    def row_topic(self, topic: str) -> str:
        """The source topic a row read here from ``topic`` stores."""

    @abstractmethod
    def plan_hudi(
        self,
        previous: CommitInfo | None,
        *,
        table: str,
        name: str,
        topic: str,
        reset: Reset,
        max_records: int,
        partitions: Collection[int] | None = None,
        until: Mapping[int, int] | None = None,
    ) -> HudiPlan:
        """The next transaction of ``topic`` into the Hudi table at ``table`` (``name`` in the
        logs) after its latest commit ``previous``, without side effects; ``partitions`` default
        to all, ``until`` caps the partitions of ``topic`` itself. ``TransactionRefused``
        (``PlanLogChanged``) when it cannot be planned without losing or repeating records."""

    @abstractmethod
    def hudi_commit_position(
        self, plan: HudiPlan, last_offsets: Mapping[TopicPartition, int]
    ) -> str | None:
        """What the commit of ``plan`` stores next to its checkpoint (None: nothing);
        ``last_offsets``: offset of the last record read per partition."""

    def clickhouse_sync(
        self,
        spec: ClickHouseTableSpec,
        store: KeeperStateStore,
        sink: ClickHouseSink,
        dead_letter_topic: str,
        *,
        writer: str | None = None,
        fault: FaultHook = no_fault,
    ) -> ClickHousePartitionSync:
        """The ClickHouse sink loop reading here (its keys, rows and tokens name the cluster)."""
        self.before_write()
        return ClickHousePartitionSync(
            spec,
            self.kafka,
            store,
            sink,
            DeadLetterWriter(self.kafka, dead_letter_topic, spec.pipeline),
            writer=writer,
            fault=fault,
            cluster=self.cluster,
        )


class OneCluster(Source):
    """A pipeline with one cluster: its topics as they are named."""

    cluster: str | None = None

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka

    def partitions(self, tp: TopicPartition) -> list[TopicPartition]:
        return [tp]

    def before_write(self) -> None:
        """Nothing: no switch can move a pipeline with one cluster."""

    def partition_counts(self, topics: Sequence[str]) -> tuple[dict[str, int], list[str]]:
        # One request for every topic; Kafka not answering raises (a sensor's skip reason names
        # it), a topic it refuses is missing.
        infos = describe(self.kafka, topics)
        counts = {t: i.partitions for t in topics if isinstance(i := infos[t], TopicInfo)}
        return counts, [t for t in topics if t not in counts]

    def row_topic(self, topic: str) -> str:
        return topic

    def plan_hudi(
        self,
        previous: CommitInfo | None,
        *,
        table: str,
        name: str,
        topic: str,
        reset: Reset,
        max_records: int,
        partitions: Collection[int] | None = None,
        until: Mapping[int, int] | None = None,
    ) -> HudiPlan:
        """The topic's partitions from the latest checkpoint (the rule: ``core.planning``)."""
        current_id = topic_id(self.kafka, topic)
        check_same_log(
            table,
            topic=topic,
            stored_topic_id=previous.topic_id if previous else None,
            topic_id=current_id,
            error=PlanLogChanged,
        )
        ends = end_offsets(self.kafka, topic)
        lows = start_offsets(self.kafka, topic)
        stored = previous.checkpoint if previous else {}
        planned = plan_ranges(
            table,
            topic,
            stored,
            ends,
            lows,
            reset=reset,
            max_records=max_records,
            partitions=partitions,
            until=until,
        )
        return HudiPlan(
            previous,
            planned.start,
            planned.ranges,
            planned.checkpoint,
            {TopicPartition(topic, p): e for p, e in ends.items()},
            current_id,
            partition_count=len(ends),
            after=planned.checkpoint,
            recorded=planned.start != stored,
        )

    def hudi_commit_position(
        self, plan: HudiPlan, last_offsets: Mapping[TopicPartition, int]
    ) -> str | None:
        """Nothing: the checkpoint is the whole position."""
        return None

    def clickhouse_states(
        self,
        store: KeeperStateStore,
        pipeline: str,
        sink: str,
        topics: Sequence[str],
        needs_starts: NeedsStarts,
    ) -> list[TopicState]:
        states = []
        # every topic's ends in one ListOffsets; Kafka not answering raises
        found = end_offsets_of(self.kafka, topics)
        for topic in topics:
            ends = found.get(topic)
            if not isinstance(ends, dict):  # missing topic (unreachable raised above)
                continue
            records = store.read_many(pipeline, sink, topic)
            state = TopicState(topic, ends, {p: sink_state(r.record) for p, r in records.items()})
            if needs_starts(state):
                state = TopicState(topic, ends, state.records, start_offsets(self.kafka, topic))
            states.append(state)
        return states

    def hudi_positions(
        self, table_path: str, topic: str, needs_starts: HudiNeedsStarts
    ) -> HudiPositions:
        ends = end_offsets(self.kafka, topic)  # unreachable: named by the caller
        checkpoint = latest_checkpoint(table_path) or {}
        lows = start_offsets(self.kafka, topic) if needs_starts(ends, checkpoint) else None
        return ends, checkpoint, lows


class ActiveCluster(Source):
    """A pipeline with several clusters, on the active one (refused mid-switch)."""

    def __init__(self, fp: FailoverPipeline, store: KeeperStateStore) -> None:
        self.fp = fp
        self.store = store
        self.alias = FailoverStates(store).active(fp.name, fp.initial)
        self.cluster: str | None = self.alias
        self.kafka = fp.settings[self.alias]

    def physical_topics(self, topic: str) -> list[str]:
        """``topic`` and each replica of it on this cluster (``T``, ``B.T``), existing or not."""
        return [physical.topic for physical in self.fp.clusters.topics(topic, self.alias)]

    def ends(self, topic: str) -> dict[str, dict[int, int]]:
        """Last stable offsets of each physical topic of ``topic`` that exists here."""
        return {
            t: end_offsets(self.kafka, t)
            for t in self.physical_topics(topic)
            if partitions_of(self.kafka, t)
        }

    def partitions(self, tp: TopicPartition) -> list[TopicPartition]:
        return [
            TopicPartition(t, tp.partition)
            for t in self.physical_topics(tp.topic)
            if tp.partition < partitions_of(self.kafka, t)
        ]

    def partition_counts(self, topics: Sequence[str]) -> tuple[dict[str, int], list[str]]:
        """A logical topic has as many partitions as the largest of its physical topics here."""
        found = {
            t: max(partitions_of(self.kafka, p) for p in self.physical_topics(t)) for t in topics
        }
        return {t: n for t, n in found.items() if n}, [t for t, n in found.items() if not n]

    def before_write(self) -> None:
        # Keep the syncs a switch away from here would need, should this cluster go down.
        record_syncs(self.store, self.fp, self.alias)

    def row_topic(self, topic: str) -> str:
        """``A:T``: ``T`` on A is not ``T`` on B, and the source coordinates are the key."""
        return row_topic(self.alias, topic)

    def _stored(self, commit: CommitInfo | None) -> TablePosition | None:
        """The cluster position of ``commit``; a plain checkpoint is on the initial cluster."""
        if commit is None:
            return None
        return stored_position(commit.cluster_position, commit.checkpoint, self.fp.initial)

    def plan_hudi(
        self,
        previous: CommitInfo | None,
        *,
        table: str,
        name: str,
        topic: str,
        reset: Reset,
        max_records: int,
        partitions: Collection[int] | None = None,
        until: Mapping[int, int] | None = None,
    ) -> HudiPlan:
        """Every physical topic of ``topic`` here, from the cluster position of the latest commit
        (carried over first if it is on another cluster)."""
        kafka = self.kafka
        active = FailoverStates(self.store).active(self.fp.name, self.fp.initial)
        if active != self.alias:
            raise TransactionRefused(
                f"{self.fp.name}: the active cluster moved from {self.alias!r} to {active!r} "
                "since this run started; nothing was read, run again"
            )
        if previous is not None and previous.cluster_position is None:
            foreign = sorted({tp.topic for tp in previous.checkpoint} - {topic})
            if foreign:
                raise TransactionRefused(
                    f"{table}: the table's checkpoint is for topic(s) {foreign}, "
                    f"not {topic!r}; one Hudi table follows one topic"
                )
        position = self._stored(previous) or TablePosition(active, {})
        moved = position.cluster != active
        if moved:
            with MirrorReaders() as readers:  # the syncs: the keeper's copy if the old one is down
                position, moves = carry_table(
                    self.store,
                    self.fp,
                    position,
                    active,
                    topic,
                    readers,
                    lambda why: TransactionRefused(f"{why} Nothing was written"),
                )
            for m in moves:
                log.info(
                    "%s: %s[%d] moved to %s[%d] at %d (bound: %s; last written: %s)",
                    name,
                    m.route.source,
                    m.partition,
                    m.route.target,
                    m.partition,
                    m.position,
                    m.bound,
                    m.mark.fingerprint if m.mark else "no mark, exact translation",
                )
        physical_ends = self.ends(topic)
        physical_lows = {physical: start_offsets(kafka, physical) for physical in physical_ends}
        ends = {TopicPartition(t, p): e for t, es in physical_ends.items() for p, e in es.items()}
        lows = {TopicPartition(t, p): o for t, low in physical_lows.items() for p, o in low.items()}
        check_same_log(
            f"{table} on {active!r}",
            topic=topic,
            stored_partitions=position.positions,
            present=ends,
            error=PlanLogChanged,
        )
        reread = skipped = 0
        for tp, mark in sorted(position.pending.items()):
            start = position.positions[tp]
            at, found, n_read, n_skip = locate_copy(kafka, tp, start, mark, ends[tp])
            position = position.advanced({tp: at}, {tp: found})
            reread, skipped = reread + n_read, skipped + n_skip
        # Written before marks were kept: mark the last record before each position, looking
        # back at most 64 offsets (transaction markers take offsets too). None when none is
        # found: such a position then moves to another cluster only by an exact translation.
        unmarked = {
            tp: OffsetRange(max(lows[tp], at - 64), at)
            for tp, at in position.positions.items()
            if tp not in position.marks and at > lows[tp]
        }
        if unmarked:
            position = position.advanced({}, _last_marks(kafka, unmarked))
        # Each physical topic by core.planning's one rule; ``until`` caps ``topic`` itself.
        start_at: dict[TopicPartition, int] = {}
        ranges: dict[TopicPartition, OffsetRange] = {}
        for physical in sorted(physical_ends):
            planned = plan_ranges(
                f"{table} on {active!r}",
                physical,
                {tp: at for tp, at in position.positions.items() if tp.topic == physical},
                physical_ends[physical],
                physical_lows[physical],
                reset=reset,
                max_records=max_records,
                # a replica may have fewer partitions: those it lacks are not read there
                partitions=None
                if partitions is None
                else [p for p in partitions if TopicPartition(physical, p) in ends],
                until=until if physical == topic else None,
            )
            start_at.update(planned.start)
            ranges.update(planned.ranges)
        # Where this cluster's stretch starts: after a move, the resume point found above (all
        # before it was written from the other cluster); a partition read for the first time,
        # its first offset. Kept until the next move, for the exactly-once check.
        since = {tp: at for tp, at in start_at.items() if tp not in position.positions}
        if moved:
            since.update(position.positions)
        position = position.advanced(start_at, {}, since)
        after = position.advanced({tp: r.end for tp, r in ranges.items()}, {})
        counts = [len(e) for e in physical_ends.values()]
        summary_count = max([*counts, len(previous.checkpoint) if previous else 0, 1])
        return HudiPlan(
            previous,
            dict(position.positions),
            ranges,
            streamer_checkpoint(topic, after, summary_count),
            ends,
            None,
            partition_count=summary_count,
            after=dict(after.positions),
            recorded=position.encode() != (previous.cluster_position if previous else None),
            allow_rewind=moved or (previous is not None and previous.cluster_position is None),
            cluster=active,
            position=position,
            reread=reread,
            skipped=skipped,
        )

    def hudi_commit_position(
        self, plan: HudiPlan, last_offsets: Mapping[TopicPartition, int]
    ) -> str | None:
        """The cluster position after this transaction, with the mark of each last record."""
        assert plan.position is not None
        wanted = {tp: OffsetRange(offset, offset + 1) for tp, offset in last_offsets.items()}
        marks = _last_marks(self.kafka, wanted)
        for tp, mark in marks.items():
            if mark is None:
                raise TransactionRefused(
                    f"{tp}: the record at offset {last_offsets[tp]} cannot be read back"
                )
        ends = {tp: r.end for tp, r in plan.ranges.items()}
        return plan.position.advanced(ends, marks).encode()

    def clickhouse_states(
        self,
        store: KeeperStateStore,
        pipeline: str,
        sink: str,
        topics: Sequence[str],
        needs_starts: NeedsStarts,
    ) -> list[TopicState]:
        """One folded state per topic from this cluster's keys; nothing stored folds from
        offset 0 (``core.failover.fold``), so no log start is asked."""
        states = []
        for topic in topics:
            per: dict[int, list] = {}
            for physical, ends in self.ends(topic).items():
                records = store.read_many(pipeline, sink, physical, self.alias)
                for p, end in ends.items():
                    record = records[p].record if p in records else None
                    per.setdefault(p, []).append((end, sink_state(record)))
            folded = {p: fold_keeper_states(items) for p, items in per.items()}
            states.append(
                TopicState(
                    topic,
                    {p: end for p, (end, _) in folded.items()},
                    {p: state for p, (_, state) in folded.items() if state is not None},
                    {p: 0 for p in folded},
                )
            )
        return states

    def hudi_positions(
        self, table_path: str, topic: str, needs_starts: HudiNeedsStarts
    ) -> HudiPositions:
        """The table's cluster position folded against this cluster's ends; nothing stored
        folds from 0 (``core.failover.fold``)."""
        stored = self._stored(latest_commit(table_path))
        moved = stored is not None and stored.cluster != self.alias
        per: dict[int, list[tuple[int, int | None]]] = {}
        for physical, ends in self.ends(topic).items():
            for p, end in ends.items():
                at = None if stored is None else stored.positions.get(TopicPartition(physical, p))
                per.setdefault(p, []).append((end, at))
        ends, positions = fold_positions(per, moved)
        checkpoint = {TopicPartition(topic, p): o for p, o in positions.items()}
        return ends, checkpoint, {p: 0 for p in ends}

    def topic_lags(
        self,
        store: KeeperStateStore | None,
        topic: str,
        *,
        clickhouse_sink: str | None,
        hudi_table: str | None,
        reset: str,
    ) -> list[PartitionLag]:
        """Per partition of ``topic``: records held, ends and each sink's lag, summed over the
        physical topics here (what a run of that partition reads). A Hudi table (``hudi_table``,
        following ``topic``) not moved here yet lags as a partition with nothing stored does."""
        stored = None if hudi_table is None else self._stored(latest_commit(hudi_table))
        hudi = dict(stored.positions) if stored is not None and stored.cluster == self.alias else {}
        totals: dict[int, PartitionLag] = {}
        for physical, ends in self.ends(topic).items():
            starts = start_offsets(self.kafka, physical)
            positions: dict[str, dict[int, int | None]] = {}
            if clickhouse_sink is not None and store is not None:
                records = store.read_many(self.fp.name, clickhouse_sink, physical, self.alias)
                positions[clickhouse_sink] = {
                    p: committed(sink_state(r.record)) for p, r in records.items()
                }
            if hudi_table is not None:
                positions["hudi"] = {p: hudi.get(TopicPartition(physical, p)) for p in ends}
            for row in partition_lags(ends, starts, positions, reset):  # type: ignore[arg-type]
                if (seen := totals.get(row.partition)) is not None:
                    lags = {s: seen.lags[s] + row.lags[s] for s in row.lags}
                    row = PartitionLag(
                        row.partition, seen.held + row.held, seen.end + row.end, lags
                    )
                totals[row.partition] = row
        return [totals[p] for p in sorted(totals)]


def _last_marks(
    kafka: KafkaSettings, ranges: Mapping[TopicPartition, OffsetRange]
) -> dict[TopicPartition, Mark | None]:
    """The mark of the last record in each range (None: no record there)."""
    marks: dict[TopicPartition, Mark | None] = {}
    with range_consumer(kafka) as consumer:
        for tp, wanted in sorted(ranges.items()):
            batch = read_range(kafka, tp, wanted, consumer=consumer)
            last = len(batch) - 1
            marks[tp] = (
                Mark.of_record(
                    batch.fingerprint(last), batch.offsets[last], batch.timestamps_ms[last]
                )
                if last >= 0
                else None
            )
    return marks


__all__ = ["ActiveCluster", "HudiPlan", "OneCluster", "Source"]
