"""The Hudi sink of a pipeline with several clusters: the active one's topics, exactly once.

The table's position stays in its commits (the single source of truth, as for any Hudi table),
but each commit of a clustered pipeline also stores a cluster position
(:class:`~eos_pipeline.core.failover.TablePosition`): the cluster, the next offset
of every physical topic read there (``T`` and each MirrorMaker 2 replica such as ``B.T``) and the
fingerprint of the last record written per partition. One transaction reads all of them.

A switch (``eos-pipeline failover``) moves only the keeper's active cluster. When a run finds the
latest commit on another cluster, it moves the position itself with the core's rule: translated
through the offset syncs, a pending mark per partition, then the copy of the last record written
is found by fingerprint in the re-read window (``sinks.resume.locate_copy``) and everything up to
it is skipped; the first commit on the new cluster stores the result. Because the move starts
from whatever commit is latest, a write still in flight on the old cluster when the switch ran is
carried over as well; Hudi's commit fence keeps an old-cluster and a new-cluster writer from
both committing. Runs are refused while a switch is in flight.

Rows store their source topic with the cluster (``A:T``, ``B:A.T``; ``core.failover.row_topic``):
``T`` on A and ``T`` on B are different records, and the source coordinates are the record key.

Tables written before clusters were configured (a checkpoint without a cluster position) are read
as positions on the pipeline's initial cluster; the record before each position is marked on the
first run, so the table can then move. Their rows keep the plain topic name.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.failover import (
    FailoverPipeline,
    FailoverStates,
    TimeFloors,
    first_offset,
    partitions_of,
    record_syncs,
    refresh,
)
from eos_pipeline.adapters.hudi import CommitInfo, latest_commit
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    end_offsets,
    range_consumer,
    read_range,
    start_offsets,
)
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.core.failover import (
    SyncHistory,
    TablePosition,
    carry_over,
    flows_needed,
    row_topic,
    stored_position,
    streamer_checkpoint,
)
from eos_pipeline.core.keeper import Mark
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.positions import check_same_log, checkpoint_state, start_offset
from eos_pipeline.sinks.hooks import FaultHook, SourceHook, no_fault
from eos_pipeline.sinks.hudi import (
    HudiPlan,
    HudiReport,
    HudiSinkError,
    HudiTableSpec,
    HudiTableSync,
)
from eos_pipeline.sinks.hudi_spec import HudiLogChanged
from eos_pipeline.sinks.resume import locate_copy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterHudiPlan(HudiPlan):
    """A transaction over the active cluster's physical topics, with its cluster position."""

    cluster: str = ""
    #: Position before this transaction: carried over from another cluster if a switch happened,
    #: and moved past the copies of what was already written.
    position: TablePosition | None = None
    #: The cluster position of the latest commit, as stored (None: new or single-cluster table).
    stored: str | None = None
    #: The latest commit was on another cluster: the streamer summary may move back.
    moved: bool = False
    reread: int = 0
    skipped: int = 0
    summary_partitions: int = 0

    @property
    def has_work(self) -> bool:
        assert self.position is not None
        reading = any(not r.is_empty for r in self.ranges.values())
        return reading or self.position.encode() != self.stored

    @property
    def partition_count(self) -> int:
        return self.summary_partitions


