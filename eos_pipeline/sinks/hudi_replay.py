"""A deliberate replay into Hudi: re-write a range by its keys, the checkpoint unchanged.

The rule and its reasons are in :mod:`eos_pipeline.core.replay`. Rows are keyed by their Kafka
coordinates and written with upsert, so writing ``[a, b)`` again replaces each row by itself,
or adds the rows that were missing (lost by hand, or dead letters before a fix). In order, each
step safe to repeat:

1. re-plan from the table's latest commit (the range must lie below its checkpoint);
2. write the replay marker to the dead-letter topic (see :mod:`eos_pipeline.adapters.dlq`);
3. read the range with Spark's Kafka source and judge it with the contract; send the bad records
   to the dead-letter topic, naming the sink;
4. if any of the bad records still has a row (it decoded before), delete those rows in one
   commit carrying the unchanged checkpoint;
5. upsert the good rows in one commit carrying the unchanged checkpoint.

Killed anywhere, the table holds either its old rows or some of the new verdicts applied; the
same replay run again converges. Commits are fenced like any transaction
(:func:`eos_pipeline.adapters.hudi.write_transaction`): a commit by another writer in between
makes the replay fail, and running it again replans from that commit.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi import CommitInfo, Operation, latest_commit
from eos_pipeline.adapters.kafka import KafkaSettings, start_offsets
from eos_pipeline.adapters.spark import ERROR_COLUMN, split_tagged, tag_json
from eos_pipeline.core.checkpoint import checkpoint_key
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.positions import checkpoint_state
from eos_pipeline.core.replay import ReplayPlan, ReplayRefused, plan_replay
from eos_pipeline.sinks.hooks import FaultHook, no_fault
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync, computed_once, dead_letter
from eos_pipeline.sinks.replay import ReplayReport
from eos_pipeline.sinks.source import OneCluster

log = logging.getLogger(__name__)

__all__ = ["REPLAY_METADATA_SUFFIX", "HudiReplay"]

SINK = "hudi"
#: A replay commit names what it replayed in its metadata, next to the checkpoint
#: (``<checkpoint key>.eos.replay`` = ``<partition>:[a, b)``), so the timeline tells it apart.
REPLAY_METADATA_SUFFIX = ".eos.replay"
_META_COLUMNS = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key")
_META_COLUMNS += ("_hoodie_partition_path", "_hoodie_file_name")


class HudiReplay:
    """Replays ranges of one pipeline's partitions into its Hudi table."""

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
        self.kafka = kafka
        self.spark = spark
        self.dead_letters = DeadLetterWriter(kafka, dlq_topic, spec.pipeline, sink=SINK)
        # The sink's own reading, decoding and write options, so a replay writes rows alike.
        self.sync = HudiTableSync(spec, OneCluster(kafka), spark, self.dead_letters)
        self.fault = fault

    def plan(self, partition: int, start: int, end: int | None = None) -> ReplayPlan:
        """What :meth:`run` would do, from the latest commit; writes nothing (the dry run)."""
        return self._plan(TopicPartition(self.spec.topic, partition), start, end)[0]

    def run(self, plan: ReplayPlan) -> ReplayReport:
        began = time.monotonic()
        spec, tp = self.spec, plan.tp
        current, commit = self._plan(tp, plan.range.start, plan.range.end)
        assert commit is not None  # plan_replay refuses a table without a commit
        report = ReplayReport(current)
        report.markers = self.dead_letters.send_marker(tp, SINK, current.range)
        self.fault("replay_after_marker")
        self.sync.follow_writers({tp: current.range})  # a subject's newer writer schemas
        spec = self.sync.spec
        decoded = tag_json(
            self.sync.read({tp: current.range}),
            spec.schema,
            max_record_bytes=spec.max_record_bytes,
        )
        # Read and decoded once for the count, the dead letters and the writes (see
        # computed_once: persist() is never hit over Spark Connect).
        with computed_once(self.spark, decoded) as tagged:
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
            SINK,
            tp,
            start=start,
            end=end,
            state=checkpoint_state(position),
            log_start=start_offsets(self.kafka, tp.topic)[tp.partition],
            max_records=max(1, self.spec.max_records_per_partition),
        )
        return plan, commit

    def _rows_of(self, offsets: list[int], tp: TopicPartition) -> tuple[DataFrame | None, int]:
        """The table's rows of ``tp`` at ``offsets`` (records that are dead letters now), and
        how many there are (0 without reading the table when there is no such record)."""
        if not offsets:
            return None, 0
        source = self.spec.schema.source
        rows = self.spark.read.format("hudi").load(self.spec.table_path)
        rows = rows.where(
            (F.col(source.topic) == tp.topic)
            & (F.col(source.partition) == tp.partition)
            & F.col(source.offset).isin(offsets)
        )
        rows = rows.drop(*[c for c in _META_COLUMNS if c in rows.columns])
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
