"""Sink runs the product no longer has, kept for the tests that pin what the loop does with them.

* :func:`run_range`: one explicit range through the ClickHouse loop (a hand-made backfill or
  replay): the tests use it to show how :func:`eos_pipeline.core.dedup.decide` treats a range
  against a stored state, on the real stack.
* :func:`run_active_clickhouse`: every partition of the active cluster's physical topics caught
  up, as the Dagster asset does through :class:`eos_pipeline.sinks.source.ActiveCluster`.
* :func:`hudi_positions`: where a one-cluster Hudi sink's next transaction starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.failover import FailoverPipeline, partitions_of, record_syncs
from eos_pipeline.adapters.kafka import read_range
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.core.dedup import OffsetRegressionError, decide
from eos_pipeline.core.failover import ResumeError
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.positions import sink_state
from eos_pipeline.sinks.clickhouse import (
    BatchReport,
    ClickHousePartitionSync,
    ClickHouseTableSpec,
    SyncReport,
)
from eos_pipeline.sinks.hooks import FaultHook, no_fault
from eos_pipeline.sinks.source import ActiveCluster

if TYPE_CHECKING:  # pyspark: loaded by Hudi tests only
    from eos_pipeline.core.checkpoint import Checkpoint
    from eos_pipeline.sinks.hudi import HudiTableSync


def run_range(
    sync: ClickHousePartitionSync, tp: TopicPartition, wanted: OffsetRange
) -> BatchReport:
    """Process one explicit range; already-written data is skipped.

    Bounds are decided before anything is touched: a range below the stored start is refused
    without a read from Kafka, an insert, or a keeper write (not even the epoch bump); so is a
    range of a partition a switch moved here before the sink found its last record.
    """
    key = KeeperKey.of(sync.spec.pipeline, sync.spec.sink, tp, sync.cluster)
    stored = sync.store.read(key)
    record = stored.record if stored else None
    if record is not None and record.mark is not None and record.mark.pending:
        raise ResumeError(
            f"{tp}: a switch moved this partition here and the sink has not found the last "
            "record written before it yet; run the partition (not a range) first"
        )
    error = decide(sink_state(record), wanted, tp).error
    if error is not None:
        raise OffsetRegressionError(error)
    lease = sync.store.acquire(key, writer=sync.writer)
    tid = sync._same_topic(tp, lease.record)
    batch = read_range(sync.kafka, tp, wanted)
    return sync._process(lease, sink_state(lease.record), batch, tid)


def run_active_clickhouse(
    fp: FailoverPipeline,
    spec: ClickHouseTableSpec,
    store: KeeperStateStore,
    sink: ClickHouseSink,
    dead_letter_topic: str,
    *,
    fault: FaultHook = no_fault,
) -> list[SyncReport]:
    """Catch every partition of the active cluster's physical topics up; one report each."""
    sync = ActiveCluster(fp, store).clickhouse_sync(
        spec, store, sink, dead_letter_topic, fault=fault
    )
    assert sync.cluster is not None
    reports = []
    for topic in fp.topics:
        for physical in fp.clusters.topics(topic, sync.cluster):
            for partition in range(partitions_of(sync.kafka, physical.topic)):
                reports.append(sync.run(TopicPartition(physical.topic, partition)))
    record_syncs(store, fp, sync.cluster)
    return reports


def hudi_positions(sync: HudiTableSync) -> Checkpoint | None:
    """Next offset per partition after the latest completed commit of a one-cluster Hudi sink's
    table (None for a new table)."""
    from eos_pipeline.adapters.hudi_timeline import latest_commit

    commit = latest_commit(sync.spec.table_path)
    return commit.checkpoint if commit else None
