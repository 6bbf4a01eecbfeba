"""Where a pipeline reads: its one Kafka cluster, or the active one of several (MM2 failover).

The sinks and the Dagster layer ask a :class:`Source` and never test which kind they hold. Both
kinds answer the same questions: which cluster and Kafka settings a run reads, which physical
partitions a Dagster partition stands for, the sink that writes from there, what the sensors
compare (each partition's end and stored position) and what to keep before a write.

* :class:`OneCluster`: topic ``T`` of the configured cluster; positions, rows and dedup tokens
  name the plain topic.
* :class:`ActiveCluster`: on the cluster the keeper says is active, ``T`` and each replica
  MirrorMaker 2 makes of it there (``B.T`` on A), each a topic with its own positions keyed by
  cluster; rows name the cluster (``A:T``, ``core.failover.table_position.row_topic``) and so
  do tokens. The physical topics fold into one state per Dagster partition
  (:mod:`eos_pipeline.core.failover`). Built from the keeper's state, refused while a
  switch is in flight (``SwitchInProgress``): no sink may run then, and the sensors skip.

Built per run or sensor tick by ``components.source.PipelineSource.at``. Wiring only: reads
through the adapters, the rules are in the core.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.failover import (
    FailoverPipeline,
    FailoverStates,
    partitions_of,
    record_syncs,
)
from eos_pipeline.adapters.hudi_timeline import latest_checkpoint, latest_commit
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    TopicInfo,
    TopicMissingError,
    describe,
    end_offsets,
    end_offsets_of,
    partition_count,
    start_offsets,
)
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.failover import fold_keeper_states, fold_positions, stored_position
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import TopicState
from eos_pipeline.core.positions import PartitionLag, committed, partition_lags, sink_state
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.sinks.hooks import FaultHook, SourceHook, no_fault

if TYPE_CHECKING:  # the Hudi sink imports pyspark: a ClickHouse run or a sensor never loads it
    from pyspark.sql import SparkSession

    from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync

#: Whether a topic's stored positions need its log starts (``core.planning``'s rules).
NeedsStarts = Callable[[TopicState], bool]
#: ``(ends, checkpoint) -> bool``: the same for a Hudi table's checkpoint.
HudiNeedsStarts = Callable[[Mapping[int, int], Checkpoint], bool]
#: ``(ends, positions per partition, checkpoint-less lows)`` of a Hudi table, as a sensor reads.
HudiPositions = tuple[dict[int, int], Checkpoint, dict[int, int] | None]


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
    def hudi_sync(
        self,
        spec: HudiTableSpec,
        spark: SparkSession,
        dead_letter_topic: str,
        *,
        fault: FaultHook = no_fault,
        source_hook: SourceHook | None = None,
    ) -> HudiTableSync:
        """The Hudi sink reading here (one transaction per ``run``)."""

    @abstractmethod
    def before_write(self) -> None:
        """What to keep before a sink writes from here."""

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
        counts: dict[str, int] = {}
        missing: list[str] = []
        # One request for every topic; Kafka not answering raises (a sensor's skip reason names
        # it), a topic it refuses is missing.
        infos = describe(self.kafka, topics)
        for topic in topics:
            if isinstance(info := infos[topic], TopicInfo):
                counts[topic] = info.partitions
            else:
                missing.append(topic)
        return counts, missing

    def hudi_sync(
        self,
        spec: HudiTableSpec,
        spark: SparkSession,
        dead_letter_topic: str,
        *,
        fault: FaultHook = no_fault,
        source_hook: SourceHook | None = None,
    ) -> HudiTableSync:
        from eos_pipeline.sinks.hudi import HudiTableSync

        dead_letters = DeadLetterWriter(self.kafka, dead_letter_topic, spec.pipeline)
        return HudiTableSync(
            spec, self.kafka, spark, dead_letters, fault=fault, source_hook=source_hook
        )

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
        found = {}
        for physical in self.physical_topics(topic):
            if partitions_of(self.kafka, physical):
                found[physical] = end_offsets(self.kafka, physical)
        return found

    def partitions(self, tp: TopicPartition) -> list[TopicPartition]:
        return [
            TopicPartition(t, tp.partition)
            for t in self.physical_topics(tp.topic)
            if tp.partition < partitions_of(self.kafka, t)
        ]

    def partition_counts(self, topics: Sequence[str]) -> tuple[dict[str, int], list[str]]:
        """A logical topic has as many partitions as the largest of its physical topics here."""
        counts: dict[str, int] = {}
        missing: list[str] = []
        for topic in topics:
            found = [
                partition_count(self.kafka, physical)
                for physical in self.physical_topics(topic)
                if _exists(self.kafka, physical)
            ]
            if found:
                counts[topic] = max(found)
            else:
                missing.append(topic)
        return counts, missing

    def before_write(self) -> None:
        # Keep the syncs a switch away from here would need, should this cluster go down.
        record_syncs(self.store, self.fp, self.alias)

    def hudi_sync(
        self,
        spec: HudiTableSpec,
        spark: SparkSession,
        dead_letter_topic: str,
        *,
        fault: FaultHook = no_fault,
        source_hook: SourceHook | None = None,
    ) -> HudiTableSync:
        from eos_pipeline.sinks.hudi_clusters import ClusterHudiSync

        return ClusterHudiSync(
            self.fp,
            spec,
            self.store,
            spark,
            dead_letter_topic,
            fault=fault,
            source_hook=source_hook,
        )

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
                    stored = records.get(p)
                    per.setdefault(p, []).append(
                        (end, sink_state(stored.record if stored else None))
                    )
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
        commit = latest_commit(table_path)
        stored = (
            None
            if commit is None
            else stored_position(commit.cluster_position, commit.checkpoint, self.fp.initial)
        )
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
        physical topics here (what a run of that partition will read).

        A Hudi table (``hudi_table``: the one that follows ``topic``) not moved to this cluster
        yet counts its lag from the log start (or 0 under ``reset: latest``), as a partition
        with nothing stored does.
        """
        hudi: dict[TopicPartition, int] = {}
        if hudi_table is not None:
            commit = latest_commit(hudi_table)
            if commit is not None:
                stored = stored_position(
                    commit.cluster_position, commit.checkpoint, self.fp.initial
                )
                hudi = dict(stored.positions) if stored.cluster == self.alias else {}
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
                seen = totals.get(row.partition)
                if seen is None:
                    totals[row.partition] = row
                else:
                    lags = {s: seen.lags[s] + row.lags[s] for s in row.lags}
                    totals[row.partition] = PartitionLag(
                        row.partition, seen.held + row.held, seen.end + row.end, lags
                    )
        return [totals[p] for p in sorted(totals)]


def _exists(kafka: KafkaSettings, topic: str) -> bool:
    """Whether a physical topic exists on a reachable cluster (an unreachable one raises)."""
    try:
        partition_count(kafka, topic)
    except TopicMissingError:  # a missing topic, not a cluster that does not answer
        return False
    return True


__all__ = ["ActiveCluster", "OneCluster", "Source"]
