"""Sensors: keep the partitions in step with Kafka, and ask for runs where a sink is behind.

Cost per evaluation, whatever the number of partitions: one metadata + one ListOffsets request
per topic (``end_offsets``, read_committed), one keeper listing plus pipelined gets per topic
(``read_many``), one run-storage query for runs in flight and one for failed runs. No Spark, no
ClickHouse: the sensor daemon must never open the chDB data path (one process per path) nor
start a JVM.

Where a sink stands:

* ClickHouse: the keeper record of each partition. A partition left in ``BEFORE`` (a run died
  mid-step) is requested first, with a higher ``dagster/priority``, so it recovers first.
* Hudi: the Kafka checkpoint that the Hudi asset recorded in its latest materialization's
  metadata. Reading the real checkpoint needs Hudi's Java API (a JVM per evaluation, ~15 s),
  so the sensor reads this copy instead. The copy is written right after the commit, so it can
  only lag behind the table, never run ahead of it: a stale copy costs one run that finds
  nothing to do and records the truth; it can never make the sensor skip data. (Only a table
  restored to an older state behind Dagster's back would be missed; run a backfill then.)

Run keys contain the end offsets asked for and the sink's position, so re-evaluating with
nothing new yields the same keys and Dagster launches nothing; and partitions with a run
already queued or running are left alone.

A run that fails (or is killed) without moving the position would leave the sensor asking for
the same run key, which Dagster never launches twice: the partition would be stuck. So each
run is tagged with the state it starts from (``eos_pipeline/start_state``), every evaluation
counts the failed and canceled runs per partition that started from the current state (one
run-storage query), and the count goes into the run key: each failure yields a fresh key. After
``retry.max_attempts`` failures from the same state the sensor stops asking and logs a warning
naming the partition, the position and the last failed run, so a permanent error never becomes
a crash loop.

One Hudi table takes one writer at a time, so all its lagging partitions go into ONE run: a
partition-key-range run (``dagster/asset_partition_range_start``/``_end`` tags) over the
table's dynamic partitions, which the asset's ``BackfillPolicy.single_run()`` turns into one
``HudiTableSync.run(partitions=[...])``, i.e. one commit.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from eos_pipeline.adapters.kafka import KafkaReadError, end_offsets, partition_count, start_offsets
from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.defs.assets import (
    CLICKHOUSE_SINK,
    checkpoint_from_materialization,
    clickhouse_key,
    hudi_key,
)
from eos_pipeline.defs.config import Pipeline
from eos_pipeline.defs.partitions import keys_for, partition_key, pipeline_partitions
from eos_pipeline.defs.resources import kafka_resource_key
from eos_pipeline.sinks.clickhouse import state_of

log = logging.getLogger(__name__)

SINK_PARTITION_TAG = "eos_pipeline/sink_partition"
HUDI_TABLE_TAG = "eos_pipeline/hudi_table"
CHDB_PATH_TAG = "eos_pipeline/chdb_path"
SINK_TAG = "eos_pipeline/sink"
PRIORITY_TAG = "dagster/priority"
#: The sink state a run starts from (ClickHouse: ``<phase>:<position>``; Hudi: a digest of the
#: checkpoint): failed runs are counted per partition and start state.
START_STATE_TAG = "eos_pipeline/start_state"
PARTITION_TAG = "dagster/partition"
#: How many of a sink's most recent failed runs one evaluation looks at.
FAILED_RUNS_LOOKBACK = 1000
#: Most runs one ClickHouse sensor evaluation asks for (the rest come on the next tick).
MAX_RUNS_PER_TICK = 200

_IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


_FAILED = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


@dataclass
class Failures:
    """Failed runs that started from one state of one partition; the newest one's id."""

    count: int
    last_run_id: str


