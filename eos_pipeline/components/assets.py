"""Assets, one per target table.

* ClickHouse: each partition of a run is caught up from the keeper's position to the end
  offset fixed at its start; a run over several partitions (an embedded chDB path) takes those
  left in ``BEFORE`` first, and sets aside one that needs a person, fails naming it after
  writing the others (:func:`catch_up`, :func:`fail_naming`; the rule: ``core.planning``).
* Hudi: all partitions of a run are ONE commit (``BackfillPolicy.single_run()``: a backfill too).

What a run shows is built by :mod:`~eos_pipeline.components.metadata`.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import dagster as dg

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.keeper import default_writer_id
from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.following import (
    clickhouse_written,
    follow_hudi_run,
    follow_run,
    hudi_written,
    policy_of,
    record_caught_up,
    recording,
)
from eos_pipeline.components.health import chain, named_faults
from eos_pipeline.components.metadata import (
    CLICKHOUSE_SINK,
    clickhouse_definition_metadata,
    clickhouse_run_metadata,
    clustered_hudi_metadata,
    code_version,
    hudi_definition_metadata,
    hudi_row_counts,
    hudi_run_metadata,
    pipeline_partitions,
    record_run,
)
from eos_pipeline.components.resources import kafka_resource, kafka_resource_key
from eos_pipeline.components.source import source_of
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import (
    NEEDS_PERSON_TAG,
    encode,
    parse_partition_key,
    partition_key,
    recovery_order,
    state_label,
)
from eos_pipeline.core.positions import sink_state
from eos_pipeline.core.retries import FailureFacts, Fault, diagnose
from eos_pipeline.sinks.clickhouse import ClickHouseTableSpec, SchemaFollower, SyncReport
from eos_pipeline.sinks.follow import merge_hudi_reports, merge_reports
from eos_pipeline.sinks.hooks import NO_HOOKS, SinkHooks

CHECK_NAME = "exactly_once"
#: The hooks of a pipeline's sink (``"clickhouse"`` or ``"hudi"``) in its runs: the product
#: passes none; a test code location injects some (see :mod:`eos_pipeline.sinks.hooks`).
HooksFor = Callable[[Pipeline, str], SinkHooks]


#: Asset groups by where the data lives: the lineage boxes tell a topic, its dead letters and
#: the tables apart at a glance (``demo-events`` and ``demo_events`` look alike).
KAFKA_GROUP = "kafka"
DEAD_LETTER_GROUP = "dead_letters"
CLICKHOUSE_GROUP = "clickhouse"
HUDI_GROUP = "hudi"
#: Tag naming each asset's pipeline (filter the lineage by it: ``tag:eos_pipeline/pipeline=demo``).
PIPELINE_TAG = "eos_pipeline/pipeline"


def topic_key(topic: str) -> dg.AssetKey:
    """A Kafka topic as an external asset (:mod:`eos_pipeline.components.topics`)."""
    return dg.AssetKey(["kafka", topic])


def dead_letter_key(pipeline: Pipeline) -> dg.AssetKey:
    return topic_key(pipeline.dead_letter_topic)


def clickhouse_key(pipeline: Pipeline) -> dg.AssetKey:
    assert pipeline.clickhouse is not None
    return dg.AssetKey(["clickhouse", pipeline.clickhouse.database, pipeline.clickhouse.table])


def hudi_key(pipeline: Pipeline) -> dg.AssetKey:
    assert pipeline.hudi is not None
    return dg.AssetKey(["hudi", pipeline.hudi.table])


def clickhouse_spec(pipeline: Pipeline) -> ClickHouseTableSpec:
    assert pipeline.clickhouse is not None
    return ClickHouseTableSpec(
        pipeline=pipeline.name,
        database=pipeline.clickhouse.database,
        table=pipeline.clickhouse.table,
        schema=pipeline.table_schema,
        sink=CLICKHOUSE_SINK,
        max_records=pipeline.batch.max_records,
        max_bytes=pipeline.batch.max_bytes,
        max_record_bytes=pipeline.batch.max_record_bytes,
        reset=pipeline.reset,
        json_parser=pipeline.clickhouse.json_parser,
    )


def hudi_spec(pipeline: Pipeline, kafka_options: dict[str, str]) -> Any:
    from eos_pipeline.sinks.hudi import HudiTableSpec

    hudi = pipeline.hudi
    assert hudi is not None
    return HudiTableSpec(
        pipeline=pipeline.name,
        topic=pipeline.kafka.topics[0],
        table_path=hudi.path,
        table_name=hudi.table,
        schema=pipeline.table_schema,
        table_type=hudi.table_type,
        record_key_fields=tuple(hudi.record_key),
        ordering_field=hudi.ordering_field,
        partition_fields=tuple(hudi.partition_fields),
        operation=hudi.operation,
        bulk_insert_min_records=hudi.bulk_insert_min_records,
        max_records_per_partition=pipeline.batch.max_records,
        max_record_bytes=pipeline.batch.max_record_bytes,
        reset=pipeline.reset,
        hudi_options=dict(hudi.options),
        kafka_options=kafka_options,
    )


# ------------------------------------------------------------------------------- ClickHouse


def clickhouse_asset(
    pipeline: Pipeline, pool: str | None, hooks: SinkHooks = NO_HOOKS
) -> dg.AssetsDefinition:
    spec = clickhouse_spec(pipeline)

    @dg.asset(
        key=clickhouse_key(pipeline),
        deps=[topic_key(t) for t in pipeline.kafka.topics],
        partitions_def=pipeline_partitions(pipeline.name),
        group_name=CLICKHOUSE_GROUP,
        tags={PIPELINE_TAG: pipeline.name},
        required_resource_keys={kafka_resource_key(pipeline.name), "keeper", "clickhouse"},
        pool=pool,
        kinds={"clickhouse", "table"},
        description=(
            f"Topic(s) {', '.join(pipeline.kafka.topics)} in ClickHouse table "
            f"{spec.database}.{spec.table}, exactly once per Kafka offset (keeper state machine "
            "+ insert deduplication tokens). One partition per Kafka topic-partition. A run or "
            "backfill of a caught-up partition reads nothing and records no activity numbers."
        ),
        metadata=clickhouse_definition_metadata(pipeline),
        owners=pipeline.owners or None,
        code_version=code_version(pipeline, CLICKHOUSE_SINK),
    )
    def _clickhouse(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        with named_faults(context, pipeline):
            return _clickhouse_run(context)

    def _clickhouse_run(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        kafka = kafka_resource(context, pipeline.name).settings()
        with context.resources.clickhouse.sink() as sink, context.resources.keeper.store() as st:
            sink.ensure_table(spec.database, spec.table, spec.schema)
            writer = default_writer_id(context.run.run_id)
            # one cluster's topic, or the active cluster's physical topics (T and its replicas)
            source = source_of(pipeline).at(kafka, st)
            sync = source.clickhouse_sync(
                spec, st, sink, pipeline.dead_letter_topic, writer=writer, fault=hooks.fault
            )
            # partitions left in BEFORE first; one that needs a person is set aside
            order = _run_order(st, pipeline, context.partition_keys)
            reports, stuck = catch_up(context, order, source.partitions, sync, st, pipeline.name)
            policy = policy_of(pipeline, context.run.tags)

            def count(tp: TopicPartition) -> int:  # on the sorting key's prefix: cheap
                topic = sync.row_topic(tp.topic)
                return sink.count(
                    spec.database, spec.table, topic, tp.partition, source=spec.schema.source
                )

            def rows(tps: list[TopicPartition]) -> dict[TopicPartition, int]:
                return {tp: count(tp) for tp in tps}

            if policy is not None and not stuck:
                record_caught_up(context, {r.tp: r.end for r in reports}, rows)
                step = recording(context, sync.run, clickhouse_written, rows)
                reports = merge_reports(follow_run(context, policy, step, reports, kafka))
            row_counts = {partition_key(r.tp): count(r.tp) for r in reports}
            table_rows = sink.count(spec.database, spec.table)  # every partition's rows
        run = clickhouse_run_metadata(
            reports, row_counts, clustered=source.cluster is not None, table_rows=table_rows
        )
        run.metadata.update(evolution_metadata(sync.follower))
        if stuck:  # the partitions written get their materializations; the run fails
            fail_naming(context, stuck, run.partitions)
        metadata = record_run(context, run)
        hooks.fault("before_materialization_event")
        return dg.MaterializeResult(metadata=metadata)

    return _clickhouse


def evolution_metadata(follower: SchemaFollower) -> dict[str, Any]:
    """A subject's table: the writer schema id it is at, and the evolutions this run applied
    (schema ids, columns added and widened, when)."""
    if not follower.follows:
        return {}
    out: dict[str, Any] = {"schema_id": follower.schema.schema_id}
    if follower.applied:
        out["schema_evolution"] = dg.MetadataValue.json(follower.applied)
    return out


def _run_order(store: Any, pipeline: Pipeline, keys: Iterable[str]) -> list[str]:
    """The run's partitions, those left in ``BEFORE`` first (one keeper listing per topic)."""
    keys = list(keys)
    if len(keys) == 1:
        return keys
    states: dict[str, Any] = {}
    for topic in sorted({parse_partition_key(k).topic for k in keys}):
        for p, stored in store.read_many(pipeline.name, CLICKHOUSE_SINK, topic).items():
            states[partition_key(TopicPartition(topic, p))] = sink_state(stored.record)
    return recovery_order(keys, states)


