"""Wiring of following runs (ClickHouse and Hudi): Kafka's end offsets and the run queue, read
for :mod:`eos_pipeline.sinks.follow` (the rule is in ``core.planning``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import dagster as dg

from eos_pipeline.adapters.kafka import KafkaReadError, end_offsets
from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.source import source_of
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import (
    CHDB_PATH_TAG,
    HUDI_TABLE_TAG,
    PARTITION_TAG,
    SINK_TAG,
    FollowPolicy,
    follows,
    partition_key,
    yields_to,
)
from eos_pipeline.sinks.clickhouse import SyncReport
from eos_pipeline.sinks.follow import follow, follow_table

if TYPE_CHECKING:  # the Hudi sink imports pyspark: a ClickHouse run never loads it
    from eos_pipeline.sinks.hudi import HudiReport

R = TypeVar("R")

#: How often a following run asks the run storage whether another run waits (seconds).
_QUEUE_LOOK_SECONDS = 1.0


def policy_of(
    pipeline: Pipeline, run_tags: Mapping[str, str], sink: str = "clickhouse"
) -> FollowPolicy | None:
    """The follow policy of this run of ``sink`` (``"clickhouse"`` or ``"hudi"``), or None:
    only sensor runs tagged to follow do, and only on a single-cluster pipeline (a clustered
    one's runs end once caught up)."""
    target = pipeline.clickhouse if sink == "clickhouse" else pipeline.hudi
    assert target is not None
    spec = target.follow
    policy = FollowPolicy(spec.idle_seconds, spec.max_seconds, spec.poll_seconds)
    return policy if follows(policy, run_tags, source_of(pipeline).switches) else None


def _others_waiting(
    context: dg.AssetExecutionContext, held: str | None, held_tag: str
) -> Callable[[], bool]:
    """Whether a queued run may need what this run holds (the run storage, at most once per
    :data:`_QUEUE_LOOK_SECONDS`)."""
    sink = context.run.tags.get(SINK_TAG, "")
    partition = context.run.tags.get(PARTITION_TAG)
    run_id = context.run.run_id
    instance = context.instance
    looked = {"at": -_QUEUE_LOOK_SECONDS, "waiting": False}

    def others_waiting() -> bool:
        now = time.monotonic()
        if now - looked["at"] >= _QUEUE_LOOK_SECONDS:
            queued = instance.get_runs(
                filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]), limit=100
            )
            tags = [dict(r.tags) for r in queued if r.run_id != run_id]
            waiting = yields_to(sink, held, tags, partition, held_tag=held_tag)
            looked.update(at=now, waiting=waiting)
        return bool(looked["waiting"])

    return others_waiting


def _ends(kafka: Any) -> Callable[[Sequence[TopicPartition]], dict[TopicPartition, int]]:
    def ends(tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in tps}):
            try:
                by_partition = end_offsets(kafka, topic)
            except KafkaReadError:
                continue  # nothing new seen: following ends once idle, the next run retries
            out.update({tp: by_partition[tp.partition] for tp in tps if tp.topic == topic})
        return out

    return ends


#: Least time between two materializations of one partition recorded while following.
RECORD_EVERY_SECONDS = 10.0
#: Tag a following run sets on itself: while it follows, since when; once it ended, why. The
#: Runs list and the run's page show it, so a run up for minutes reads as following, not stuck.
FOLLOWING_TAG = "eos_pipeline/following"


def _clock() -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime())


#: What one step wrote, per partition: ``(position after it, records read, dead letters)``.
Written = Mapping[TopicPartition, tuple[int, int, int]]
#: Rows in the table per partition, for the partitions asked (one query for all of them).
RowCounts = Callable[[list[TopicPartition]], Mapping[TopicPartition, int]]


def clickhouse_written(report: SyncReport) -> Written:
    return {report.tp: (report.end, report.records_read, report.dead_letters)}


def hudi_written(report: HudiReport) -> Written:
    after, read, dead = report.checkpoint_after, report.records_read, report.dead_letters
    return {tp: (after[tp], read.get(tp, 0), dead.get(tp, 0)) for tp in after}


def _materialize(
    context: dg.AssetExecutionContext, tp: TopicPartition, description: str, metadata: dict
) -> None:
    context.log_event(
        dg.AssetMaterialization(
            asset_key=context.asset_key,
            partition=partition_key(tp),
            description=description,
            metadata={**metadata, "following": True},
        )
    )