def failures_by_start(instance: dg.DagsterInstance, sink: str) -> dict[tuple[str, str], Failures]:
    """``(partition key or "*", start state) -> Failures`` of ``sink``'s runs (one query)."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(statuses=_FAILED, tags={SINK_TAG: sink}), limit=FAILED_RUNS_LOOKBACK
    )
    out: dict[tuple[str, str], Failures] = {}
    for run in runs:  # newest first
        start = run.tags.get(START_STATE_TAG)
        if start is None:
            continue  # launched by hand: not counted
        key = (run.tags.get(PARTITION_TAG, "*"), start)
        if key in out:
            out[key].count += 1
        else:
            out[key] = Failures(1, run.run_id)
    return out


def _given_up(what: str, state: str, failed: Failures, attempts: int) -> str:
    return (
        f"{what}: {failed.count} runs started from {state} failed (last: run "
        f"{failed.last_run_id}); retry.max_attempts is {attempts}, so no more runs are "
        "requested for it. Fix the cause (see that run's logs), then launch a run from the UI "
        "or a backfill."
    )


def _in_flight_partitions(instance: dg.DagsterInstance, sink: str) -> set[str]:
    """Partition keys of ``sink`` with a run queued or running (single-partition runs)."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(statuses=_IN_FLIGHT, tags={SINK_TAG: sink}), limit=1000
    )
    busy: set[str] = set()
    for run in runs:
        key = run.tags.get("dagster/partition")
        if key:
            busy.add(key)
        if ASSET_PARTITION_RANGE_START_TAG in run.tags:
            busy.add("*")  # a range run: the whole table is being written
    return busy