class ClusterHudiSync(HudiTableSync):
    """:class:`HudiTableSync` on the pipeline's active cluster (one instance per run)."""

    def __init__(
        self,
        fp: FailoverPipeline,
        spec: HudiTableSpec,
        store: KeeperStateStore,
        spark: SparkSession,
        dead_letter_topic: str,
        *,
        fault: FaultHook = no_fault,
        source_hook: SourceHook | None = None,
    ) -> None:
        self.fp = fp
        self.states = FailoverStates(store)
        self.cluster = self.states.active(fp.name, fp.initial)  # refused while switching
        record_syncs(store, fp, self.cluster)  # for a switch away from here, should it go down
        kafka = fp.settings[self.cluster]
        dead_letters = DeadLetterWriter(kafka, dead_letter_topic, spec.pipeline)
        super().__init__(spec, kafka, spark, dead_letters, fault=fault, source_hook=source_hook)
        self._after: TablePosition | None = None

    # ------------------------------------------------------------------------------- reading
    def stored_position(self, commit: CommitInfo | None) -> TablePosition | None:
        """The cluster position of ``commit``; a plain checkpoint is on the initial cluster."""
        if commit is None:
            return None
        foreign = sorted({tp.topic for tp in commit.checkpoint} - {self.spec.topic})
        if commit.cluster_position is None and foreign:
            raise HudiSinkError(
                f"{self.spec.table_path}: the table's checkpoint is for topic(s) {foreign}, "
                f"not {self.spec.topic!r}; one Hudi table follows one topic"
            )
        return stored_position(commit.cluster_position, commit.checkpoint, self.fp.initial)

    def positions(self) -> dict[TopicPartition, int] | None:
        """Next offset per physical partition of the latest commit (on its own cluster)."""
        stored = self.stored_position(latest_commit(self.spark, self.spec.table_path))
        return None if stored is None else dict(stored.positions)

    def _carry_over(self, stored: TablePosition) -> TablePosition:
        """Move a position stored on another cluster to the active one (pending marks)."""
        fp, topics = self.fp, (self.spec.topic,)
        flows = flows_needed(stored, self.cluster, fp.clusters, topics) & set(fp.clusters.flows)
        # from the syncs topic, or the keeper's copy while the old cluster does not answer
        histories = {flow: refresh(self.states.store, fp, flow) for flow in sorted(flows)}

        def floor(tp: TopicPartition) -> int:
            try:
                return first_offset(self.kafka, tp)
            except Exception as exc:  # the replica topic may not exist yet
                raise HudiSinkError(
                    f"{self.cluster}:{tp} cannot be read ({exc}); is MirrorMaker 2 replicating "
                    f"to {self.cluster!r}? Nothing was written"
                ) from None

        moved, moves = carry_over(
            stored,
            self.cluster,
            fp.clusters,
            topics,
            {f: histories.get(f, SyncHistory(f)) for f in flows},
            floor,
            TimeFloors(self.kafka),
        )
        for m in moves:
            log.info(
                "%s: %s[%d] moved to %s[%d] at %d (bound: %s; last written: %s)",
                self.spec.table_name,
                m.route.source,
                m.partition,
                m.route.target,
                m.partition,
                m.position,
                m.bound,
                m.mark.fingerprint if m.mark else "no mark, exact translation",
            )
        return moved

    def plan(
        self,
        partitions: Collection[int] | None = None,
        until: Mapping[int, int] | None = None,
    ) -> ClusterHudiPlan:
        """Fix the next transaction; ``until`` caps the local topic's partitions only."""
        spec, topic, kafka = self.spec, self.spec.topic, self.kafka
        active = self.states.active(self.fp.name, self.fp.initial)
        if active != self.cluster:
            raise HudiSinkError(
                f"{self.fp.name}: the active cluster moved from {self.cluster!r} to {active!r} "
                "since this run started; nothing was read, run again"
            )
        previous = latest_commit(self.spark, spec.table_path)
        stored = self.stored_position(previous)
        position = TablePosition(active, {})
        moved = stored is not None and stored.cluster != active
        if stored is not None:
            position = self._carry_over(stored) if moved else stored
        ends: dict[TopicPartition, int] = {}
        lows: dict[TopicPartition, int] = {}
        counts = []
        for physical in self.fp.clusters.topics(topic, active):
            count = partitions_of(kafka, physical.topic)
            counts.append(count)
            if count:
                for p, e in end_offsets(kafka, physical.topic).items():
                    ends[TopicPartition(physical.topic, p)] = e
                for p, low in start_offsets(kafka, physical.topic).items():
                    lows[TopicPartition(physical.topic, p)] = low
        check_same_log(
            f"{spec.table_path} on {active!r}",
            topic=topic,
            stored_partitions=position.positions,
            present=ends,
            error=HudiLogChanged,
        )
        reread = skipped = 0
        for tp, mark in sorted(position.pending.items()):
            start = position.positions[tp]
            at, found, n_read, n_skip = locate_copy(kafka, tp, start, mark, ends[tp])
            position = position.advanced({tp: at}, {tp: found})
            reread, skipped = reread + n_read, skipped + n_skip
        unmarked = [
            tp
            for tp, at in position.positions.items()
            if tp not in position.marks and at > lows[tp]
        ]
        if unmarked:  # written before marks were kept: mark the record before each position
            position = position.advanced({}, _marks_before(kafka, unmarked, position, lows))
        start_at = {  # the one rule: stored position, else the reset policy
            tp: start_offset(
                checkpoint_state(position.positions.get(tp)),
                spec.reset,
                end=ends[tp],
                log_start=lows[tp],
            )
            for tp in sorted(ends)
        }
        # Where this cluster's stretch starts: after a move, the resume point found above (all
        # before it was written from the other cluster); a partition read for the first time,
        # its first offset. Kept until the next move, for the exactly-once check.
        since = {tp: at for tp, at in start_at.items() if tp not in position.positions}
        if moved:
            since.update(position.positions)
        position = position.advanced(start_at, {}, since)
        chosen = None if partitions is None else set(partitions)
        ranges: dict[TopicPartition, OffsetRange] = {}
        for tp, begin in sorted(start_at.items()):
            if chosen is not None and tp.partition not in chosen:
                continue
            check_same_log(
                f"{active}:{tp}",
                topic=tp.topic,
                position=begin,
                log_end=ends[tp],
                log_start=lows[tp],
                error=HudiLogChanged,
            )
            end = min(ends[tp], begin + spec.max_records_per_partition)
            if until is not None and tp.topic == topic and tp.partition in until:
                end = max(begin, min(end, until[tp.partition]))
            ranges[tp] = OffsetRange(begin, end)
        after = position.advanced({tp: r.end for tp, r in ranges.items()}, {})
        summary_count = max([*counts, len(previous.checkpoint) if previous else 0, 1])
        return ClusterHudiPlan(
            previous,
            dict(position.positions),
            ranges,
            streamer_checkpoint(topic, after, summary_count),
            ends,
            None,
            cluster=active,
            position=position,
            stored=previous.cluster_position if previous else None,
            moved=moved or (previous is not None and previous.cluster_position is None),
            reread=reread,
            skipped=skipped,
            summary_partitions=summary_count,
        )

    # ------------------------------------------------------------------------------- writing
    def _commit_extras(
        self, plan: HudiPlan, last_offsets: Mapping[TopicPartition, int]
    ) -> tuple[str | None, bool]:
        """The cluster position after this transaction, with the mark of each last record."""
        assert isinstance(plan, ClusterHudiPlan) and plan.position is not None
        marks: dict[TopicPartition, Mark | None] = {}
        with range_consumer(self.kafka) as consumer:
            for tp, offset in sorted(last_offsets.items()):
                batch = read_range(
                    self.kafka, tp, OffsetRange(offset, offset + 1), consumer=consumer
                )
                if len(batch) != 1:
                    raise HudiSinkError(f"{tp}: the record at offset {offset} cannot be read back")
                marks[tp] = Mark.of_record(
                    batch.fingerprint(0), batch.offsets[0], batch.timestamps_ms[0]
                )
        ends = {tp: r.end for tp, r in plan.ranges.items()}
        self._after = plan.position.advanced(ends, marks)
        return self._after.encode(), plan.moved

    def table_rows(self, good: DataFrame) -> DataFrame:
        """Rows whose source topic names the cluster too (``B:T``), see ``row_topic``."""
        column = self.spec.schema.source.topic
        prefix = row_topic(self.cluster, "")
        return super().table_rows(good).withColumn(column, F.concat(F.lit(prefix), F.col(column)))

    def run_plan(self, plan: HudiPlan) -> HudiReport:
        assert isinstance(plan, ClusterHudiPlan) and plan.position is not None
        self._after = None
        report = super().run_plan(plan)
        after = self._after if report.instant_time is not None else plan.position
        assert after is not None
        report.checkpoint_after = dict(after.positions)
        report.cluster, report.reread, report.skipped = plan.cluster, plan.reread, plan.skipped
        if plan.reread:
            log.info(
                "%s: resumed on %s exactly: %d records re-read, %d skipped",
                self.spec.table_name,
                plan.cluster,
                plan.reread,
                plan.skipped,
            )
        return report


def _marks_before(
    kafka: KafkaSettings,
    partitions: list[TopicPartition],
    position: TablePosition,
    lows: Mapping[TopicPartition, int],
    lookback: int = 64,
) -> dict[TopicPartition, Mark | None]:
    """The mark of the last record before each position (a table written before marks).

    Looks back at most ``lookback`` offsets: transaction markers take offsets too, so the last
    record may lie a few offsets before the position. None when none is found: such a position
    then moves to another cluster only by an exact translation, as before.
    """
    marks: dict[TopicPartition, Mark | None] = {}
    with range_consumer(kafka) as consumer:
        for tp in sorted(partitions):
            at = position.positions[tp]
            batch = read_range(
                kafka, tp, OffsetRange(max(lows[tp], at - lookback), at), consumer=consumer
            )
            last = len(batch) - 1
            marks[tp] = (
                Mark.of_record(
                    batch.fingerprint(last), batch.offsets[last], batch.timestamps_ms[last]
                )
                if last >= 0
                else None
            )
    return marks


__all__ = ["ClusterHudiPlan", "ClusterHudiSync"]
