"""Assets (one per target table), built from pipeline config.

* ClickHouse: each partition of a run is caught up by :class:`ClickHousePartitionSync`: from
  the keeper's position to the end offset fixed at the start of that partition's sync, capped
  by the batch limits. On a ClickHouse server the sensor asks for one run per partition; on an
  embedded chDB path for one key-range run over all lagging partitions, which handles them one
  after the other, those left in ``BEFORE`` first (``core.planning.recovery_order``).
* Hudi: all partitions of a run go into ONE Hudi commit (:class:`HudiTableSync`), and the asset
  uses ``BackfillPolicy.single_run()`` so a backfill over many partitions is one commit too.

Both record what happened as materialization metadata (offset ranges, records read, rows
inserted, offsets skipped and cropped by the state machine, dead letters, the state-machine
case, lag after the run, the partition's rows in the table as ``dagster/row_count``) and as a
markdown table. Dagster records one materialization per partition of a run; each carries its
partition's own numbers (partition-scoped asset metadata); the Hudi commit's totals stay under
``commit_*``. The definitions carry each table's identity the way Dagster's integrations do:
``dagster/table_name``, ``dagster/column_schema`` (the declared columns, source columns first),
``dagster/uri`` for the Hudi path, and code references (added by the builder).

The exactly-once checks live in :mod:`eos_pipeline.defs.checks`.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Callable, Iterable
from typing import Any

import dagster as dg

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.keeper import default_writer_id
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import recovery_order
from eos_pipeline.core.positions import lag, sink_state
from eos_pipeline.defs.asset_metadata import (
    CLICKHOUSE_SINK,
    clickhouse_definition_metadata,
    code_version,
    hudi_definition_metadata,
)
from eos_pipeline.defs.config import Pipeline
from eos_pipeline.defs.hudi_run_metadata import (
    HUDI_CHECKPOINT_KEY,
    clustered_hudi_result,
    hudi_row_counts,
)
from eos_pipeline.defs.metadata import (
    ROW_COUNT_KEY,
    markdown_table,
    per_partition,
    quiet_when_idle,
)
from eos_pipeline.defs.partitions import parse_partition_key, partition_key, pipeline_partitions
from eos_pipeline.defs.resources import kafka_resource_key
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.sinks.clusters import active_sync, physical_partitions
from eos_pipeline.sinks.hooks import NO_HOOKS, SinkHooks

CHECK_NAME = "exactly_once"
#: The hooks of a pipeline's sink (``"clickhouse"`` or ``"hudi"``) in its runs: the product
#: passes none; a test code location injects some (see :mod:`eos_pipeline.sinks.hooks`).
HooksFor = Callable[[Pipeline, str], SinkHooks]


def topic_key(topic: str) -> dg.AssetKey:
    """A Kafka topic as an external asset (:mod:`eos_pipeline.defs.topics`)."""
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
        max_records_per_partition=pipeline.batch.max_records,
        max_record_bytes=pipeline.batch.max_record_bytes,
        reset=pipeline.reset,
        hudi_options=dict(hudi.options),
        kafka_options=kafka_options,
    )


def _width(ranges: list[OffsetRange]) -> int:
    return sum(r.width for r in ranges)


# ------------------------------------------------------------------------------- ClickHouse


def clickhouse_asset(
    pipeline: Pipeline, pool: str | None, hooks: SinkHooks = NO_HOOKS
) -> dg.AssetsDefinition:
    kafka_key = kafka_resource_key(pipeline.name)
    spec = clickhouse_spec(pipeline)

    @dg.asset(
        key=clickhouse_key(pipeline),
        deps=[topic_key(t) for t in pipeline.kafka.topics],
        partitions_def=pipeline_partitions(pipeline.name),
        group_name=pipeline.name,
        required_resource_keys={kafka_key, "keeper", "clickhouse"},
        pool=pool,
        kinds={"clickhouse", "kafka"},
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
        kafka = getattr(context.resources, kafka_key).settings()
        dlq = DeadLetterWriter(kafka, pipeline.dead_letter_topic, pipeline.name)
        reports = []
        with context.resources.clickhouse.sink() as sink, context.resources.keeper.store() as st:
            sink.ensure_table(spec.database, spec.table, spec.schema)
            writer = default_writer_id(context.run.run_id)
            sync = ClickHousePartitionSync(
                spec, kafka, st, sink, dlq, writer=writer, fault=hooks.fault
            )
            reads: Callable[[TopicPartition], list[TopicPartition]] = lambda tp: [tp]  # noqa: E731
            if pipeline.kafka.clusters:
                # Several clusters: read the active one's physical topics (T and its replicas).
                from eos_pipeline.defs.failover import failover_pipeline

                fp = failover_pipeline(pipeline)
                dlq_topic = pipeline.dead_letter_topic
                sync = active_sync(fp, spec, st, sink, dlq_topic, writer=writer, fault=hooks.fault)
                reads = lambda tp: physical_partitions(fp, sync, tp)  # noqa: E731
            # partitions left in BEFORE first (a range run on chDB covers several)
            for key in _run_order(st, pipeline, context.partition_keys):
                for tp in reads(parse_partition_key(key)):
                    report = sync.run(tp)
                    reports.append(report)
                    label = key if sync.cluster is None else f"{tp} on {sync.cluster}"
                    context.log.info(
                        f"{label}: [{report.start}, {report.end}) {report.records_read} read, "
                        f"{report.rows_sent} inserted, cases {report.cases or ['caught up']}"
                    )
            # one count() per partition on the sorting key's prefix: cheap
            row_counts = {
                partition_key(r.tp): sink.count(
                    spec.database, spec.table, r.tp.topic, r.tp.partition, source=spec.schema.source
                )
                for r in reports
            }
        rows = []
        for r in reports:
            skipped = sum(_width(b.skipped) for b in r.batches)
            cropped = sum(b.cropped.width for b in r.batches if b.cropped is not None)
            rows.append(
                [
                    partition_key(r.tp),
                    f"[{r.start}, {r.end})",
                    r.records_read,
                    r.rows_sent,
                    skipped,
                    cropped,
                    r.dead_letters,
                    ", ".join(r.cases) or "caught up",
                    lag(r.end, r.target_end),
                    r.epoch,
                ]
            )
        header = [
            "partition",
            "offset range",
            "read",
            "inserted",
            "skipped",
            "cropped",
            "DLQ",
            "case",
            "lag after",
            "epoch",
        ]
        metadata: dict[str, Any] = {
            "offset_range": ", ".join(f"{row[0]} {row[1]}" for row in rows),
            "records_read": sum(r.records_read for r in reports),
            "inserted": sum(r.rows_sent for r in reports),
            "skipped": sum(row[4] for row in rows),
            "cropped": sum(row[5] for row in rows),
            "dead_letters": sum(r.dead_letters for r in reports),
            "case": "; ".join(f"{row[0]}: {row[7]}" for row in rows),
            "lag_after": sum(row[8] for row in rows),
            "partitions": dg.MetadataValue.md(markdown_table(header, rows)),
        }
        partition_values = {
            row[0]: {
                "offset_range": row[1],
                "records_read": row[2],
                "inserted": row[3],
                "skipped": row[4],
                "cropped": row[5],
                "dead_letters": row[6],
                "case": row[7],
                "lag_after": row[8],
                ROW_COUNT_KEY: row_counts[row[0]],
            }
            for row in rows
        }
        if pipeline.kafka.clusters:
            # Physical topics are not Dagster partitions: the run-wide numbers stand for each.
            metadata["cluster"] = reports[0].cluster if reports else ""
            metadata["reread_after_switch"] = sum(r.reread for r in reports)
            metadata["skipped_after_switch"] = sum(r.skipped for r in reports)
            partition_values = {}
        metadata, partition_values = quiet_when_idle(metadata, partition_values)
        per_partition(context, partition_values)
        hooks.fault("before_materialization_event")
        return dg.MaterializeResult(metadata=metadata)

    return _clickhouse


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
    kafka_key = kafka_resource_key(pipeline.name)
    hudi = pipeline.hudi
    assert hudi is not None
    topic = pipeline.kafka.topics[0]

    @dg.asset(
        key=hudi_key(pipeline),
        deps=[topic_key(topic)],
        partitions_def=pipeline_partitions(pipeline.name),
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=pipeline.name,
        required_resource_keys={kafka_key, "spark"}
        | ({"keeper"} if pipeline.kafka.clusters else set()),
        pool=pool,
        kinds={"hudi", "spark", "kafka"},
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
        from eos_pipeline.sinks.hudi import HudiTableSync

        resource = getattr(context.resources, kafka_key)
        kafka = resource.settings()
        spark = context.resources.spark.spark_session
        spec = hudi_spec(pipeline, resource.spark_kafka_options())
        tps = [parse_partition_key(k) for k in context.partition_keys]
        foreign = sorted({tp.topic for tp in tps} - {topic})
        if foreign:
            raise dg.Failure(f"partition keys of topic(s) {foreign} do not belong to {topic!r}")
        if pipeline.kafka.clusters:
            # Several clusters: partition p of every physical topic on the active one, one commit.
            from eos_pipeline.defs.failover import failover_pipeline
            from eos_pipeline.sinks.hudi_clusters import ClusterHudiSync

            with context.resources.keeper.store() as store:
                report = ClusterHudiSync(
                    failover_pipeline(pipeline),
                    spec,
                    store,
                    spark,
                    pipeline.dead_letter_topic,
                    fault=hooks.fault,
                    source_hook=hooks.source_hook,
                ).run(partitions=sorted(tp.partition for tp in tps))
            return clustered_hudi_result(context, report, hooks)
        sync = HudiTableSync(
            spec,
            kafka,
            spark,
            DeadLetterWriter(kafka, pipeline.dead_letter_topic, pipeline.name),
            fault=hooks.fault,
            source_hook=hooks.source_hook,
        )
        report = sync.run(partitions=sorted(tp.partition for tp in tps))
        context.log.info(
            f"hudi {hudi.table}: commit {report.instant_time or '(none: caught up)'} over "
            f"{len(report.ranges)} partition(s), {report.total_records_read} read, "
            f"{report.total_rows_written} written, {report.total_dead_letters} dead letters"
        )
        before = report.checkpoint_before or {}
        lag = report.lag_after
        rows = [
            [
                partition_key(tp),
                str(r),
                report.records_read.get(tp, 0),
                report.rows_written.get(tp, 0),
                report.dead_letters.get(tp, 0),
                before.get(tp, "new"),
                report.checkpoint_after.get(tp),
                lag.get(tp, 0),
            ]
            for tp, r in sorted(report.ranges.items())
        ]
        header = ["partition", "offset range", "read", "written", "DLQ", "from", "to", "lag after"]
        if report.instant_time is None:
            case = "caught up: no commit"
        elif report.checkpoint_before is None:
            case = f"new table: first commit {report.instant_time}"
        else:
            case = f"commit {report.instant_time} on top of the table's last checkpoint"
        cropped = {
            tp: max(0, report.end_offsets[tp] - r.end) if tp in report.end_offsets else 0
            for tp, r in report.ranges.items()
        }
        metadata: dict[str, Any] = {
            "offset_range": ", ".join(f"{row[0]} {row[1]}" for row in rows),
            # the whole commit's numbers; each partition's event overrides the unprefixed ones
            # with its own share (see _per_partition), the commit_* ones stay
            "records_read": report.total_records_read,
            "inserted": report.total_rows_written,
            "skipped": 0,  # the checkpoint decides the start: nothing already written is read
            "cropped": sum(cropped.values()),
            "dead_letters": report.total_dead_letters,
            "commit_records_read": report.total_records_read,
            "commit_inserted": report.total_rows_written,
            "commit_dead_letters": report.total_dead_letters,
            "commit_partitions": len(report.ranges),
            "case": case,
            "instant_time": report.instant_time or "",
            "lag_after": sum(lag.values()),
            "seconds": round(report.seconds, 2),
            HUDI_CHECKPOINT_KEY: dg.MetadataValue.json(
                {str(tp.partition): off for tp, off in sorted(report.checkpoint_after.items())}
            ),
            "partitions": dg.MetadataValue.md(markdown_table(header, rows)),
        }
        exists = report.instant_time is not None or report.checkpoint_before is not None
        row_counts = (
            hudi_row_counts(spark, hudi.path, pipeline, sorted(report.ranges)) if exists else None
        )
        metadata, partition_values = quiet_when_idle(
            metadata,
            {
                partition_key(tp): {
                    "offset_range": str(r),
                    "records_read": report.records_read.get(tp, 0),
                    "inserted": report.rows_written.get(tp, 0),
                    "cropped": cropped[tp],
                    "dead_letters": report.dead_letters.get(tp, 0),
                    "lag_after": lag.get(tp, 0),
                    **({ROW_COUNT_KEY: row_counts[tp]} if row_counts is not None else {}),
                }
                for tp, r in sorted(report.ranges.items())
                if partition_key(tp) in context.partition_keys
            },
        )
        per_partition(context, partition_values)
        hooks.fault("before_materialization_event")
        return dg.MaterializeResult(metadata=metadata)

    return _hudi


def hudi_pool(pipeline: Pipeline) -> str:
    """One writer per Hudi table: a pool of its own (``dagster.yaml`` gives pools 1 slot)."""
    assert pipeline.hudi is not None
    return f"hudi_{pipeline.hudi.table}"
