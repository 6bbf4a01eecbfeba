"""What the sensors read for a pipeline with several clusters: the active one's state.

Runs of a clustered pipeline read partition ``p`` of every physical topic on the active cluster
(``T`` and its MirrorMaker 2 replicas), so the sensors read those too: the ClickHouse positions
under the active cluster's keys, the Hudi table's cluster position, the active cluster's end
offsets. The physical partitions fold into one state per Dagster partition
(:mod:`eos_pipeline.core.failover.fold`). While a switch is in flight the sensors skip: no sink
may run then. Wiring only: reads through the adapters, rules in the core.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.

from eos_pipeline.adapters.failover import FailoverPipeline, FailoverStates, partitions_of
from eos_pipeline.adapters.hudi_timeline import latest_commit
from eos_pipeline.adapters.kafka import KafkaSettings, end_offsets, start_offsets
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.metadata import CLICKHOUSE_SINK
from eos_pipeline.core.failover.fold import fold_keeper_states, fold_positions
from eos_pipeline.core.failover.table_position import stored_position
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import TopicState
from eos_pipeline.core.positions import (
    PartitionLag,
    committed,
    partition_lags,
    sink_state,
)

__all__ = [
    "ActiveCluster",
    "active_cluster",
    "clickhouse_states",
    "hudi_positions",
    "topic_lags",
]


class ActiveCluster:
    """A clustered pipeline on its active cluster (raises ``SwitchInProgress`` mid-switch)."""

    def __init__(self, pipeline: Pipeline, store: KeeperStateStore) -> None:
        from eos_pipeline.components.failover import failover_pipeline

        self.pipeline = pipeline
        self.fp: FailoverPipeline = failover_pipeline(pipeline)
        self.alias = FailoverStates(store).active(self.fp.name, self.fp.initial)
        self.kafka: KafkaSettings = self.fp.settings[self.alias]

    def ends(self, topic: str) -> dict[str, dict[int, int]]:
        """Last stable offsets of each physical topic of ``topic`` that exists here."""
        found = {}
        for physical in self.fp.clusters.topics(topic, self.alias):
            if partitions_of(self.kafka, physical.topic):
                found[physical.topic] = end_offsets(self.kafka, physical.topic)
        return found


def active_cluster(pipeline: Pipeline, store: KeeperStateStore) -> ActiveCluster:
    return ActiveCluster(pipeline, store)


def clickhouse_states(active: ActiveCluster, store: KeeperStateStore) -> list[TopicState]:
    """One folded :class:`TopicState` per pipeline topic, from the active cluster's keys."""
    states = []
    for topic in active.pipeline.kafka.topics:
        per: dict[int, list] = {}
        for physical, ends in active.ends(topic).items():
            records = store.read_many(active.fp.name, CLICKHOUSE_SINK, physical, active.alias)
            for p, end in ends.items():
                stored = records.get(p)
                per.setdefault(p, []).append((end, sink_state(stored.record if stored else None)))
        folded = {p: fold_keeper_states(items) for p, items in per.items()}
        states.append(
            TopicState(
                topic,
                {p: end for p, (end, _) in folded.items()},
                {p: state for p, (_, state) in folded.items() if state is not None},
                # nothing stored folds from offset 0 (see core.failover.fold)
                {p: 0 for p in folded},
            )
        )
    return states


def hudi_positions(
    active: ActiveCluster, table_path: str
) -> tuple[dict[int, int], dict[TopicPartition, int]]:
    """Folded ``(ends, checkpoint)`` of the pipeline's Hudi table on the active cluster."""
    topic = active.pipeline.kafka.topics[0]
    commit = latest_commit(table_path)
    stored = (
        None
        if commit is None
        else stored_position(commit.cluster_position, commit.checkpoint, active.fp.initial)
    )
    moved = stored is not None and stored.cluster != active.alias
    per: dict[int, list[tuple[int, int | None]]] = {}
    for physical, ends in active.ends(topic).items():
        for p, end in ends.items():
            at = None if stored is None else stored.positions.get(TopicPartition(physical, p))
            per.setdefault(p, []).append((end, at))
    ends, positions = fold_positions(per, moved)
    return ends, {TopicPartition(topic, p): o for p, o in positions.items()}


def topic_lags(
    active: ActiveCluster, store: KeeperStateStore | None, topic: str
) -> list[PartitionLag]:
    """Per partition of ``topic``: records held, ends and each sink's lag, summed over the
    physical topics on the active cluster (what a run of that partition will read).

    A Hudi table not moved to the active cluster yet counts its lag from the log start (or 0
    under ``reset: latest``), as a partition with nothing stored does.
    """
    pipeline = active.pipeline
    hudi: dict[TopicPartition, int] = {}
    if pipeline.hudi is not None and topic == pipeline.kafka.topics[0]:
        commit = latest_commit(pipeline.hudi.path)
        if commit is not None:
            stored = stored_position(commit.cluster_position, commit.checkpoint, active.fp.initial)
            hudi = dict(stored.positions) if stored.cluster == active.alias else {}
    totals: dict[int, PartitionLag] = {}
    for physical, ends in active.ends(topic).items():
        starts = start_offsets(active.kafka, physical)
        positions: dict[str, dict[int, int | None]] = {}
        if pipeline.clickhouse is not None and store is not None:
            records = store.read_many(active.fp.name, CLICKHOUSE_SINK, physical, active.alias)
            positions[CLICKHOUSE_SINK] = {
                p: committed(sink_state(r.record)) for p, r in records.items()
            }
        if pipeline.hudi is not None and topic == pipeline.kafka.topics[0]:
            positions["hudi"] = {p: hudi.get(TopicPartition(physical, p)) for p in ends}
        for row in partition_lags(ends, starts, positions, pipeline.reset):
            seen = totals.get(row.partition)
            if seen is None:
                totals[row.partition] = row
            else:
                lags = {s: seen.lags[s] + row.lags[s] for s in row.lags}
                totals[row.partition] = PartitionLag(
                    row.partition, seen.held + row.held, seen.end + row.end, lags
                )
    return [totals[p] for p in sorted(totals)]
