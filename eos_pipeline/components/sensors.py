"""Sensors: keep the partitions in step with Kafka, and ask for runs where a sink is behind.

Wiring only: the planner (:mod:`eos_pipeline.core.planning`) decides every rule. A tick reads
Kafka's ends, the keeper (one shared session) or the Hudi timeline (hudi-rs), and a few
run-storage queries; never Spark nor ClickHouse: the sensor daemon must not open the chDB data
path (one process per path) nor start a JVM. A clustered pipeline's state is the active
cluster's, and nothing is asked while a switch is in flight.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import time
from collections.abc import Mapping, Sequence

import dagster as dg

from eos_pipeline.adapters.failover import SwitchInProgress
from eos_pipeline.adapters.hudi_timeline import HudiTimelineError
from eos_pipeline.adapters.keeper import shared_store
from eos_pipeline.components.assets import (
    CHECK_NAME,
    CLICKHOUSE_SINK,
    clickhouse_key,
    hudi_key,
)
from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.health import pipeline_sensor
from eos_pipeline.components.metadata import pipeline_partitions
from eos_pipeline.components.resources import KeeperResource, kafka_resource
from eos_pipeline.components.run_failures import (
    HEAL_TAG,
    failed_runs,
    heal_requests,
    run_partitions,
)
from eos_pipeline.components.source import source_of
from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import (
    ANY_PARTITION,
    CHDB_PATH_TAG,
    FOLLOW_TAG,
    NORMAL_PRIORITY,
    PRIORITY_TAG,
    SINK_PARTITION_TAG,
    SINK_TAG,
    START_STATE_TAG,
    Plan,
    RunInfo,
    TopicState,
    asked_ends,
    clickhouse_needs_log_starts,
    hudi_blocked,
    hudi_needs_log_starts,
    in_flight_keys,
    partition_key,
    plan_clickhouse,
    plan_hudi,
    plan_new_partitions,
)
from eos_pipeline.core.positions import committed
from eos_pipeline.core.retries import Backoff

#: How many of a sink's runs in flight one evaluation looks at.
IN_FLIGHT_LOOKBACK = 1000

_WAITING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]
_RUNNING = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]


def _runs(
    instance: dg.DagsterInstance,
    sink: str,
    statuses: list[dg.DagsterRunStatus],
    limit: int = IN_FLIGHT_LOOKBACK,
    tags: Mapping[str, str] | None = None,
) -> list[RunInfo]:
    """``sink``'s runs in ``statuses`` (and with ``tags``), newest first (one query)."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(statuses=statuses, tags={SINK_TAG: sink, **(tags or {})}),
        limit=limit,
    )
    return [RunInfo(run.run_id, dict(run.tags)) for run in runs]


def _following(instance: dg.DagsterInstance, sink: str) -> bool:
    """Whether a run of ``sink`` that follows the stream is starting or running."""
    return bool(_runs(instance, sink, _RUNNING, 1, {FOLLOW_TAG: "true"}))


def _backoff(pipeline: Pipeline) -> Backoff:
    return Backoff(pipeline.retry.backoff_seconds, pipeline.retry.max_backoff_seconds)


def _busy(instance: dg.DagsterInstance, sink: str) -> set[str]:
    return in_flight_keys(_runs(instance, sink, _WAITING + _RUNNING))


def _result(
    context: dg.SensorEvaluationContext,
    plan: Plan,
    asset: dg.AssetKey,
    heals: Sequence[dg.RunRequest] = (),
    added: Sequence[dg.AddDynamicPartitionsRequest] = (),
) -> dg.SensorResult | dg.SkipReason:
    """The plan's runs of ``asset`` and its exactly_once check (source_reachable is the topics
    sensor's), the asset named so that the Runs list shows it as the target."""
    for message in plan.given_up:
        context.log.warning(message)
    requests = [
        dg.RunRequest(
            run_key=r.run_key,
            partition_key=r.partition_key,
            tags=r.tags,
            asset_selection=[asset],
            asset_check_keys=[dg.AssetCheckKey(asset, CHECK_NAME)],
        )
        for r in plan.runs
    ]
    requests += heals
    if not requests and not added:
        return dg.SkipReason(plan.skip_reason)
    return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=list(added))


def _registering(
    partitions: dg.DynamicPartitionsDefinition,
    ordered: list[str],
    ends: Mapping[str, Mapping[int, int]],
) -> tuple[list[str], list[dg.AddDynamicPartitionsRequest]]:
    """The keys a lag tick plans with, and a request adding those of Kafka partitions the
    partitions sensor has not added yet (Dagster adds them before launching the tick's runs, so
    the first tick that sees a backlog asks for its runs). Removing keys stays with the
    partitions sensor."""
    counts = {topic: max(by_partition) + 1 for topic, by_partition in ends.items() if by_partition}
    new = plan_new_partitions(set(ordered), counts).keys
    if not new:
        return ordered, []
    return [*ordered, *new], [partitions.build_add_request(list(new))]