def record_caught_up(
    context: dg.AssetExecutionContext, positions: Mapping[TopicPartition, int], rows: RowCounts
) -> dict[TopicPartition, int]:
    """Before following: each partition's caught-up state as its materialization (position,
    rows), so the asset shows the partitions filled while the run goes on, not "0 % filled"
    until it ends minutes later; and the run tagged as following. Returns the rows counted."""
    counts = dict(rows(list(positions)))
    for tp, position in positions.items():
        _materialize(
            context,
            tp,
            f"caught up; run {context.run.run_id[:8]} is following the stream (in progress, "
            f"not failed): it records each partition again at most every "
            f"{RECORD_EVERY_SECONDS:g} s while records arrive",
            {"position": position, "dagster/row_count": counts[tp]},
        )
    context.instance.add_run_tags(context.run.run_id, {FOLLOWING_TAG: f"since {_clock()}"})
    return counts


def recording(
    context: dg.AssetExecutionContext,
    run: Callable[[Any], R],
    written: Callable[[R], Written],
    rows: RowCounts,
) -> Callable[[Any], R]:
    """``run`` (one step of a following run: a ClickHouse partition's, or a Hudi commit),
    recording what ``written`` reads from its report as each partition's materialization, at
    most every :data:`RECORD_EVERY_SECONDS` per partition (see :func:`record_caught_up`)."""
    last: dict[TopicPartition, float] = {}

    def step(arg: Any) -> R:
        report = run(arg)
        now = time.monotonic()
        due = {
            tp: done
            for tp, done in written(report).items()
            if done[1] and now - last.get(tp, -RECORD_EVERY_SECONDS) >= RECORD_EVERY_SECONDS
        }
        counts = rows(list(due)) if due else {}
        for tp, (position, read, dead) in due.items():
            last[tp] = now
            metadata = {
                "position": position,
                "records_read_in_step": read,
                "dead_letters_in_step": dead,
                "dagster/row_count": counts[tp],
            }
            _materialize(context, tp, "recorded while following", metadata)
        return report

    return step


def follow_run(
    context: dg.AssetExecutionContext,
    policy: FollowPolicy,
    run: Callable[[TopicPartition], SyncReport],
    reports: Sequence[SyncReport],
    kafka: Any,
) -> list[SyncReport]:
    """Follow the run's partitions (see :func:`eos_pipeline.sinks.follow.follow`); wrap ``run``
    in :func:`recording` to record each partition's state as it goes."""
    chdb_path = context.run.tags.get(CHDB_PATH_TAG)
    context.log.info(
        f"caught up; following {len(reports)} partition(s) until no record arrived for "
        f"{policy.idle_seconds:g} s (at most {policy.max_seconds:g} s)"
    )
    waiting = _others_waiting(context, chdb_path, CHDB_PATH_TAG)
    out, why = follow(run, reports, _ends(kafka), policy, others_waiting=waiting)
    context.log.info(f"following ended: {why}; {len(out) - len(reports)} step(s) while following")
    context.instance.add_run_tags(context.run.run_id, {FOLLOWING_TAG: f"ended {_clock()}: {why}"})
    return out


def follow_hudi_run(
    context: dg.AssetExecutionContext,
    policy: FollowPolicy,
    run: Callable[[list[int]], HudiReport],
    report: HudiReport,
    tps: Sequence[TopicPartition],
    kafka: Any,
    table: str,
) -> tuple[list[HudiReport], str]:
    """Follow a Hudi run's partitions commit by commit (``sinks.follow.follow_table``); every
    commit's report and why it ended. It gives way to a queued run that may write ``table``."""
    context.log.info(
        f"committed; following {len(tps)} partition(s) of {table} until no record arrived for "
        f"{policy.idle_seconds:g} s (at most {policy.max_seconds:g} s)"
    )
    waiting = _others_waiting(context, table, HUDI_TABLE_TAG)
    out, why = follow_table(run, report, tps, _ends(kafka), policy, others_waiting=waiting)
    commits = sum(1 for r in out[1:] if r.instant_time is not None)
    context.log.info(f"following ended: {why}; {commits} commit(s) while following")
    context.instance.add_run_tags(context.run.run_id, {FOLLOWING_TAG: f"ended {_clock()}: {why}"})
    return out, why
