"""Run the ClickHouse sink on whichever cluster is active, over all its physical topics.

A pipeline with several clusters reads, on the active one, its topic ``T`` and each replica
MirrorMaker 2 makes of it there (``B.T`` on A, ``A.T`` on B). Each is a topic of its own with its
own positions (keyed by cluster), so the exactly-once loop of :mod:`eos_pipeline.sinks.clickhouse`
runs unchanged on each; a partition a switch moved first skips the copies of what was written
before it (:mod:`eos_pipeline.sinks.resume`). The sink refuses to run while a switch is in flight.
"""

from __future__ import annotations

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.failover import (
    FailoverPipeline,
    FailoverStates,
    partitions_of,
    record_syncs,
)
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.sinks.hooks import FaultHook, no_fault


def active_sync(
    fp: FailoverPipeline,
    spec: ClickHouseTableSpec,
    store: KeeperStateStore,
    sink: ClickHouseSink,
    dead_letter_topic: str,
    *,
    writer: str | None = None,
    fault: FaultHook = no_fault,
) -> ClickHousePartitionSync:
    """The sink loop on the active cluster (refused while a switch is in flight)."""
    active = FailoverStates(store).active(fp.name, fp.initial)
    kafka = fp.settings[active]
    # Keep the syncs a switch away from here would need, should this cluster go down.
    record_syncs(store, fp, active)
    return ClickHousePartitionSync(
        spec,
        kafka,
        store,
        sink,
        DeadLetterWriter(kafka, dead_letter_topic, spec.pipeline),
        writer=writer,
        fault=fault,
        cluster=active,
    )


def physical_partitions(
    fp: FailoverPipeline, sync: ClickHousePartitionSync, tp: TopicPartition
) -> list[TopicPartition]:
    """Partition ``tp.partition`` of each physical topic of ``tp.topic`` on the sync's cluster."""
    assert sync.cluster is not None
    return [
        TopicPartition(t.topic, tp.partition)
        for t in fp.clusters.topics(tp.topic, sync.cluster)
        if tp.partition < partitions_of(sync.kafka, t.topic)
    ]


__all__ = ["active_sync", "physical_partitions"]
