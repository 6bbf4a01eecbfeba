"""The exactly-once transaction of one Kafka topic into one Hudi table.

One transaction is one Hudi commit, and the commit is the only place the position is kept:

1. plan: read the checkpoint of the table's latest *completed* commit (a crashed write is only
   ``requested``/``inflight`` and is never read; Hudi rolls it back on the next write), fix the
   end offsets now (last stable offset, one request for the topic) and derive one offset range
   per chosen partition, capped by the batch limit. Partitions the table has never seen start
   from the reset policy. Offsets the table still needs but Kafka no longer holds (retention, a
   recreated topic) stop the plan with an error instead of being skipped (the rule:
   :mod:`eos_pipeline.core.planning`);
2. read exactly those ranges with Spark's Kafka source, decode with the declared schema, send
   the records that do not decode to the dead-letter topic;
3. write the good rows in one Hudi write whose commit metadata carries the next offset of
   *every* partition of the topic (the ones not in this transaction carried forward). The
   Spark side of steps 2 and 3 is in :mod:`eos_pipeline.sinks.hudi_rows`, shared with the replay.

If anything fails before the commit completes, the table and its checkpoint are as they were
and a retry plans the same ranges again (pass the same ``until`` to get exactly the same ends).
If the process dies after the commit completed, the next plan starts from the new checkpoint:
nothing is written twice. Dead letters sent by an attempt that did not commit are sent again by
the retry with the same source coordinates, which is what readers de-duplicate on.

Hudi tables take one writer at a time: runs are serialized per table by Dagster (see
``dagster.yaml``) and, as a second line, the commit is fenced: under Hudi's optimistic
concurrency control and commit lock, it is refused if any checkpoint-carrying commit completed
after the one the plan started from (``adapters.hudi.write_transaction``). Kafka's topic id is
stored next to the checkpoint, so a topic deleted and recreated under the same name is refused
even once its new log has grown past the stored offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi import CommitInfo, Operation, latest_commit, write_transaction
from eos_pipeline.adapters.kafka import KafkaSettings, end_offsets, start_offsets, topic_id
from eos_pipeline.adapters.spark import read_kafka_ranges, split_tagged, tag_json
from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.decode import writer_ids
from eos_pipeline.core.errors import LogChanged
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import (
    AUTO_STEADY_OPERATION,
    TransactionRefused,
    WriteOperation,
    plan_ranges,
    planned_records,
    transaction_operation,
)
from eos_pipeline.core.positions import check_same_log
from eos_pipeline.sinks.hooks import FaultHook, SourceHook, no_fault
from eos_pipeline.sinks.hudi_rows import (
    computed_once,
    count_read,
    send_dead_letters,
    sink_write_options,
    table_rows,
)
from eos_pipeline.sinks.hudi_spec import (
    HudiLogChanged,
    HudiPlan,
    HudiReport,
    HudiSinkError,
    HudiTableSpec,
)
from eos_pipeline.sinks.schema_follow import SchemaFollower

log = logging.getLogger(__name__)


class HudiTableSync:
    """Moves a Kafka topic into a Hudi table, one atomic commit per transaction."""

    def __init__(
        self,
        spec: HudiTableSpec,
        kafka: KafkaSettings,
        spark: SparkSession,
        dead_letters: DeadLetterWriter,
        *,
        fault: FaultHook = no_fault,
        source_hook: SourceHook | None = None,
    ) -> None:
        self.spec = spec
        self.kafka = kafka
        self.spark = spark
        self.dead_letters = dead_letters
        self.fault = fault
        self.source_hook = source_hook
        #: The schema written with, following a registry subject's newer writer schemas.
        self.follower = SchemaFollower(spec.schema)

    # ------------------------------------------------------------------------------- reading
    def positions(self) -> Checkpoint | None:
        """Next offset per partition after the latest completed commit; None for a new table."""
        commit = latest_commit(self.spark, self.spec.table_path)
        return commit.checkpoint if commit else None

    def plan(
        self,
        partitions: Collection[int] | None = None,
        until: Mapping[int, int] | None = None,
    ) -> HudiPlan:
        """Fix the next transaction without side effects; ``partitions`` default to all."""
        spec, topic = self.spec, self.spec.topic
        previous = latest_commit(self.spark, spec.table_path)
        current_id = topic_id(self.kafka, topic)
        check_same_log(
            spec.table_path,
            topic=topic,
            stored_topic_id=previous.topic_id if previous else None,
            topic_id=current_id,
            error=HudiLogChanged,
        )
        ends = end_offsets(self.kafka, topic)
        lows = start_offsets(self.kafka, topic)
        try:
            planned = plan_ranges(
                spec.table_path,
                topic,
                previous.checkpoint if previous else {},
                ends,
                lows,
                reset=spec.reset,
                max_records=spec.max_records_per_partition,
                partitions=partitions,
                until=until,
            )
        except LogChanged as exc:
            raise HudiLogChanged(str(exc), exc.reason) from None
        except TransactionRefused as exc:
            raise HudiSinkError(str(exc)) from None
        return HudiPlan(
            previous,
            planned.start,
            planned.ranges,
            planned.checkpoint,
            {TopicPartition(topic, p): e for p, e in ends.items()},
            current_id,
        )

    # ------------------------------------------------------------------------------- writing
    def run(
        self,
        partitions: Collection[int] | None = None,
        until: Mapping[int, int] | None = None,
    ) -> HudiReport:
        """Plan and commit one transaction; return what it did (no commit if nothing to do)."""
        return self.run_plan(self.plan(partitions, until))

    def run_plan(self, plan: HudiPlan) -> HudiReport:
        began = time.monotonic()
        spec = self.spec
        report = HudiReport(
            instant_time=None,
            ranges=dict(plan.ranges),
            checkpoint_before=plan.previous.checkpoint if plan.previous else None,
            checkpoint_after=plan.checkpoint if plan.has_work else dict(plan.start),
            end_offsets=dict(plan.end_offsets),
        )
        self._log_plan(plan)
        if not plan.has_work:
            log.info("%s: caught up, nothing to commit", spec.table_name)
            return report
        wanted = {tp: r for tp, r in plan.ranges.items() if not r.is_empty}
        self.follow_writers(wanted)
        spec = self.spec
        # Read and parse once: the parsed rows are kept, and ONE Spark job both fills that cache
        # and counts records and bad rows per partition; the bad rows are only fetched if there
        # are any, and the write reads the cache (no second Kafka read, no second parse).
        decoded = tag_json(self.read(wanted), spec.schema, max_record_bytes=spec.max_record_bytes)
        with computed_once(self.spark, decoded) as tagged:
            counts = count_read(
                self.spark, tagged, plan.ranges, table_name=spec.table_name, topic=spec.topic
            )
            report.records_read = counts.records
            good, bad = split_tagged(tagged, spec.schema)
            report.dead_letters = (
                self._send_dead_letters(bad, plan)
                if counts.any_bad
                else {tp: 0 for tp in plan.ranges}
            )
            report.rows_written = {
                tp: report.records_read[tp] - report.dead_letters.get(tp, 0) for tp in plan.ranges
            }
            cluster_position, allow_rewind = self._commit_extras(plan, counts.last)
            operation = self.operation(plan)
            self.fault("before_hudi_write")
            commit = self.write(
                self.table_rows(good),
                plan.checkpoint,
                partition_count=plan.partition_count,
                previous=plan.previous.checkpoint if plan.previous else None,
                topic_id=plan.topic_id,
                operation=operation,
                allow_rewind=allow_rewind,
                cluster_position=cluster_position,
            )
            self.fault("after_hudi_commit")
        report.instant_time = commit.instant_time
        report.operation = operation
        report.seconds = time.monotonic() - began
        log.info(
            "%s: commit %s (%s): %d records read, %d rows written, %d dead letters, in %.1f s",
            spec.table_name,
            commit.instant_time,
            operation,
            report.total_records_read,
            report.total_rows_written,
            report.total_dead_letters,
            report.seconds,
        )
        return report

    def operation(self, plan: HudiPlan) -> WriteOperation:
        """The Hudi operation of ``plan``'s commit: the configured one, ``auto`` by its size.

        ``auto`` bulk-inserts only where no record key can repeat: keys holding the source
        coordinates (the default key).
        """
        spec, source = self.spec, self.spec.schema.source
        coordinates = {source.topic, source.partition, source.offset}
        return transaction_operation(
            spec.operation,
            planned_records(plan.ranges.values()),
            bulk_insert_min_records=spec.bulk_insert_min_records,
            unique_keys=coordinates <= set(spec.record_key_fields),
        )

    # ------------------------------------------------- shared with the replay (sinks.hudi_replay)
    def read(self, wanted: Mapping[TopicPartition, OffsetRange]) -> DataFrame:
        """Kafka's records of exactly these ranges (through the source hook, if any)."""
        raw = read_kafka_ranges(
            self.spark, self.kafka.bootstrap_servers, self.spec.kafka_options, wanted
        )
        return raw if self.source_hook is None else self.source_hook(raw)

    def table_rows(self, good: DataFrame) -> DataFrame:
        """Decoded rows in the table's column names."""
        return table_rows(good, self.spec.schema)

    def write_options(self) -> dict[str, str]:
        """The table's Hudi options plus the sink's (see :func:`sink_write_options`)."""
        return sink_write_options(self.spec.record_key_fields, self.spec.hudi_options)

    def write(
        self,
        rows: DataFrame,
        checkpoint: Checkpoint,
        *,
        partition_count: int,
        previous: Checkpoint | None,
        topic_id: str | None,
        operation: Operation | None = None,
        options: Mapping[str, str] | None = None,
        allow_rewind: bool = False,
        cluster_position: str | None = None,
    ) -> CommitInfo:
        """One fenced commit of ``rows`` carrying ``checkpoint``, keyed as the spec says.

        ``operation`` defaults to the spec's; ``auto`` there means its steady operation, since
        the size of ``rows`` is not known here (``run_plan`` decides from the plan).
        """
        spec = self.spec
        if operation is None:
            operation = AUTO_STEADY_OPERATION if spec.operation == "auto" else spec.operation
        return write_transaction(
            rows,
            spec.table_path,
            spec.table_name,
            checkpoint,
            table_type=spec.table_type,
            record_key_fields=spec.record_key_fields,
            ordering_field=spec.ordering_field,
            partition_fields=spec.partition_fields,
            operation=operation,
            partition_count=partition_count,
            expected_previous=previous,
            allow_rewind=allow_rewind,
            topic_id=topic_id,
            cluster_position=cluster_position,
            options=self.write_options() if options is None else dict(options),
        )

    # ------------------------------------------------------------------------------- internals
    def follow_writers(self, wanted: Mapping[TopicPartition, OffsetRange]) -> None:
        """Decode and write with the newest writer schema of the transaction's ranges.

        Hudi evolves its table schema on write (a new nullable column; older rows read NULL),
        in the same commit as the rows, so a kill anywhere leaves either the old table or the
        evolved one with its rows, never one without the other. Costs one more Spark pass over
        the ranges (one value per distinct 5-byte header), for a subject's tables only.
        """
        if not self.follower.follows:
            return
        firsts = (
            self.read(wanted)
            .where(F.col("value").isNotNull())
            .groupBy(F.substring("value", 1, 5).alias("header"))
            .agg(F.min("value").alias("value"))
            .collect()
        )
        ids = writer_ids([bytes(r["value"]) for r in firsts], self.spec.schema.format.kind)
        for evolution in self.follower.plan(ids):
            self.follower.adopt(evolution)
            log.info("%s follows writer schema id %d: %s", self.spec.table_name,
                     evolution.writer_id, evolution.describe())  # fmt: skip
        self.follower.settle(ids)
        if self.follower.schema is not self.spec.schema:
            self.spec = replace(self.spec, schema=self.follower.schema)

    def _commit_extras(
        self, plan: HudiPlan, last_offsets: Mapping[TopicPartition, int]
    ) -> tuple[str | None, bool]:
        """What the commit stores besides the checkpoint, and whether it may move back.

        ``last_offsets``: offset of the last record read per partition. A single-cluster table
        stores nothing more and never moves back; see ``sinks.hudi_clusters``.
        """
        return None, False

    def _send_dead_letters(self, bad: DataFrame, plan: HudiPlan) -> dict[TopicPartition, int]:
        return send_dead_letters(self.dead_letters, bad, plan.ranges)

    def _log_plan(self, plan: HudiPlan) -> None:
        log.info(
            "%s: %s; transaction over %d partition(s): %s",
            self.spec.table_name,
            f"latest commit {plan.previous.instant_time}" if plan.previous else "new table",
            len(plan.ranges),
            ", ".join(f"{tp.partition}:{r}" for tp, r in sorted(plan.ranges.items())) or "none",
        )


__all__ = ["HudiPlan", "HudiReport", "HudiSinkError", "HudiTableSpec", "HudiTableSync"]
