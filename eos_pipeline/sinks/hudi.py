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
   replay (:class:`HudiReplay`) shares steps 2 and 3, so a replayed range is decoded,
   dead-lettered and written exactly like the transaction that first wrote it.

If anything fails before the commit completes, the table and its checkpoint are as they were
and a retry plans the same ranges again (pass the same ``until`` to get exactly the same ends).
If the process dies after the commit completed, the next plan starts from the new checkpoint:
nothing is written twice. Dead letters sent by an attempt that did not commit are sent again by
the retry with the same source coordinates, which is what readers de-duplicate on.

Hudi tables take one writer at a time: runs are serialized per table by Dagster (see
``dagster.yaml``) and, as a second line, the commit is fenced against any checkpoint-carrying
commit completed after the plan's (``adapters.hudi.write_transaction``). Kafka's topic id is
stored next to the checkpoint, so a topic deleted and recreated under the same name is refused
even once its new log has grown past the stored offsets.

Where the sink reads is a :class:`~eos_pipeline.sinks.source.Source` (one cluster, or the active
one of several), and the sink never asks which kind: the source plans the transaction's positions.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
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
from eos_pipeline.adapters.kafka import KafkaSettings, start_offsets
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
from eos_pipeline.core.checkpoint import Checkpoint, checkpoint_key
from eos_pipeline.core.decode import writer_ids
from eos_pipeline.core.errors import LogChanged
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import (
    DEFAULT_BULK_INSERT_MIN_RECORDS,
    ConfiguredOperation,
    PlanLogChanged,
    TransactionRefused,
    WriteOperation,
    planned_records,
    transaction_operation,
)
from eos_pipeline.core.positions import checkpoint_state
from eos_pipeline.core.replay import ReplayPlan, ReplayRefused, plan_replay
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.clickhouse import ReplayReport, SchemaFollower
from eos_pipeline.sinks.hooks import FaultHook, SourceHook, no_fault
from eos_pipeline.sinks.source import HudiPlan, OneCluster, Source

log = logging.getLogger(__name__)

__all__ = [
    "REPLAY_METADATA_SUFFIX",
    "HudiLogChanged",
    "HudiReplay",
    "HudiReport",
    "HudiSinkError",
    "HudiTableSpec",
    "HudiTableSync",
    "computed_once",
]


class HudiSinkError(RuntimeError):
    """A transaction cannot be planned or committed without losing or repeating records."""


class HudiLogChanged(LogChanged, HudiSinkError):
    """The table's position is not from the log Kafka holds now; nothing was read."""


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
    #: ``auto``: ``bulk_insert`` for a transaction of at least ``bulk_insert_min_records``
    #: planned records, ``upsert`` below (:mod:`eos_pipeline.core.planning`).
    operation: ConfiguredOperation = "auto"
    bulk_insert_min_records: int = DEFAULT_BULK_INSERT_MIN_RECORDS
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
        if self.bulk_insert_min_records < 1:
            raise ValueError("bulk_insert_min_records must be at least 1")
        if self.max_record_bytes is not None and self.max_record_bytes < 1:
            raise ValueError("max_record_bytes must be at least 1 (or None for no limit)")
        if self.reset not in ("earliest", "latest"):
            raise ValueError(f"reset must be 'earliest' or 'latest', got {self.reset!r}")


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
    #: Hudi operation of the commit (``auto`` resolved); None without a commit.
    operation: WriteOperation | None = None

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


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The source's refusals (:mod:`eos_pipeline.core.planning`'s) as the sink's errors."""
    try:
        yield
    except PlanLogChanged as exc:
        raise HudiLogChanged(str(exc), exc.reason) from None
    except TransactionRefused as exc:
        raise HudiSinkError(str(exc)) from None


# ----------------------------------------------------------- rows in Spark, shared with the replay
@dataclass(frozen=True, slots=True)
class ReadCounts:
    """What the counting job saw per partition read."""

    records: dict[TopicPartition, int]
    #: Offset of the last record read per partition (partitions with a record only).
    last: dict[TopicPartition, int]
    any_bad: bool


