"""Wiring of a following ClickHouse run: Kafka's end offsets and the run queue, read for
:func:`eos_pipeline.sinks.follow.follow` (the rule is in ``core.planning.follow``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from eos_pipeline.adapters.kafka import KafkaReadError, end_offsets
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning.follow import FOLLOW_TAG, FollowPolicy, yields_to
from eos_pipeline.core.planning.runs import CHDB_PATH_TAG, PARTITION_TAG, SINK_TAG
from eos_pipeline.defs.config import Pipeline
from eos_pipeline.sinks.clickhouse_reports import SyncReport
from eos_pipeline.sinks.follow import follow

#: How often a following run asks the run storage whether another run waits (seconds).
_QUEUE_LOOK_SECONDS = 1.0


def policy_of(pipeline: Pipeline, run_tags: Mapping[str, str]) -> FollowPolicy | None:
    """The follow policy of this run, or None: only sensor runs tagged to follow do, and only
    on a single-cluster pipeline (a clustered one's runs end once caught up)."""
    assert pipeline.clickhouse is not None
    spec = pipeline.clickhouse.follow
    policy = FollowPolicy(spec.idle_seconds, spec.max_seconds, spec.poll_seconds)
    if not policy.enabled or run_tags.get(FOLLOW_TAG) != "true" or pipeline.kafka.clusters:
        return None
    return policy


def follow_run(
    context: dg.AssetExecutionContext,
    policy: FollowPolicy,
    run: Callable[[TopicPartition], SyncReport],
    reports: Sequence[SyncReport],
    kafka: Any,
) -> list[SyncReport]:
    """Follow the run's partitions (see :func:`eos_pipeline.sinks.follow.follow`)."""
    sink = context.run.tags.get(SINK_TAG, "")
    chdb_path = context.run.tags.get(CHDB_PATH_TAG)
    run_id = context.run.run_id
    instance = context.instance
    looked = {"at": 0.0, "waiting": False}

    def others_waiting() -> bool:
        now = time.monotonic()
        if now - looked["at"] >= _QUEUE_LOOK_SECONDS:
            queued = instance.get_runs(
                filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]), limit=100
            )
            tags = [dict(r.tags) for r in queued if r.run_id != run_id]
            partition = context.run.tags.get(PARTITION_TAG)
            looked.update(at=now, waiting=yields_to(sink, chdb_path, tags, partition))
        return bool(looked["waiting"])

    def ends(tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in tps}):
            try:
                by_partition = end_offsets(kafka, topic)
            except KafkaReadError:
                continue  # nothing new seen: following ends once idle, the next run retries
            out.update({tp: by_partition[tp.partition] for tp in tps if tp.topic == topic})
        return out

    context.log.info(
        f"caught up; following {len(reports)} partition(s) until no record arrived for "
        f"{policy.idle_seconds:g} s (at most {policy.max_seconds:g} s)"
    )
    out, why = follow(run, reports, ends, policy, others_waiting=others_waiting)
    context.log.info(f"following ended: {why}; {len(out) - len(reports)} step(s) while following")
    return out