def partitions_sensor(pipeline: Pipeline, interval: int) -> dg.SensorDefinition:
    """Adds a dynamic partition for every Kafka partition of the pipeline's topics."""
    partitions = pipeline_partitions(pipeline.name)
    source = source_of(pipeline)

    def _body(
        context: dg.SensorEvaluationContext, _: str | None
    ) -> dg.SensorResult | dg.SkipReason:
        existing = set(context.instance.get_dynamic_partitions(partitions.name))
        kafka = kafka_resource(context, pipeline.name).settings()
        # a clustered pipeline's on the active cluster: as many as its largest physical topic
        with source.opened(context, kafka) as reading:
            counts, missing = reading.partition_counts(pipeline.kafka.topics)
        new = plan_new_partitions(existing, counts, missing)
        requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
        if new.keys:
            context.log.info(f"adding partitions {list(new.keys)}")
            requests.append(partitions.build_add_request(list(new.keys)))
        if new.remove:
            # a key added by hand that matches no Kafka partition: its runs could only fail
            context.log.warning(str(new.remove_reason))
            requests.append(partitions.build_delete_request(list(new.remove)))
        if not requests:
            return dg.SkipReason(new.skip_reason)
        return dg.SensorResult(dynamic_partitions_requests=requests)

    return pipeline_sensor(
        pipeline,
        "partitions",
        interval,
        _body,
        "Keeps the dynamic partitions in step with the topics' partition counts (on the active "
        "cluster of a clustered pipeline): adds a key per new Kafka partition, removes keys that "
        "match none (naming the valid ones). An unreachable broker or keeper is a skip reason "
        "naming it.",
        keeper=source.switches,
    )


def _caught_up(topics: list[TopicState]) -> set[str]:
    """Partition keys whose committed position has reached Kafka's last stable offset."""
    done = set()
    for state in topics:
        for p, end in state.ends.items():
            position = committed(state.records.get(p))
            if position is not None and position >= end:
                done.add(partition_key(TopicPartition(state.topic, p)))
    return done


def clickhouse_lag_sensor(
    pipeline: Pipeline, interval: int, chdb_path: str | None
) -> dg.SensorDefinition:
    partitions = pipeline_partitions(pipeline.name)
    asset = clickhouse_key(pipeline)
    sink = f"{pipeline.name}.{CLICKHOUSE_SINK}"
    assert pipeline.clickhouse is not None
    source = source_of(pipeline)
    # following is for one cluster's topics; a clustered pipeline's runs end once caught up
    follows = pipeline.clickhouse.follow.idle_seconds > 0 and not source.switches

    def _evaluate(
        context: dg.SensorEvaluationContext, _: str | None
    ) -> dg.SensorResult | dg.SkipReason:
        kafka = kafka_resource(context, pipeline.name).settings()
        keeper: KeeperResource = context.resources.keeper
        ordered = context.instance.get_dynamic_partitions(partitions.name)
        known = set(ordered)
        busy = _busy(context.instance, sink)

        def needs_starts(state: TopicState) -> bool:
            # a partition seen now is planned now, registered or not (``_registering``)
            seen = {partition_key(TopicPartition(state.topic, p)) for p in state.ends}
            return clickhouse_needs_log_starts(state, known | seen, busy, pipeline.reset)

        with shared_store(keeper.settings()) as store:  # one session across ticks
            try:  # one cluster's topics, or the active cluster's keys and physical topics
                topics = source.at(kafka, store).clickhouse_states(
                    store, pipeline.name, CLICKHOUSE_SINK, pipeline.kafka.topics, needs_starts
                )
            except SwitchInProgress as exc:
                return dg.SkipReason(str(exc))
        ordered, added = _registering(
            partitions,
            ordered,
            {t.topic: t.ends for t in topics if t.topic in pipeline.kafka.topics},
        )
        known = set(ordered)
        failures = failed_runs(context.instance, sink)
        plan = plan_clickhouse(
            sink,
            topics,
            known=known,
            busy=busy,
            failures=failures,
            stuck=failures.stuck,
            max_attempts=pipeline.retry.max_attempts,
            reset=pipeline.reset,
            chdb_path=chdb_path,
            ordered_keys=ordered,
            queued=chdb_path is not None and bool(_runs(context.instance, sink, _WAITING, 1)),
            running_ends=asked_ends(_runs(context.instance, sink, _RUNNING)) if chdb_path else None,
            follow=follows,
            following=follows and chdb_path is not None and _following(context.instance, sink),
            backoff=_backoff(pipeline),
            now=time.time(),
        )
        heals: list[dg.RunRequest] = []
        if ANY_PARTITION not in busy and not (chdb_path and plan.runs):
            # runs that record the true state of caught-up partitions a killed run left failed
            at = {
                partition_key(TopicPartition(t.topic, p)): committed(state)
                for t in topics
                for p, state in t.records.items()
            }
            skip = busy | (set(ordered) - _caught_up(topics))  # lagging or in flight
            for r in plan.runs:
                skip.update(run_partitions(r.tags, ordered))
                skip.update([r.partition_key] if r.partition_key else [])

            def tags_for(key: str) -> dict[str, str]:
                tags = {
                    SINK_TAG: sink,
                    SINK_PARTITION_TAG: f"{sink}.{key}",
                    PRIORITY_TAG: NORMAL_PRIORITY,
                    # a sensor's run, like every other: the state it starts from (caught up)
                    START_STATE_TAG: f"caught-up:{at.get(key)}",
                }
                return {**tags, CHDB_PATH_TAG: chdb_path} if chdb_path else tags

            check = dg.AssetCheckKey(asset, CHECK_NAME)
            heals = heal_requests(
                context.instance, asset, check, failures.runs, ordered, skip, tags_for, time.time()
            )
            for request in heals:
                context.log.info(
                    f"{request.partition_key}: caught up, but its newest run "
                    f"{request.tags[HEAL_TAG]} failed; asking for a run that records its state"
                )
        return _result(context, plan, asset, heals, added)

    return pipeline_sensor(
        pipeline,
        "clickhouse_lag",
        interval,
        _evaluate,
        "Requests runs for the partitions whose ClickHouse position is behind Kafka's last "
        "stable offset, partitions left in BEFORE first: one run per partition on a ClickHouse "
        "server, one key-range run for all of them on an embedded chDB path.",
        keeper=True,
        target=asset,
    )