@contextlib.contextmanager
def computed_once(spark: SparkSession, frame: DataFrame) -> Iterator[DataFrame]:
    """``frame`` as a cached table: the first action computes it, the following ones read memory.

    Not ``frame.persist()``: a Spark Connect client sends the plan again with every action and
    the server analyzes it afresh, and a plan holding a Python function (the decoder's
    ``mapInArrow``) is then never equal to the persisted one, so the cache is never used: every
    action read Kafka and decoded again (the counting job and three jobs of Hudi's upsert, each
    paying a Kafka fetch and a Python worker per partition). A temporary view keeps the analyzed
    plan itself, and ``CACHE LAZY TABLE`` caches exactly that plan, so every frame built on
    ``spark.table(view)`` uses the cache, over Connect as in a local session. The view has a
    random name (runs that share a server session never meet) and is dropped at the end.
    """
    name = f"eos_rows_{uuid.uuid4().hex}"
    frame.createOrReplaceTempView(name)
    try:
        spark.sql(f"CACHE LAZY TABLE {name}")
        yield spark.table(name)
    finally:
        try:
            spark.sql(f"UNCACHE TABLE IF EXISTS {name}")
            spark.catalog.dropTempView(name)
        except Exception as exc:  # a lost session took its view and cache with it
            log.warning("could not drop the cached rows %s: %s", name, exc)


def count_read(
    spark: SparkSession,
    tagged: DataFrame,
    ranges: Mapping[TopicPartition, OffsetRange],
    *,
    table_name: str,
    topic: str,
) -> ReadCounts:
    """Run the ONE job that reads, decodes and counts records and bad rows per partition.

    ``tagged`` is cached by the caller (:func:`computed_once`): this job fills the cache and the
    write reads it (no second Kafka read, no second parse). Every failure of this action is a
    failed read, whatever raised it (PySpark's errors, Connect's, gRPC's, or a JVM error a
    classic session passes on raw): it becomes one clear error.
    """
    counts = tagged.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("records"),
        F.count(ERROR_COLUMN).alias("bad"),
        F.max("offset").alias("last"),
    )
    try:
        rows = counts.collect()
    except Exception as exc:
        clear = connect_error(spark, exc)
        if clear is not None:
            raise clear from exc
        named = ", ".join(f"{tp.partition}:{r}" for tp, r in sorted(ranges.items()))
        raise HudiSinkError(
            f"{table_name}: reading Kafka ranges {named} of {topic!r} "
            f"failed in Spark, nothing was committed: {spark_failure(exc)}"
        ) from exc
    records = {tp: 0 for tp in ranges}
    last: dict[TopicPartition, int] = {}
    any_bad = False
    for row in rows:
        tp = TopicPartition(row["topic"], row["partition"])
        records[tp] = row["records"]
        last[tp] = row["last"]
        any_bad = any_bad or row["bad"] > 0
    return ReadCounts(records, last, any_bad)


def dead_letter(row: Row) -> DeadLetter:
    """A bad row as a dead letter (Spark hands binary columns over as bytearray)."""
    return DeadLetter(
        row["offset"],
        None if row["key"] is None else bytes(row["key"]),
        None if row["value"] is None else bytes(row["value"]),
        row[ERROR_CLASS_COLUMN],
        row[ERROR_COLUMN],
    )