def partitions_sensor(pipeline: Pipeline, interval: int) -> dg.SensorDefinition:
    """Adds a dynamic partition for every Kafka partition of the pipeline's topics."""
    kafka_key = kafka_resource_key(pipeline.name)
    partitions = pipeline_partitions(pipeline.name)

    @dg.sensor(
        name=f"{pipeline.name}_partitions",
        minimum_interval_seconds=interval,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys={kafka_key},
        description="Keeps the dynamic partitions in step with the topics' partition counts.",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        kafka = getattr(context.resources, kafka_key).settings()
        existing = set(context.instance.get_dynamic_partitions(partitions.name))
        wanted: list[str] = []
        missing_topics = []
        for topic in pipeline.kafka.topics:
            try:
                count = partition_count(kafka, topic)
            except KafkaReadError:
                missing_topics.append(topic)
                continue
            wanted += [k for k in keys_for(topic, count) if k not in existing]
        if not wanted:
            note = f"; topics not found: {missing_topics}" if missing_topics else ""
            return dg.SkipReason(f"{len(existing)} partitions, none new{note}")
        context.log.info(f"adding partitions {wanted}")
        return dg.SensorResult(dynamic_partitions_requests=[partitions.build_add_request(wanted)])

    return _sensor


def clickhouse_lag_sensor(
    pipeline: Pipeline, interval: int, chdb_path: str | None
) -> dg.SensorDefinition:
    kafka_key = kafka_resource_key(pipeline.name)
    partitions = pipeline_partitions(pipeline.name)
    asset = clickhouse_key(pipeline)
    sink = f"{pipeline.name}.{CLICKHOUSE_SINK}"

    @dg.sensor(
        name=f"{pipeline.name}_clickhouse_lag",
        minimum_interval_seconds=interval,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys={kafka_key, "keeper"},
        target=dg.AssetSelection.assets(asset),
        description="Requests a run per partition whose ClickHouse position is behind Kafka's "
        "last stable offset; partitions left in BEFORE first.",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        kafka = getattr(context.resources, kafka_key).settings()
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        busy = _in_flight_partitions(context.instance, sink)
        failures = failures_by_start(context.instance, sink)
        attempts = pipeline.retry.max_attempts
        stuck: list[str] = []
        recover: list[dg.RunRequest] = []
        behind: list[dg.RunRequest] = []
        with context.resources.keeper.store() as store:
            for topic in pipeline.kafka.topics:
                try:
                    ends = end_offsets(kafka, topic)
                except KafkaReadError:
                    continue
                records = store.read_many(pipeline.name, CLICKHOUSE_SINK, topic)
                lows: dict[int, int] | None = None
                for p, end in sorted(ends.items()):
                    key = partition_key(TopicPartition(topic, p))
                    if key not in known or key in busy:
                        continue
                    stored = records.get(p)
                    state = state_of(stored.record if stored else None)
                    if state is None:
                        if pipeline.reset == "latest":
                            position, phase = end, "new"  # a first run pins the start
                            if stored is not None:
                                continue
                        else:
                            lows = lows if lows is not None else start_offsets(kafka, topic)
                            position, phase = lows[p], "new"
                        if position >= end and pipeline.reset == "earliest":
                            continue
                    else:
                        position, phase = state.range.end, state.phase.value
                        if state.phase is not Phase.BEFORE and position >= end:
                            continue
                    start = f"{phase}:{position}"
                    failed = failures.get((key, start))
                    if failed is not None and failed.count >= attempts:
                        stuck.append(_given_up(f"{key} ({sink})", start, failed, attempts))
                        continue
                    tags = {
                        SINK_TAG: sink,
                        SINK_PARTITION_TAG: f"{sink}.{key}",
                        PRIORITY_TAG: "10" if phase == Phase.BEFORE.value else "0",
                        START_STATE_TAG: start,
                    }
                    if chdb_path:
                        tags[CHDB_PATH_TAG] = chdb_path
                    retry = f":retry{failed.count}" if failed else ""
                    request = dg.RunRequest(
                        run_key=f"{sink}:{key}:{phase}:{position}:{end}{retry}",
                        partition_key=key,
                        tags=tags,
                    )
                    (recover if phase == Phase.BEFORE.value else behind).append(request)
        for message in stuck:
            context.log.warning(message)
        requests = (recover + behind)[:MAX_RUNS_PER_TICK]
        if not requests:
            if stuck:
                return dg.SkipReason(" ".join(stuck))
            return dg.SkipReason("every partition is caught up (or has a run in flight)")
        return dg.SensorResult(run_requests=requests)

    return _sensor


def hudi_lag_sensor(pipeline: Pipeline, interval: int) -> dg.SensorDefinition:
    kafka_key = kafka_resource_key(pipeline.name)
    partitions = pipeline_partitions(pipeline.name)
    asset = hudi_key(pipeline)
    assert pipeline.hudi is not None
    table = pipeline.hudi.path
    topic = pipeline.kafka.topics[0]
    sink = f"{pipeline.name}.hudi"

    @dg.sensor(
        name=f"{pipeline.name}_hudi_lag",
        minimum_interval_seconds=interval,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys={kafka_key},
        target=dg.AssetSelection.assets(asset),
        description="Requests ONE run (one Hudi commit) covering every partition whose Hudi "
        "checkpoint is behind Kafka's last stable offset.",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        kafka = getattr(context.resources, kafka_key).settings()
        if _in_flight_partitions(context.instance, sink):
            return dg.SkipReason(f"a run writing {table} is queued or running")
        try:
            ends = end_offsets(kafka, topic)
        except KafkaReadError as exc:
            return dg.SkipReason(str(exc))
        ordered = context.instance.get_dynamic_partitions(partitions.name)
        known = set(ordered)
        event = context.instance.get_latest_materialization_event(asset)
        checkpoint = checkpoint_from_materialization(event, topic) or {}
        lows: dict[int, int] | None = None
        lagging: list[str] = []
        for p, end in sorted(ends.items()):
            tp = TopicPartition(topic, p)
            key = partition_key(tp)
            if key not in known:
                continue
            if tp in checkpoint:
                position = checkpoint[tp]
            elif pipeline.reset == "latest":
                position = -1  # never recorded: a first commit pins the start
            else:
                lows = lows if lows is not None else start_offsets(kafka, topic)
                position = lows[p]
            if position < end:
                lagging.append(key)
        if not lagging:
            return dg.SkipReason("the Hudi table is caught up")
        # One run over a key range of the dynamic partitions (in the order they were added);
        # partitions in between that are caught up are read as empty ranges, harmless.
        first, last = min(lagging, key=ordered.index), max(lagging, key=ordered.index)
        state = ",".join(f"{p}:{checkpoint.get(TopicPartition(topic, p), '-')}" for p in ends)
        wanted = ",".join(str(e) for _, e in sorted(ends.items()))
        # the checkpoint can be long (one entry per partition): the tag holds a digest of it
        start = "checkpoint:" + hashlib.sha256(state.encode()).hexdigest()[:16]
        failed = failures_by_start(context.instance, sink).get(("*", start))
        attempts = pipeline.retry.max_attempts
        if failed is not None and failed.count >= attempts:
            message = _given_up(f"Hudi table {table}", f"checkpoint {state}", failed, attempts)
            context.log.warning(message)
            return dg.SkipReason(message)
        tags: dict[str, Any] = {
            SINK_TAG: sink,
            HUDI_TABLE_TAG: table,
            ASSET_PARTITION_RANGE_START_TAG: first,
            ASSET_PARTITION_RANGE_END_TAG: last,
            START_STATE_TAG: start,
        }
        retry = f":retry{failed.count}" if failed else ""
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"{sink}:{state}:{wanted}{retry}", asset_selection=[asset], tags=tags
                )
            ]
        )

    return _sensor