def hudi_lag_sensor(pipeline: Pipeline, interval: int) -> dg.SensorDefinition:
    partitions = pipeline_partitions(pipeline.name)
    asset = hudi_key(pipeline)
    assert pipeline.hudi is not None
    table = pipeline.hudi.path
    topic = pipeline.kafka.topics[0]
    sink = f"{pipeline.name}.hudi"
    source = source_of(pipeline)
    # as for ClickHouse: a clustered pipeline's runs end once caught up
    follows = pipeline.hudi.follow.idle_seconds > 0 and not source.switches

    def _evaluate(
        context: dg.SensorEvaluationContext, _: str | None
    ) -> dg.SensorResult | dg.SkipReason:
        kafka = kafka_resource(context, pipeline.name).settings()
        busy = _busy(context.instance, sink)
        if busy:  # before any Kafka request
            following = follows and _following(context.instance, sink)
            return dg.SkipReason(hudi_blocked(busy, table, following))
        ordered = context.instance.get_dynamic_partitions(partitions.name)

        def needs_starts(ends: Mapping[int, int], checkpoint: Checkpoint) -> bool:
            return hudi_needs_log_starts(topic, ends, checkpoint, set(ordered), pipeline.reset)

        # the table's position against the ends (a clustered one's on the active cluster)
        try:
            with source.opened(context, kafka) as reading:
                ends, checkpoint, lows = reading.hudi_positions(table, topic, needs_starts)
        except SwitchInProgress as exc:
            return dg.SkipReason(str(exc))
        except HudiTimelineError as exc:
            return dg.SkipReason(f"cannot read the Hudi table's checkpoint: {exc}")
        plan = plan_hudi(
            sink,
            table,
            topic,
            ends=ends,
            ordered_keys=ordered,
            checkpoint=checkpoint,
            busy=busy,
            failures=failed_runs(context.instance, sink),
            max_attempts=pipeline.retry.max_attempts,
            reset=pipeline.reset,
            log_starts=lows,
            backoff=_backoff(pipeline),
            now=time.time(),
            follow=follows,
        )
        return _result(context, plan, asset)

    return pipeline_sensor(
        pipeline,
        "hudi_lag",
        interval,
        _evaluate,
        "Requests ONE run (one Hudi commit) covering every partition whose Hudi checkpoint is "
        "behind Kafka's last stable offset; with hudi.follow the run covers every partition and "
        "goes on committing what arrives.",
        keeper=source.switches,
        target=asset,
    )