# ------------------------------------------------------------------------------- Hudi


def hudi_asset(pipeline: Pipeline, pool: str, hooks: SinkHooks = NO_HOOKS) -> dg.AssetsDefinition:
    hudi = pipeline.hudi
    assert hudi is not None
    topic = pipeline.kafka.topics[0]

    @dg.asset(
        key=hudi_key(pipeline),
        deps=[topic_key(topic)],
        partitions_def=pipeline_partitions(pipeline.name),
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=HUDI_GROUP,
        tags={PIPELINE_TAG: pipeline.name},
        required_resource_keys={kafka_resource_key(pipeline.name), "spark"}
        | ({"keeper"} if source_of(pipeline).switches else set()),
        pool=pool,
        kinds={"hudi", "spark", "table"},
        description=(
            f"Topic {topic} in Hudi table {hudi.table} ({hudi.table_type}) at {hudi.path}. All "
            "partitions of a run are ONE Hudi commit whose metadata carries the Kafka checkpoint. "
            "A run or backfill of caught-up partitions makes no commit and records no activity "
            "numbers."
        ),
        metadata=hudi_definition_metadata(pipeline),
        owners=pipeline.owners or None,
        code_version=code_version(pipeline, "hudi"),
    )
    def _hudi(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        with named_faults(context, pipeline):
            return _hudi_run(context)

    def _hudi_run(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from eos_pipeline.sinks.hudi import HudiTableSync  # pyspark: loaded by Hudi runs only

        resource = kafka_resource(context, pipeline.name)
        kafka = resource.settings()
        spark = context.resources.spark.spark_session
        spec = hudi_spec(pipeline, resource.spark_kafka_options())
        tps = [parse_partition_key(k) for k in context.partition_keys]
        foreign = sorted({tp.topic for tp in tps} - {topic})
        if foreign:
            raise dg.Failure(f"partition keys of topic(s) {foreign} do not belong to {topic!r}")
        with source_of(pipeline).opened(context, kafka) as source:
            sync = HudiTableSync(
                spec,
                source,
                spark,
                DeadLetterWriter(source.kafka, pipeline.dead_letter_topic, spec.pipeline),
                fault=hooks.fault,
                source_hook=hooks.source_hook,
            )
            report = sync.run(partitions=sorted(tp.partition for tp in tps))
        if source.cluster is not None:  # physical topics are not Dagster partitions
            hooks.fault("before_materialization_event")
            return dg.MaterializeResult(metadata=clustered_hudi_metadata(report))
        context.log.info(
            f"hudi {hudi.table}: commit {report.instant_time or '(none: caught up)'} over "
            f"{len(report.ranges)} partition(s), {report.total_records_read} read, "
            f"{report.total_rows_written} written, {report.total_dead_letters} dead letters"
        )
        followed: dict[str, Any] = {}
        policy = policy_of(pipeline, context.run.tags, "hudi")
        if policy is not None:  # one more transaction (commit) per burst of new records

            def rows(tps: list[TopicPartition]) -> dict[TopicPartition, int]:
                return hudi_row_counts(spark, hudi.path, pipeline, sorted(tps))

            counted: dict[TopicPartition, int] = {}
            if report.instant_time is not None or report.checkpoint_before is not None:
                after = report.checkpoint_after
                positions = {tp: after[tp] for tp in tps if tp in after}
                counted = record_caught_up(context, positions, rows)

            def commit(parts: list[int]) -> Any:
                """One more commit; the rows it wrote are counted on (no Spark query)."""
                done = sync.run(partitions=parts)
                for tp, written in done.rows_written.items():
                    counted[tp] = counted.get(tp, 0) + written
                return done

            # each commit's partitions recorded as it goes (at most every 10 s), as ClickHouse
            step = recording(context, commit, hudi_written, lambda tps: counted)
            steps, why = follow_hudi_run(context, policy, step, report, tps, kafka, hudi.path)
            report = merge_hudi_reports(steps)
            instants = [r.instant_time for r in steps if r.instant_time is not None]
            followed = {"commits": ", ".join(instants), "commit_count": len(instants)}
            followed["following_ended"] = why
        exists = report.instant_time is not None or report.checkpoint_before is not None
        row_counts = (
            hudi_row_counts(spark, hudi.path, pipeline, sorted(report.ranges)) if exists else None
        )
        run = hudi_run_metadata(report, row_counts, context.partition_keys)
        run.metadata.update(followed)
        run.metadata.update(evolution_metadata(sync.follower))
        metadata = record_run(context, run)
        hooks.fault("before_materialization_event")
        return dg.MaterializeResult(metadata=metadata)

    return _hudi


def hudi_pool(pipeline: Pipeline) -> str:
    """One writer per Hudi table: a pool of its own (``dagster.yaml`` gives pools 1 slot)."""
    assert pipeline.hudi is not None
    return f"hudi_{pipeline.hudi.table}"


# ------------------------------------------------------------ ClickHouse runs over many partitions


#: A run over more partitions logs one summary line: each line is an event-log record (a third
#: of a wide run's records), and each partition's numbers are on its materialization anyway.
PER_PARTITION_LOG_LIMIT = 16


def catch_up(
    context: dg.AssetExecutionContext,
    order: Sequence[str],
    reads: Callable[[TopicPartition], list[TopicPartition]],
    sync: Any,
    store: Any,
    pipeline: str,
) -> tuple[list[SyncReport], dict[str, tuple[str, str]]]:
    """Catch each partition key in ``order`` up (``reads``: the physical partitions of a key);
    returns the reports and the keys set aside for a person (only in a run of several keys:
    a single-partition run fails as any run does)."""
    reports: list[SyncReport] = []
    stuck: dict[str, tuple[str, str]] = {}
    planned: list[tuple[str, list[TopicPartition] | Exception]] = []
    for key in order:
        try:
            planned.append((key, reads(parse_partition_key(key))))
        except Exception as exc:  # handled in its turn, below
            planned.append((key, exc))
    every = [tp for _, tps in planned if not isinstance(tps, Exception) for tp in tps]
    with sync.reading(every):  # one Kafka consumer, and Kafka asked once, for the whole run
        for key, tps in planned:
            try:
                if isinstance(tps, Exception):
                    raise tps
                for tp in tps:
                    report = sync.run(tp)
                    reports.append(report)
                    label = key if sync.cluster is None else f"{tp} on {sync.cluster}"
                    if len(order) > PER_PARTITION_LOG_LIMIT:
                        continue
                    context.log.info(
                        f"{label}: [{report.start}, {report.end}) {report.records_read} read, "
                        f"{report.rows_sent} inserted, cases {report.cases or ['caught up']}"
                    )
            except Exception as exc:
                cause = person_cause(exc)
                if len(order) == 1 or cause is None:
                    raise
                # the state label as the sensor will see it (its keeper record)
                tp = parse_partition_key(key)
                stored = store.read_many(pipeline, CLICKHOUSE_SINK, tp.topic).get(tp.partition)
                stuck[key] = (state_label(sink_state(stored.record) if stored else None), cause)
                context.log.error(f"{key} needs a person, set aside: {cause}")
    if len(order) > PER_PARTITION_LOG_LIMIT:
        cases = Counter(case for r in reports for case in r.cases or ["caught up"])
        context.log.info(
            f"{len(reports)} partition(s): {sum(r.records_read for r in reports)} read, "
            f"{sum(r.rows_sent for r in reports)} inserted, cases {dict(cases)}"
        )
    return reports, stuck


def person_cause(exc: BaseException) -> str | None:
    """The cause, if ``exc`` is an error no retry can fix (``core.retries``); else None."""
    errors = tuple((type(err).__name__, str(err)) for err in chain(exc))
    diagnosis = diagnose(FailureFacts(errors=errors))
    return diagnosis.cause if diagnosis.fault is Fault.NEEDS_PERSON else None


def fail_naming(
    context: dg.AssetExecutionContext,
    stuck: Mapping[str, tuple[str, str]],
    written: Mapping[str, Mapping[str, Any]],
) -> None:
    """Materialize the partitions ``written`` (their metadata, reported to the instance at
    once: events logged by a failing step are dropped), record the set-aside ones on the run
    (the sensor reads them) and fail it."""
    for key, values in written.items():
        context.instance.report_runless_asset_event(
            dg.AssetMaterialization(
                context.asset_key,
                partition=key,
                metadata={**values, "written_by_run": context.run.run_id},
            )
        )
    context.instance.add_run_tags(context.run.run_id, {NEEDS_PERSON_TAG: encode(stuck)})
    lines = [f"{key} (from {label}): {cause}" for key, (label, cause) in sorted(stuck.items())]
    raise dg.Failure(
        description="partitions set aside until a person acts (the others were written): "
        + "; ".join(lines),
        metadata={"needs_a_person": dg.MetadataValue.md("\n".join(f"- {x}" for x in lines))},
    )