def send_dead_letters(
    writer: DeadLetterWriter, bad: DataFrame, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """Send the bad rows, per partition in offset order; how many went per partition."""
    letters: dict[TopicPartition, list[DeadLetter]] = {}
    # Rows come per Spark partition (one per Kafka partition); sorted below, no shuffle.
    for row in bad.toLocalIterator():
        letters.setdefault(TopicPartition(row["topic"], row["partition"]), []).append(
            dead_letter(row)
        )
    for batch in letters.values():
        batch.sort(key=lambda letter: letter.offset)
    sent = {tp: writer.send(tp, batch) for tp, batch in sorted(letters.items())}
    for tp, count in sent.items():
        log.warning("%s: %d records sent to dead-letter topic %s", tp, count, writer.topic)
    return {tp: sent.get(tp, 0) for tp in partitions}


class HudiTableSync:
    """Moves a Kafka topic into a Hudi table, one atomic commit per transaction."""

    def __init__(
        self,
        spec: HudiTableSpec,
        source: Source,
        spark: SparkSession,
        dead_letters: DeadLetterWriter,
        *,
        fault: FaultHook = no_fault,
        source_hook: SourceHook | None = None,
    ) -> None:
        source.before_write()
        self.spec = spec
        self.source = source
        self.kafka = source.kafka
        self.spark = spark
        self.dead_letters = dead_letters
        self.fault = fault
        self.source_hook = source_hook
        self.follower = SchemaFollower(spec.schema)

    # ------------------------------------------------------------------------------- reading
    def plan(
        self,
        partitions: Collection[int] | None = None,
        until: Mapping[int, int] | None = None,
    ) -> HudiPlan:
        """Fix the next transaction without side effects; ``partitions`` default to all,
        ``until`` caps the partitions of the topic itself (not a replica's)."""
        spec = self.spec
        previous = latest_commit(spec.table_path)
        with _refusals():
            return self.source.plan_hudi(
                previous,
                table=spec.table_path,
                name=spec.table_name,
                topic=spec.topic,
                reset=spec.reset,
                max_records=spec.max_records_per_partition,
                partitions=partitions,
                until=until,
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
            checkpoint_after=dict(plan.after) if plan.has_work else dict(plan.start),
            end_offsets=dict(plan.end_offsets),
            cluster=plan.cluster,
            reread=plan.reread,
            skipped=plan.skipped,
        )
        log.info(
            "%s: %s; transaction over %d partition(s): %s",
            spec.table_name,
            f"latest commit {plan.previous.instant_time}" if plan.previous else "new table",
            len(plan.ranges),
            ", ".join(f"{tp.partition}:{r}" for tp, r in sorted(plan.ranges.items())) or "none",
        )
        if plan.reread:
            log.info(
                "%s: resumed on %s exactly: %d records re-read, %d skipped",
                spec.table_name,
                plan.cluster,
                plan.reread,
                plan.skipped,
            )
        if not plan.has_work:
            log.info("%s: caught up, nothing to commit", spec.table_name)
            return report
        wanted = {tp: r for tp, r in plan.ranges.items() if not r.is_empty}
        with self.decoded(wanted) as tagged:
            spec = self.spec  # with the writer schemas the ranges name
            counts = count_read(
                self.spark, tagged, plan.ranges, table_name=spec.table_name, topic=spec.topic
            )
            report.records_read = counts.records
            good, bad = split_tagged(tagged, spec.schema)
            # The bad rows are fetched only if there are any.
            report.dead_letters = (
                send_dead_letters(self.dead_letters, bad, plan.ranges)
                if counts.any_bad
                else {tp: 0 for tp in plan.ranges}
            )
            report.rows_written = {
                tp: report.records_read[tp] - report.dead_letters.get(tp, 0) for tp in plan.ranges
            }
            with _refusals():
                cluster_position = self.source.hudi_commit_position(plan, counts.last)
            operation = self.operation(plan)
            self.fault("before_hudi_write")
            commit = self.write(
                self.table_rows(good),
                plan.checkpoint,
                partition_count=plan.partition_count,
                previous=plan.previous.checkpoint if plan.previous else None,
                topic_id=plan.topic_id,
                operation=operation,
                allow_rewind=plan.allow_rewind,
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

    # ------------------------------------------------------ shared with the replay (HudiReplay)
    def read(self, wanted: Mapping[TopicPartition, OffsetRange]) -> DataFrame:
        """Kafka's records of exactly these ranges (through the source hook, if any)."""
        raw = read_kafka_ranges(
            self.spark, self.kafka.bootstrap_servers, self.spec.kafka_options, wanted
        )
        return raw if self.source_hook is None else self.source_hook(raw)

    @contextlib.contextmanager
    def decoded(self, wanted: Mapping[TopicPartition, OffsetRange]) -> Iterator[DataFrame]:
        """The records of ``wanted`` tagged by the contract, with the newest writer schema they
        name, read and decoded once (:func:`computed_once`)."""
        self.follow_writers(wanted)
        spec = self.spec
        frame = tag_json(self.read(wanted), spec.schema, max_record_bytes=spec.max_record_bytes)
        with computed_once(self.spark, frame) as tagged:
            yield tagged

    def table_rows(self, good: DataFrame) -> DataFrame:
        """Decoded rows in the table's column names (the contract already filled defaults), the
        source topic as the source names it (``B:T`` on cluster B of several, see
        ``core.failover.row_topic``)."""
        source, prefix = self.spec.schema.source, self.source.row_topic("")
        topic = F.concat(F.lit(prefix), F.col("_topic")) if prefix else F.col("_topic")
        columns = [
            topic.alias(source.topic),
            F.col("_partition").alias(source.partition),
            F.col("_offset").alias(source.offset),
        ]
        if source.timestamp is not None:
            columns.append(F.col(TIMESTAMP_COLUMN).alias(source.timestamp))
        columns += [F.col(col.name) for col in self.spec.schema.columns]
        return good.select(*columns)

    def write_options(self) -> dict[str, str]:
        """The table's Hudi options, plus what the sink knows about its rows.

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

    def write(
        self,
        rows: DataFrame,
        checkpoint: Checkpoint,
        *,
        partition_count: int,
        previous: Checkpoint | None,
        topic_id: str | None,
        operation: Operation,
        options: Mapping[str, str] | None = None,
        allow_rewind: bool = False,
        cluster_position: str | None = None,
    ) -> CommitInfo:
        """One fenced commit of ``rows`` carrying ``checkpoint``, keyed as the spec says."""
        spec = self.spec
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


_REPLAY_SINK = "hudi"
#: A replay commit names what it replayed in its metadata, next to the checkpoint
#: (``<checkpoint key>.eos.replay`` = ``<partition>:[a, b)``), so the timeline tells it apart.
REPLAY_METADATA_SUFFIX = ".eos.replay"
_HOODIE_META_COLUMNS = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key")
_HOODIE_META_COLUMNS += ("_hoodie_partition_path", "_hoodie_file_name")


class HudiReplay:
    """A deliberate replay into Hudi: re-write a range by its keys, the checkpoint unchanged.

    The rule and its reasons are in :mod:`eos_pipeline.core.replay`. Rows are keyed by their
    Kafka coordinates and written with upsert, so writing ``[a, b)`` again replaces each row by
    itself, or adds the rows that were missing (lost by hand, or dead letters before a fix). In
    order, each step safe to repeat:

    1. re-plan from the table's latest commit (the range must lie below its checkpoint);
    2. write the replay marker to the dead-letter topic (see :mod:`eos_pipeline.adapters.dlq`);
    3. read the range with Spark's Kafka source and judge it with the contract; send the bad
       records to the dead-letter topic, naming the sink;
    4. if any of the bad records still has a row (it decoded before), delete those rows in one
       commit carrying the unchanged checkpoint;
    5. upsert the good rows in one commit carrying the unchanged checkpoint.

    Killed anywhere, the table holds either its old rows or some of the new verdicts applied;
    the same replay run again converges. Commits are fenced like any transaction
    (:func:`eos_pipeline.adapters.hudi.write_transaction`): a commit by another writer in
    between makes the replay fail, and running it again replans from that commit.
    """

    def __init__(
        self,
        spec: HudiTableSpec,
        kafka: KafkaSettings,
        spark: SparkSession,
        dlq_topic: str,
        *,
        fault: FaultHook = no_fault,
    ) -> None:
        if spec.operation != "upsert":
            log.info(
                "%s: a replay always upserts (the table writes with %s)",
                spec.table_name,
                spec.operation,
            )
        self.spec = spec
        self.dead_letters = DeadLetterWriter(kafka, dlq_topic, spec.pipeline, sink=_REPLAY_SINK)
        # The sink's own reading, decoding and write options, so a replay writes rows alike.
        self.sync = HudiTableSync(spec, OneCluster(kafka), spark, self.dead_letters)
        self.fault = fault

    def plan(self, partition: int, start: int, end: int | None = None) -> ReplayPlan:
        """What :meth:`run` would do, from the latest commit; writes nothing (the dry run)."""
        return self._plan(TopicPartition(self.spec.topic, partition), start, end)[0]

    def run(self, plan: ReplayPlan) -> ReplayReport:
        began = time.monotonic()
        tp = plan.tp
        current, commit = self._plan(tp, plan.range.start, plan.range.end)
        assert commit is not None  # plan_replay refuses a table without a commit
        report = ReplayReport(current)
        self.dead_letters.send_marker(tp, _REPLAY_SINK, current.range)
        self.fault("replay_after_marker")
        # Read and decoded once for the count, the dead letters and the writes.
        with self.sync.decoded({tp: current.range}) as tagged:
            spec = self.sync.spec  # with the writer schemas the range names
            good, bad = split_tagged(tagged, spec.schema)
            # One job reads, decodes and counts; the bad rows are fetched only if there are any.
            total = tagged.agg(F.count(F.lit(1)).alias("n"), F.count(ERROR_COLUMN).alias("bad"))
            counted = total.collect()[0]
            report.records_read = int(counted["n"])
            letters = [
                dead_letter(row)
                for row in (bad.orderBy("offset").collect() if counted["bad"] else [])
            ]
            report.dead_letters = self.dead_letters.send(tp, letters)
            stale, report.rows_deleted = self._rows_of([x.offset for x in letters], tp)
            if stale is not None and report.rows_deleted:
                commit = self._commit(stale, commit, current, "delete")
                report.commits.append(commit.instant_time)
            self.fault("replay_after_delete")
            table = self.sync.table_rows(good)
            report.rows_written = report.records_read - report.dead_letters
            commit = self._commit(table, commit, current, "upsert")
            report.commits.append(commit.instant_time)
            self.fault("replay_after_commit")
        report.seconds = time.monotonic() - began
        log.info(
            "%s: replay of %s %s done: %s", spec.table_name, tp, current.range, report.metadata()
        )
        return report

    # ------------------------------------------------------------------------------- internals
    def _plan(
        self, tp: TopicPartition, start: int, end: int | None
    ) -> tuple[ReplayPlan, CommitInfo | None]:
        commit = latest_commit(self.spec.table_path)
        position = commit.checkpoint.get(tp) if commit else None
        plan = plan_replay(
            self.spec.pipeline,
            _REPLAY_SINK,
            tp,
            start=start,
            end=end,
            state=checkpoint_state(position),
            log_start=start_offsets(self.sync.kafka, tp.topic)[tp.partition],
            max_records=max(1, self.spec.max_records_per_partition),
        )
        return plan, commit

    def _rows_of(self, offsets: list[int], tp: TopicPartition) -> tuple[DataFrame | None, int]:
        """The table's rows of ``tp`` at ``offsets`` (records that are dead letters now), and
        how many there are (0 without reading the table when there is no such record)."""
        if not offsets:
            return None, 0
        source = self.spec.schema.source
        rows = self.sync.spark.read.format("hudi").load(self.spec.table_path)
        rows = rows.where(
            (F.col(source.topic) == tp.topic)
            & (F.col(source.partition) == tp.partition)
            & F.col(source.offset).isin(offsets)
        )
        rows = rows.drop(*[c for c in _HOODIE_META_COLUMNS if c in rows.columns])
        return rows, int(rows.count())

    def _commit(
        self, df: DataFrame, previous: CommitInfo, plan: ReplayPlan, operation: Operation
    ) -> CommitInfo:
        """One commit carrying ``previous``'s checkpoint unchanged (never backwards)."""
        if plan.range.end > previous.checkpoint.get(plan.tp, 0):
            raise ReplayRefused(f"{plan.tp}: the checkpoint moved below {plan.range}")
        options = self.sync.write_options()
        version = options.get("hoodie.write.table.version")
        key = checkpoint_key(int(version) if version else None)
        options[key + REPLAY_METADATA_SUFFIX] = f"{plan.tp.partition}:{plan.range}"
        return self.sync.write(
            df,
            previous.checkpoint,
            partition_count=len(previous.checkpoint),
            previous=previous.checkpoint,
            topic_id=previous.topic_id,
            operation=operation,
            options=options,
        )
