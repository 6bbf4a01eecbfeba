"""The replay jobs, ``<pipeline>_replay_<sink>``: re-process a chosen range of one partition on
purpose, from the UI or ``eos-pipeline replay``. ``dry_run`` (the default) only shows the plan.
Each job's step is in its sink's pool, so it waits for the sink's own runs instead of racing
them. Why a replay stays exact: :mod:`eos_pipeline.core.replay`.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from eos_pipeline.adapters.keeper import default_writer_id
from eos_pipeline.components.assets import (
    CLICKHOUSE_SINK,
    clickhouse_key,
    clickhouse_spec,
    hudi_key,
    hudi_pool,
    hudi_spec,
)
from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.resources import kafka_resource, kafka_resource_key
from eos_pipeline.components.source import source_of
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import partition_key
from eos_pipeline.core.replay import ReplayPlan, ReplayRefused

if TYPE_CHECKING:
    from eos_pipeline.sinks.clickhouse import ReplayReport


class ReplayConfig(dg.Config):
    partition: int = Field(description="Kafka partition number to replay")
    start: int = Field(description="first offset to replay")
    end: int | None = Field(
        default=None, description="offset after the last one (default: the sink's position)"
    )
    topic: str | None = Field(default=None, description="topic (default: the pipeline's first)")
    dry_run: bool = Field(
        default=True, description="only show what the replay would do; false: replay"
    )


#: Tag of a replay run: whether it was a dry run (``true``: nothing written) or replayed.
DRY_RUN_TAG = "eos_pipeline/dry_run"


def replay_job_name(pipeline: str, sink: str) -> str:
    return f"{pipeline}_replay_{sink}"


def _tp(pipeline: Pipeline, config: ReplayConfig) -> TopicPartition:
    topic = config.topic or pipeline.kafka.topics[0]
    if topic not in pipeline.kafka.topics:
        raise ReplayRefused(
            f"pipeline {pipeline.name!r} reads {pipeline.kafka.topics}, not {topic}"
        )
    if source_of(pipeline).switches:
        raise ReplayRefused(
            f"pipeline {pipeline.name!r} reads several Kafka clusters; replays of such "
            "pipelines are not supported yet"
        )
    return TopicPartition(topic, config.partition)


def _finish(
    context: dg.OpExecutionContext,
    plan: ReplayPlan,
    asset_key: dg.AssetKey,
    run: Callable[[ReplayPlan], "ReplayReport"],
    dry_run: bool,
) -> dg.Output[dict[str, Any]]:
    """Log the plan, replay unless it is a dry run, and say what happened."""
    lines = plan.describe()
    for line in lines:
        context.log.info(line)
    metadata: dict[str, Any] = {"plan": dg.MetadataValue.md("\n".join(f"- {x}" for x in lines))}
    # run config is not shown in the Runs list; the tag is, so a dry run never passes for a
    # replay that wrote (or the other way round)
    context.instance.add_run_tags(context.run_id, {DRY_RUN_TAG: "true" if dry_run else "false"})
    if dry_run:
        context.log.info("dry run: nothing was written; launch with dry_run: false to replay")
        metadata["dry_run"] = True
        return dg.Output({"plan": lines, "dry_run": True}, metadata=metadata)
    report = run(plan)
    metadata.update(report.metadata())
    metadata["dry_run"] = False
    # The table changed: say so on the asset's partition, without a materialization (its
    # plots and latest-run numbers are the sink's own runs).
    context.log_event(
        dg.AssetObservation(
            asset_key=asset_key,
            partition=partition_key(plan.tp),
            metadata={"replayed": f"{plan.range}", **report.metadata()},
            description=f"replay of {plan.tp} {plan.range} (run {context.run_id})",
        )
    )
    return dg.Output({"plan": lines, "dry_run": False, **report.metadata()}, metadata=metadata)


def clickhouse_replay_job(pipeline: Pipeline, pool: str | None) -> dg.JobDefinition:

    @dg.op(
        name=f"{pipeline.name}_replay_clickhouse_range",
        required_resource_keys={kafka_resource_key(pipeline.name), "keeper", "clickhouse"},
        pool=pool,
    )
    def replay_range(
        context: dg.OpExecutionContext, config: ReplayConfig
    ) -> dg.Output[dict[str, Any]]:
        from eos_pipeline.sinks.clickhouse import ClickHouseReplay

        tp = _tp(pipeline, config)
        kafka = kafka_resource(context, pipeline.name).settings()
        with context.resources.clickhouse.sink() as sink, context.resources.keeper.store() as st:
            replay = ClickHouseReplay(
                clickhouse_spec(pipeline),
                kafka,
                st,
                sink,
                pipeline.dead_letter_topic,
                writer=default_writer_id(context.run_id),
            )
            plan = replay.plan(tp, config.start, config.end)
            return _finish(context, plan, clickhouse_key(pipeline), replay.run, config.dry_run)

    @dg.job(
        name=replay_job_name(pipeline.name, CLICKHOUSE_SINK),
        description=f"Replay a range of one partition of {pipeline.name!r} into ClickHouse on "
        "purpose: delete its rows, insert it again (dry_run: true only shows the plan).",
        tags={"eos_pipeline/replay": CLICKHOUSE_SINK},
    )
    def replay() -> None:
        replay_range()

    return replay


def hudi_replay_job(pipeline: Pipeline) -> dg.JobDefinition:

    @dg.op(
        name=f"{pipeline.name}_replay_hudi_range",
        required_resource_keys={kafka_resource_key(pipeline.name), "spark"},
        pool=hudi_pool(pipeline),
    )
    def replay_range(
        context: dg.OpExecutionContext, config: ReplayConfig
    ) -> dg.Output[dict[str, Any]]:
        from eos_pipeline.sinks.hudi import HudiReplay

        tp = _tp(pipeline, config)
        source = kafka_resource(context, pipeline.name)
        spec = hudi_spec(pipeline, source.spark_kafka_options())
        spark = context.resources.spark.spark_session
        replay = HudiReplay(spec, source.settings(), spark, pipeline.dead_letter_topic)
        plan = replay.plan(tp.partition, config.start, config.end)
        return _finish(context, plan, hudi_key(pipeline), replay.run, config.dry_run)

    @dg.job(
        name=replay_job_name(pipeline.name, "hudi"),
        description=f"Replay a range of one partition of {pipeline.name!r} into Hudi on "
        "purpose: upsert it again, checkpoint unchanged (dry_run: true only shows the plan).",
        tags={"eos_pipeline/replay": "hudi"},
    )
    def replay() -> None:
        replay_range()

    return replay
