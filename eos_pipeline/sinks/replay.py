"""A deliberate replay into ClickHouse: delete a range's rows, then insert the range again.

The rule and its reasons are in :mod:`eos_pipeline.core.replay`; this module runs it over the
adapters. In order, each step safe to repeat:

1. take the partition's lease (a higher epoch fences any other writer of the partition) and
   re-plan under it; record ``RUNNING [a, b)`` in the replay journal;
2. write the replay marker to the dead-letter topic (earlier letters of the range stop counting
   for this sink; the letters of this replay are sent after it, naming the sink);
3. delete the partition's rows with offsets in ``[a, b)`` (a synchronous mutation);
4. per chunk: check the lease still holds (a compare-and-set of the unchanged keeper record),
   read the chunk from Kafka, insert its good rows under a replay token carrying the epoch;
5. record ``DONE``.

Killed anywhere, the journal stays ``RUNNING``; the same replay run again takes a new epoch,
deletes the range again and re-inserts all of it under new tokens: nothing is lost or doubled.
The sink's keeper position never moves.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    range_consumer,
    read_range,
    start_offsets,
    topic_id,
)
from eos_pipeline.adapters.keeper import KeeperStateStore, Lease, ReplayJournal, default_writer_id
from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.positions import check_same_log, sink_state
from eos_pipeline.core.replay import (
    DONE,
    RUNNING,
    JournalEntry,
    ReplayLogChanged,
    ReplayPlan,
    plan_replay,
)
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.sinks.hooks import FaultHook, no_fault

log = logging.getLogger(__name__)

__all__ = ["ClickHouseReplay", "ReplayReport"]


@dataclass
class ReplayReport:
    """What a replay did (run metadata and the command's printout)."""

    plan: ReplayPlan
    epoch: int | None = None
    markers: int = 0
    rows_deleted: int = 0
    records_read: int = 0
    rows_written: int = 0
    dead_letters: int = 0
    commits: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def metadata(self) -> dict[str, str | int | float]:
        out: dict[str, str | int | float] = {
            "replayed": f"{self.plan.tp} {self.plan.range}",
            "sink": self.plan.sink,
            "position (unchanged)": self.plan.position,
            "rows deleted": self.rows_deleted,
            "records read": self.records_read,
            "rows written": self.rows_written,
            "dead letters": self.dead_letters,
            "seconds": round(self.seconds, 3),
        }
        if self.commits:
            out["commits"] = ", ".join(self.commits)
        return out


class ClickHouseReplay:
    """Replays ranges of one pipeline's partitions into its ClickHouse table."""

    def __init__(
        self,
        spec: ClickHouseTableSpec,
        kafka: KafkaSettings,
        store: KeeperStateStore,
        sink: ClickHouseSink,
        dlq_topic: str,
        *,
        writer: str | None = None,
        fault: FaultHook = no_fault,
    ) -> None:
        self.spec = spec
        self.kafka = kafka
        self.store = store
        self.sink = sink
        # Letters of a replay name their sink: they count for this sink's proof only.
        self.dead_letters = DeadLetterWriter(kafka, dlq_topic, spec.pipeline, sink=spec.sink)
        self.journal = ReplayJournal(store, spec.pipeline, spec.sink)
        self.writer = writer or default_writer_id()
        self.fault = fault

    def plan(self, tp: TopicPartition, start: int, end: int | None = None) -> ReplayPlan:
        """What :meth:`run` would do, from the stored state; writes nothing (the dry run)."""
        stored = self.store.read(self._key(tp))
        return self._plan(tp, start, end, sink_state(stored.record if stored else None))

    def run(self, plan: ReplayPlan) -> ReplayReport:
        began = time.monotonic()
        tp = plan.tp
        lease = self.store.acquire(self._key(tp), writer=self.writer)
        # The state may have moved since the dry run: plan again under the lease, same range.
        current = self._plan(tp, plan.range.start, plan.range.end, sink_state(lease.record))
        check_same_log(
            str(tp),
            topic=tp.topic,
            stored_topic_id=lease.record.topic_id,
            topic_id=topic_id(self.kafka, tp.topic),
            error=ReplayLogChanged,
        )
        report = ReplayReport(current, epoch=lease.epoch)
        _, version = self.journal.read(tp)
        version = self.journal.write(tp, JournalEntry(current.range, RUNNING, lease.epoch), version)
        log.info("%s: replay of %s started at epoch %d", tp, current.range, lease.epoch)
        report.markers = self.dead_letters.send_marker(tp, self.spec.sink, current.range)
        self.fault("replay_after_marker")
        report.rows_deleted = self.sink.delete_offsets(
            self.spec.database,
            self.spec.table,
            tp.topic,
            tp.partition,
            current.range,
            source=self.spec.schema.source,
        )
        self.fault("replay_after_delete")
        inserter = ClickHousePartitionSync(
            self.spec, self.kafka, self.store, self.sink, self.dead_letters, writer=self.writer
        )
        # A token no earlier insert used: the originals are still in the dedup window.
        inserter.token_name = f"{inserter.token_name}~replay-{lease.epoch}"
        with range_consumer(self.kafka) as consumer:
            for chunk in current.chunks:
                self._hold(lease)
                batch = read_range(self.kafka, tp, chunk, consumer=consumer)
                sent, dead = inserter.insert_rows(batch, chunk)
                report.records_read += len(batch)
                report.rows_written += sent
                report.dead_letters += dead
                self.fault("replay_after_insert")
        self._hold(lease)
        self.journal.write(tp, JournalEntry(current.range, DONE, lease.epoch), version)
        report.seconds = time.monotonic() - began
        log.info("%s: replay of %s done: %s", tp, current.range, report.metadata())
        return report

    # ------------------------------------------------------------------------------- internals
    def _key(self, tp: TopicPartition) -> KeeperKey:
        return KeeperKey.of(self.spec.pipeline, self.spec.sink, tp)

    def _plan(
        self, tp: TopicPartition, start: int, end: int | None, state: SinkState | None
    ) -> ReplayPlan:
        pending, _ = self.journal.read(tp)
        return plan_replay(
            self.spec.pipeline,
            self.spec.sink,
            tp,
            start=start,
            end=end,
            state=state,
            log_start=start_offsets(self.kafka, tp.topic)[tp.partition],
            max_records=self.spec.max_records,
            pending=pending,
        )

    def _hold(self, lease: Lease) -> None:
        """Raise ``FencedError`` unless ``lease`` still holds the partition.

        Re-writes the unchanged record by compare-and-set: a writer that took the partition
        since (a sensor run, another replay) bumped the epoch and makes this fail.
        """
        record = lease.record
        assert record.range_start is not None and record.range_end is not None
        self.store.write(lease, record.range_start, record.range_end, Phase.AFTER.value)
