"""The exactly-once transaction of one Kafka topic into one Hudi table.

One transaction is one Hudi commit, and the commit is the only place the position is kept:

1. plan: read the checkpoint of the table's latest *completed* commit (a crashed write is only
   ``requested``/``inflight`` and is never read; Hudi rolls it back on the next write), fix the
   end offsets now (last stable offset, one request for the topic) and derive one offset range
   per chosen partition, capped by the batch limit. Partitions the table has never seen start
   from the reset policy. Offsets the table still needs but Kafka no longer holds (retention, a
   recreated topic) stop the plan with an error instead of being skipped;
2. read exactly those ranges with Spark's Kafka source, decode with the declared schema, send
   the records that do not decode to the dead-letter topic;
3. write the good rows in one Hudi write whose commit metadata carries the next offset of
   *every* partition of the topic (the ones not in this transaction carried forward).

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
from dataclasses import dataclass, field
from typing import Literal

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from eos_pipeline.adapters.dlq import DeadLetter, DeadLetterWriter
from eos_pipeline.adapters.hudi import (
    DEFAULT_ORDERING_FIELD,
    SOURCE_KEY_FIELDS,
    CommitInfo,
    Operation,
    TableType,
    latest_commit,
    write_transaction,
)
from eos_pipeline.adapters.kafka import KafkaSettings, end_offsets, start_offsets, topic_id
from eos_pipeline.adapters.spark import (
    ERROR_CLASS_COLUMN,
    ERROR_COLUMN,
    TIMESTAMP_COLUMN,
    read_kafka_ranges,
    spark_failure,
    split_tagged,
    tag_json,
)
from eos_pipeline.adapters.spark_remote import connect_error
from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hooks import FaultHook, SourceHook, no_fault

log = logging.getLogger(__name__)


class HudiSinkError(RuntimeError):
    """A transaction cannot be planned or committed without losing or repeating records."""


@dataclass(frozen=True)
class HudiTableSpec:
    """Where one pipeline writes in Hudi, how the table is keyed, and how big a transaction gets."""

    pipeline: str
    topic: str
    table_path: str
    table_name: str
    schema: TableSchema
    table_type: TableType = "COPY_ON_WRITE"
    record_key_fields: tuple[str, ...] = SOURCE_KEY_FIELDS
    ordering_field: str | None = DEFAULT_ORDERING_FIELD
    partition_fields: tuple[str, ...] = ()
    operation: Operation = "upsert"
    max_records_per_partition: int = 1_000_000
    reset: Literal["earliest", "latest"] = "earliest"
    hudi_options: Mapping[str, str] = field(default_factory=dict)
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    #: Largest key + value (bytes) stored as a row; a bigger record is dead-lettered as
    #: ``Oversized`` and the partition goes on. None: no limit.
    max_record_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_records_per_partition < 1:
            raise ValueError("max_records_per_partition must be at least 1")
        if self.max_record_bytes is not None and self.max_record_bytes < 1:
            raise ValueError("max_record_bytes must be at least 1 (or None for no limit)")
        if self.reset not in ("earliest", "latest"):
            raise ValueError(f"reset must be 'earliest' or 'latest', got {self.reset!r}")


@dataclass(frozen=True)
class HudiPlan:
    """One transaction, fixed before anything is read: ranges in, checkpoint out."""

    previous: CommitInfo | None
    start: Checkpoint  # position of every partition before (stored, or from the reset policy)
    ranges: dict[TopicPartition, OffsetRange]  # the partitions of this transaction
    checkpoint: Checkpoint  # position of every partition after the commit
    end_offsets: Checkpoint  # Kafka's last stable offsets when the plan was made
    topic_id: str | None = None  # Kafka's id of the topic, stored next to the checkpoint

    @property
    def has_work(self) -> bool:
        """A commit is due if records are to be read or a position is recorded for the first time.

        The second case matters for ``reset="latest"``: the first commit pins where the table
        starts, otherwise every run would start at the then-latest offset and skip the records
        produced in between.
        """
        stored = self.previous.checkpoint if self.previous else {}
        return any(not r.is_empty for r in self.ranges.values()) or self.checkpoint != stored

    @property
    def partition_count(self) -> int:
        """Partitions the checkpoint must name (all of the topic's)."""
        return len(self.end_offsets)


@dataclass
class HudiReport:
    """What one transaction did (becomes Dagster metadata)."""

    instant_time: str | None
    ranges: dict[TopicPartition, OffsetRange]
    checkpoint_before: Checkpoint | None
    checkpoint_after: Checkpoint
    end_offsets: Checkpoint
    records_read: dict[TopicPartition, int] = field(default_factory=dict)
    rows_written: dict[TopicPartition, int] = field(default_factory=dict)
    dead_letters: dict[TopicPartition, int] = field(default_factory=dict)
    seconds: float = 0.0
    #: Cluster read, for a pipeline with several (None otherwise); records re-read and skipped
    #: to resume exactly after a switch.
    cluster: str | None = None
    reread: int = 0
    skipped: int = 0

    @property
    def total_records_read(self) -> int:
        return sum(self.records_read.values())

    @property
    def total_rows_written(self) -> int:
        return sum(self.rows_written.values())

    @property
    def total_dead_letters(self) -> int:
        return sum(self.dead_letters.values())

    @property
    def lag_after(self) -> dict[TopicPartition, int]:
        return {tp: end - self.checkpoint_after[tp] for tp, end in self.end_offsets.items()}


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
        topic = self.spec.topic
        previous = latest_commit(self.spark, self.spec.table_path)
        stored = previous.checkpoint if previous else {}
        current_id = topic_id(self.kafka, topic)
        stored_id = previous.topic_id if previous else None
        if stored_id is not None and stored_id != current_id:
            raise HudiSinkError(
                f"{self.spec.table_path}: the table's checkpoint is for topic {topic!r} with "
                f"id {stored_id}, but {topic!r} now has id {current_id}: the topic was deleted "
                "and recreated, and its offsets are not the ones the checkpoint counts. Nothing "
                "was read; point the pipeline at a new table, or move the checkpoint explicitly"
            )
        ends = end_offsets(self.kafka, topic)
        lows = start_offsets(self.kafka, topic)
        foreign = sorted({tp.topic for tp in stored} - {topic})
        if foreign:
            raise HudiSinkError(
                f"{self.spec.table_path}: the table's checkpoint is for topic(s) {foreign}, "
                f"not {topic!r}; one Hudi table follows one topic"
            )
        start: Checkpoint = {}
        for p in sorted(ends):
            tp = TopicPartition(topic, p)
            if tp in stored:
                start[tp] = stored[tp]
            else:
                start[tp] = lows[p] if self.spec.reset == "earliest" else ends[p]
        gone = sorted(tp.partition for tp in stored if tp.partition not in ends)
        if gone:
            raise HudiSinkError(
                f"topic {topic!r} has {len(ends)} partitions but the table's checkpoint names "
                f"partition(s) {gone}: the topic was deleted and recreated with fewer "
                "partitions. Nothing was read; point the pipeline at a new table"
            )
        chosen = sorted(ends) if partitions is None else sorted(set(partitions))
        unknown = [p for p in chosen if p not in ends]
        if unknown:
            raise HudiSinkError(
                f"partition(s) {unknown} do not exist in topic {topic!r} "
                f"(it has {len(ends)}: 0..{len(ends) - 1})"
            )
        ranges: dict[TopicPartition, OffsetRange] = {}
        for p in chosen:
            tp = TopicPartition(topic, p)
            begin = start[tp]
            if begin > ends[p]:
                raise HudiSinkError(
                    f"{tp}: the table has read up to offset {begin} but Kafka's log ends at "
                    f"{ends[p]}: the topic was recreated or truncated. Nothing was read; the "
                    "offsets of the new log would not match the table's"
                )
            if begin < lows[p]:
                raise HudiSinkError(
                    f"{tp}: offsets [{begin}, {lows[p]}) were deleted from Kafka (retention "
                    "or compaction) before this table read them. Nothing was read. Raise the "
                    "topic's retention, or accept the loss explicitly by committing a moved "
                    "checkpoint"
                )
            end = min(ends[p], begin + self.spec.max_records_per_partition)
            if until is not None and p in until:
                end = max(begin, min(end, until[p]))
            ranges[tp] = OffsetRange(begin, end)
        checkpoint = dict(start)
        checkpoint.update({tp: r.end for tp, r in ranges.items()})
        return HudiPlan(
            previous,
            start,
            ranges,
            checkpoint,
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
        # Read and parse once: the parsed rows are kept, and ONE Spark job both fills that cache
        # and counts records and bad rows per partition; the bad rows are only fetched if there
        # are any, and the write reads the cache (no second Kafka read, no second parse).
        tagged = tag_json(
            self._read(wanted), spec.schema, max_record_bytes=spec.max_record_bytes
        ).persist()
        try:
            report.records_read = {tp: 0 for tp in plan.ranges}
            any_bad = False
            counts = tagged.groupBy("topic", "partition").agg(
                F.count(F.lit(1)).alias("records"),
                F.count(ERROR_COLUMN).alias("bad"),
                F.max("offset").alias("last"),
            )
            last: dict[TopicPartition, int] = {}
            for row in self._collect(counts, plan):
                tp = TopicPartition(row["topic"], row["partition"])
                report.records_read[tp] = row["records"]
                last[tp] = row["last"]
                any_bad = any_bad or row["bad"] > 0
            good, bad = split_tagged(tagged, spec.schema)
            report.dead_letters = (
                self._send_dead_letters(bad, plan) if any_bad else {tp: 0 for tp in plan.ranges}
            )
            report.rows_written = {
                tp: report.records_read[tp] - report.dead_letters.get(tp, 0) for tp in plan.ranges
            }
            cluster_position, allow_rewind = self._commit_extras(plan, last)
            self.fault("before_hudi_write")
            commit = write_transaction(
                self._to_table(good),
                spec.table_path,
                spec.table_name,
                plan.checkpoint,
                table_type=spec.table_type,
                record_key_fields=spec.record_key_fields,
                ordering_field=spec.ordering_field,
                partition_fields=spec.partition_fields,
                operation=spec.operation,
                partition_count=plan.partition_count,
                expected_previous=plan.previous.checkpoint if plan.previous else None,
                allow_rewind=allow_rewind,
                topic_id=plan.topic_id,
                cluster_position=cluster_position,
                options=self._write_options(),
            )
            self.fault("after_hudi_commit")
        finally:
            tagged.unpersist()
        report.instant_time = commit.instant_time
        report.seconds = time.monotonic() - began
        log.info(
            "%s: commit %s: %d records read, %d rows written, %d dead letters, in %.1f s",
            spec.table_name,
            commit.instant_time,
            report.total_records_read,
            report.total_rows_written,
            report.total_dead_letters,
            report.seconds,
        )
        return report

    # ------------------------------------------------------------------------------- internals
    def _commit_extras(
        self, plan: HudiPlan, last_offsets: Mapping[TopicPartition, int]
    ) -> tuple[str | None, bool]:
        """What the commit stores besides the checkpoint, and whether it may move back.

        ``last_offsets``: offset of the last record read per partition. A single-cluster table
        stores nothing more and never moves back; see ``sinks.hudi_clusters``.
        """
        return None, False

    def _read(self, wanted: Mapping[TopicPartition, OffsetRange]) -> DataFrame:
        raw = read_kafka_ranges(
            self.spark, self.kafka.bootstrap_servers, self.spec.kafka_options, wanted
        )
        return raw if self.source_hook is None else self.source_hook(raw)

    def _collect(self, frame: DataFrame, plan: HudiPlan) -> list[Row]:
        """Run the job that reads and decodes; a Spark failure becomes one clear error."""
        try:
            return frame.collect()
        except Exception as exc:
            # Every failure of this one action is a failed read, whatever raised it: PySpark's
            # errors, Connect's (gRPC included), or a JVM error a classic session passes on raw.
            clear = connect_error(self.spark, exc)
            if clear is not None:
                raise clear from exc
            ranges = ", ".join(f"{tp.partition}:{r}" for tp, r in sorted(plan.ranges.items()))
            raise HudiSinkError(
                f"{self.spec.table_name}: reading Kafka ranges {ranges} of {self.spec.topic!r} "
                f"failed in Spark, nothing was committed: {spark_failure(exc)}"
            ) from exc

    def _to_table(self, good: DataFrame) -> DataFrame:
        """Decoded rows in the table's column names (the contract already filled defaults)."""
        source = self.spec.schema.source
        columns = [
            F.col("_topic").alias(source.topic),
            F.col("_partition").alias(source.partition),
            F.col("_offset").alias(source.offset),
        ]
        if source.timestamp is not None:
            columns.append(F.col(TIMESTAMP_COLUMN).alias(source.timestamp))
        columns += [F.col(col.name) for col in self.spec.schema.columns]
        return good.select(*columns)

    def _write_options(self) -> dict[str, str]:
        """Hudi options of the spec, plus what the sink knows about its rows.

        Keyed by the Kafka coordinates, the rows of one transaction have distinct keys (one
        row per offset, each offset read once), so Hudi's pre-write de-duplication (a shuffle
        of every row, ``combine.before.upsert``) cannot find anything; a key without them can.
        Such keys are almost always new, so the index is the bloom filter in each base file's
        footer (cost per file) rather than Spark's default SIMPLE index, which joins with every
        key of the table (cost per row, growing with the table). Key ranges cannot prune files:
        ``…,_offset:10`` sorts before ``…,_offset:9``, and every file spans several partitions.
        """
        options: dict[str, str] = {}
        if set(SOURCE_KEY_FIELDS) <= set(self.spec.record_key_fields):
            options["hoodie.combine.before.upsert"] = "false"
            options["hoodie.index.type"] = "BLOOM"
            options["hoodie.bloom.index.prune.by.ranges"] = "false"
        options.update(self.spec.hudi_options)
        return options

    def _send_dead_letters(self, bad: DataFrame, plan: HudiPlan) -> dict[TopicPartition, int]:
        letters: dict[TopicPartition, list[DeadLetter]] = {}
        # Rows come per Spark partition (one per Kafka partition); sorted below, no shuffle.
        for row in bad.toLocalIterator():
            tp = TopicPartition(row["topic"], row["partition"])
            # Spark hands binary columns over as bytearray; the producer wants bytes.
            letters.setdefault(tp, []).append(
                DeadLetter(
                    row["offset"],
                    None if row["key"] is None else bytes(row["key"]),
                    None if row["value"] is None else bytes(row["value"]),
                    row[ERROR_CLASS_COLUMN],
                    row[ERROR_COLUMN],
                )
            )
        for batch in letters.values():
            batch.sort(key=lambda letter: letter.offset)
        sent = {tp: self.dead_letters.send(tp, batch) for tp, batch in sorted(letters.items())}
        for tp, count in sent.items():
            log.warning(
                "%s: %d records sent to dead-letter topic %s", tp, count, self.dead_letters.topic
            )
        return {tp: sent.get(tp, 0) for tp in plan.ranges}

    def _log_plan(self, plan: HudiPlan) -> None:
        log.info(
            "%s: %s; transaction over %d partition(s): %s",
            self.spec.table_name,
            f"latest commit {plan.previous.instant_time}" if plan.previous else "new table",
            len(plan.ranges),
            ", ".join(f"{tp.partition}:{r}" for tp, r in sorted(plan.ranges.items())) or "none",
        )


__all__ = ["HudiPlan", "HudiReport", "HudiSinkError", "HudiTableSpec", "HudiTableSync"]
