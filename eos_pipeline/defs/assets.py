"""Assets (one per target table) and their exactly-once checks, built from pipeline config.

* ClickHouse: each partition of a run is caught up by :class:`ClickHousePartitionSync`: from
  the keeper's position to the end offset fixed at the start of that partition's sync, capped
  by the batch limits. Runs of one partition at a time are the norm (the sensor asks for them);
  a multi-partition run handles its partitions one after the other.
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

The checks compare, per partition, the offsets in the table with the offsets Kafka holds in the
sink's committed range minus the dead letters (:mod:`eos_pipeline.defs.proof`), and file one
result per partition, in range runs too (:func:`check_events`).
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import hashlib
import importlib.metadata
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.kafka import start_offsets
from eos_pipeline.adapters.keeper import default_writer_id
from eos_pipeline.core.contract import is_required
from eos_pipeline.core.keeper_record import KeeperKey
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.positions import committed, committed_low, lag, sink_state
from eos_pipeline.core.schema import Column, SourceColumns
from eos_pipeline.defs.config import Pipeline
from eos_pipeline.defs.partitions import parse_partition_key, partition_key, pipeline_partitions
from eos_pipeline.defs.proof import (
    PartitionProof,
    compare,
    dead_letter_offsets,
    kafka_offsets,
    markdown_table,
)
from eos_pipeline.defs.resources import kafka_resource_key
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.sinks.hooks import NO_HOOKS, SinkHooks

CLICKHOUSE_SINK = "clickhouse"
CHECK_NAME = "exactly_once"
#: Metadata key under which the Hudi asset records the table's checkpoint after its run; the
#: lag sensor reads it instead of starting a JVM (see ``sensors.py``).
HUDI_CHECKPOINT_KEY = "checkpoint_after"
#: The hooks of a pipeline's sink (``"clickhouse"`` or ``"hudi"``) in its runs: the product
#: passes none; a test code location injects some (see :mod:`eos_pipeline.sinks.hooks`).
HooksFor = Callable[[Pipeline, str], SinkHooks]


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


# ------------------------------------------------------------------------------- metadata

ROW_COUNT_KEY = "dagster/row_count"


def _source_descriptions(source: SourceColumns) -> dict[str, str]:
    out = {
        source.topic: "Kafka topic the row was read from",
        source.partition: "Kafka partition the row was read from",
        source.offset: "Kafka offset of the record (with topic and partition: the row's identity)",
    }
    if source.timestamp is not None:
        out[source.timestamp] = "Kafka record timestamp (UTC, milliseconds)"
    return out


def column_schema(pipeline: Pipeline, type_of: Callable[[Column], str]) -> dg.TableSchema:
    """The table's columns as the pipeline declares them: source columns first, then payload."""
    schema = pipeline.table_schema
    described = _source_descriptions(schema.source)
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=col.name,
                type=type_of(col),
                description=described.get(
                    col.name,
                    "payload field of the JSON record"
                    + (", required" if is_required(col) else ", optional"),
                ),
                constraints=dg.TableColumnConstraints(
                    nullable=col.name not in described and not is_required(col)
                ),
            )
            for col in schema.all_columns
        ]
    )


def code_version(pipeline: Pipeline, sink: str) -> str:
    """The package's version and a digest of what decides the sink's rows (the declared schema,
    the format, the target): the UI flags a materialization made by other code or another
    schema. Endpoints and credentials are left out: they do not change what is written."""
    target = pipeline.clickhouse if sink == CLICKHOUSE_SINK else pipeline.hudi
    assert target is not None
    # the Hudi path comes from the environment (the demo's directory): left out too
    target_fields = target.model_dump(mode="json", exclude={"path"})
    what = json.dumps([pipeline.format, pipeline.schema_, target_fields], sort_keys=True)
    return f"{_package_version()}+{hashlib.sha256(what.encode()).hexdigest()[:12]}"


def _package_version() -> str:
    try:
        return importlib.metadata.version("eos_pipeline")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _uri(path: str) -> str:
    return path if "://" in path else Path(path).absolute().as_uri()


def clickhouse_definition_metadata(pipeline: Pipeline) -> dict[str, Any]:
    """Table identity and columns of the ClickHouse asset, the way Dagster's integrations
    record them (the asset page's Columns section, the catalog's table name)."""
    target = pipeline.clickhouse
    assert target is not None
    return {
        "pipeline": pipeline.name,
        "dead_letter_topic": pipeline.dead_letter_topic,
        "dagster/table_name": f"{target.database}.{target.table}",
        "dagster/column_schema": column_schema(pipeline, lambda c: c.sql_type),
    }


def hudi_definition_metadata(pipeline: Pipeline) -> dict[str, Any]:
    """Table identity, location and columns (as Spark types) of the Hudi asset."""
    from eos_pipeline.adapters.spark_decode import spark_type

    hudi = pipeline.hudi
    assert hudi is not None
    return {
        "pipeline": pipeline.name,
        "table_path": hudi.path,
        "dead_letter_topic": pipeline.dead_letter_topic,
        "dagster/table_name": hudi.table,
        "dagster/uri": _uri(hudi.path),
        "dagster/column_schema": column_schema(
            pipeline, lambda c: spark_type(c.ch_type).simpleString()
        ),
    }


def _per_partition(
    context: dg.AssetExecutionContext, values: Mapping[str, Mapping[str, Any]]
) -> None:
    """Give each partition of the run its own numbers (they override the run-wide ones).

    Dagster records one materialization per partition of a run, all with the run's metadata;
    partition-scoped asset metadata replaces the run-wide values on that partition's event.
    """
    for key, metadata in values.items():
        context.add_asset_metadata(dict(metadata), partition_key=key)


# ------------------------------------------------------------------------------- ClickHouse


def clickhouse_asset(
    pipeline: Pipeline, pool: str | None, hooks: SinkHooks = NO_HOOKS
) -> dg.AssetsDefinition:
    kafka_key = kafka_resource_key(pipeline.name)
    spec = clickhouse_spec(pipeline)

    @dg.asset(
        key=clickhouse_key(pipeline),
        partitions_def=pipeline_partitions(pipeline.name),
        group_name=pipeline.name,
        required_resource_keys={kafka_key, "keeper", "clickhouse"},
        pool=pool,
        kinds={"clickhouse", "kafka"},
        description=(
            f"Topic(s) {', '.join(pipeline.kafka.topics)} in ClickHouse table "
            f"{spec.database}.{spec.table}, exactly once per Kafka offset (keeper state machine "
            "+ insert deduplication tokens). One partition per Kafka topic-partition."
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
            sync = ClickHousePartitionSync(
                spec,
                kafka,
                st,
                sink,
                dlq,
                writer=default_writer_id(context.run.run_id),
                fault=hooks.fault,
            )
            for key in sorted(context.partition_keys):
                report = sync.run(parse_partition_key(key))
                reports.append(report)
                context.log.info(
                    f"{key}: [{report.start}, {report.end}) {report.records_read} read, "
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
        _per_partition(
            context,
            {
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
            },
        )
        hooks.fault("before_materialization_event")
        return dg.MaterializeResult(metadata=metadata)

    return _clickhouse


def _clickhouse_committed(store: Any, pipeline: Pipeline, tp: TopicPartition) -> int | None:
    """The next offset the ClickHouse sink will write: everything below it is committed."""
    stored = store.read(KeeperKey.of(pipeline.name, CLICKHOUSE_SINK, tp))
    return committed(sink_state(stored.record if stored else None))


def _check_result(proofs: list[PartitionProof], asset_key: dg.AssetKey) -> dg.AssetCheckResult:
    passed = all(p.passed for p in proofs)
    header = ["partition", "committed", "kafka", "DLQ", "rows", "distinct", "dups", "gaps", "extra"]
    rows = [
        [
            partition_key(p.tp),
            str(p.committed),
            p.kafka_records,
            p.dead_letters,
            p.table_rows,
            p.distinct_offsets,
            len(p.duplicates),
            len(p.gaps),
            len(p.unexpected),
        ]
        for p in proofs
    ]
    metadata: dict[str, Any] = {"partitions": dg.MetadataValue.md(markdown_table(header, rows))}
    if len(proofs) == 1:
        metadata.update(proofs[0].metadata())
    else:
        for name in ("duplicates", "gaps", "unexpected"):
            metadata[name] = sum(len(getattr(p, name)) for p in proofs)
    metadata["summary"] = "; ".join(p.summary() for p in proofs)
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=CHECK_NAME,
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=metadata,
        description=metadata["summary"],
    )


def _latest_materialization(instance: dg.DagsterInstance, asset_key: dg.AssetKey, key: str) -> Any:
    """The partition's latest materialization, as the check evaluation's target (so the UI
    counts the evaluation against that materialization), or None."""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
    ).records
    if not records:
        return None
    record = records[0]
    return AssetCheckEvaluationTargetMaterializationData(
        run_id=record.event_log_entry.run_id,
        storage_id=record.storage_id,
        timestamp=record.timestamp,
    )


def check_events(
    context: dg.AssetCheckExecutionContext, proofs: list[PartitionProof], asset_key: dg.AssetKey
) -> Iterable[Any]:
    """What a check step yields: one result per partition, each stored under its partition.

    A single-partition run: one ``AssetCheckResult`` (Dagster files it under the run's
    partition). A range run (the Hudi sensor's and the single-run backfill's, or a range
    launched from the UI): Dagster would file one ``AssetCheckResult`` under no partition,
    leaving every planned partition "skipped"; so the check yields the step's output and then
    one evaluation per partition, each naming its partition and that partition's latest
    materialization, exactly as Dagster builds them from a single-partition run.
    """
    if context.has_partition_key or not proofs:
        return [_check_result(proofs, asset_key)]
    events: list[Any] = [dg.Output(None)]
    for proof in proofs:
        result = _check_result([proof], asset_key)
        key = partition_key(proof.tp)
        events.append(
            dg.AssetCheckEvaluation(
                asset_key=asset_key,
                check_name=CHECK_NAME,
                passed=result.passed,
                metadata=result.metadata,
                target_materialization_data=_latest_materialization(
                    context.instance, asset_key, key
                ),
                severity=result.severity,
                description=result.description,
                blocking=False,
                partition=key,
            )
        )
    return events


def clickhouse_check(pipeline: Pipeline, pool: str | None) -> dg.AssetChecksDefinition:
    kafka_key = kafka_resource_key(pipeline.name)
    spec = clickhouse_spec(pipeline)
    key = clickhouse_key(pipeline)

    @dg.asset_check(
        asset=key,
        name=CHECK_NAME,
        partitions_def=pipeline_partitions(pipeline.name),
        required_resource_keys={kafka_key, "keeper", "clickhouse"},
        pool=pool,
        description="Per partition: the offsets in the table equal Kafka's offsets in the "
        "committed range minus dead letters, each exactly once (duplicates and gaps counted).",
        blocking=False,
    )
    def _check(context: dg.AssetCheckExecutionContext) -> Iterator[Any]:
        kafka = getattr(context.resources, kafka_key).settings()
        dead = dead_letter_offsets(kafka, pipeline.dead_letter_topic, pipeline.name)
        proofs = []
        with context.resources.clickhouse.sink() as sink, context.resources.keeper.store() as st:
            for pk in sorted(context.partition_keys):
                tp = parse_partition_key(pk)
                position = _clickhouse_committed(st, pipeline, tp) or 0
                table = dict(
                    sink.offsets_in_table(
                        spec.database,
                        spec.table,
                        tp.topic,
                        tp.partition,
                        source=spec.schema.source,
                    )
                )
                low = _low_bound(kafka, tp, pipeline, table, dead.get(tp, set()), position)
                committed = OffsetRange(low, max(low, position))
                proofs.append(
                    compare(
                        tp,
                        committed,
                        kafka_offsets(kafka, tp, committed),
                        dead.get(tp, set()),
                        # rows beyond the position belong to a step in flight (phase BEFORE);
                        # rows below the low bound were deleted from Kafka and cannot be compared
                        {o: n for o, n in table.items() if o < position},
                    )
                )
        yield from check_events(context, proofs, key)

    return _check


def _low_bound(
    kafka: Any,
    tp: TopicPartition,
    pipeline: Pipeline,
    table: dict[int, int],
    dead: set[int],
    position: int,
) -> int:
    """Where the comparable committed range starts (see ``positions.committed_low``)."""
    log_start = start_offsets(kafka, tp.topic)[tp.partition]
    return committed_low(log_start, pipeline.reset, (*table.keys(), *dead), position)


# ------------------------------------------------------------------------------- Hudi


def hudi_asset(pipeline: Pipeline, pool: str, hooks: SinkHooks = NO_HOOKS) -> dg.AssetsDefinition:
    kafka_key = kafka_resource_key(pipeline.name)
    hudi = pipeline.hudi
    assert hudi is not None
    topic = pipeline.kafka.topics[0]

    @dg.asset(
        key=hudi_key(pipeline),
        partitions_def=pipeline_partitions(pipeline.name),
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=pipeline.name,
        required_resource_keys={kafka_key, "spark"},
        pool=pool,
        kinds={"hudi", "spark", "kafka"},
        description=(
            f"Topic {topic} in Hudi table {hudi.table} ({hudi.table_type}) at {hudi.path}. All "
            "partitions of a run are ONE Hudi commit whose metadata carries the Kafka checkpoint."
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
        sync = HudiTableSync(
            hudi_spec(pipeline, resource.spark_kafka_options()),
            kafka,
            spark,
            DeadLetterWriter(kafka, pipeline.dead_letter_topic, pipeline.name),
            fault=hooks.fault,
            source_hook=hooks.source_hook,
        )
        tps = [parse_partition_key(k) for k in context.partition_keys]
        foreign = sorted({tp.topic for tp in tps} - {topic})
        if foreign:
            raise dg.Failure(f"partition keys of topic(s) {foreign} do not belong to {topic!r}")
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
            _hudi_row_counts(spark, hudi.path, pipeline, sorted(report.ranges)) if exists else None
        )
        _per_partition(
            context,
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
        hooks.fault("before_materialization_event")
        return dg.MaterializeResult(metadata=metadata)

    return _hudi


def _hudi_row_counts(
    spark: Any, path: str, pipeline: Pipeline, tps: list[TopicPartition]
) -> dict[TopicPartition, int] | None:
    """Rows per partition of the run in the table after the commit: one Spark aggregation over
    the source columns (no payload column is read)."""
    from pyspark.sql import functions as F

    if not tps:
        return {}
    source = pipeline.table_schema.source
    rows = (
        spark.read.format("hudi")
        .load(path)
        .where(F.col(source.topic) == tps[0].topic)
        .where(F.col(source.partition).isin([tp.partition for tp in tps]))
        .groupBy(source.partition)
        .count()
        .collect()
    )
    found = {int(row[0]): int(row[1]) for row in rows}
    return {tp: found.get(tp.partition, 0) for tp in tps}


def hudi_check(pipeline: Pipeline, pool: str) -> dg.AssetChecksDefinition:
    kafka_key = kafka_resource_key(pipeline.name)
    hudi = pipeline.hudi
    assert hudi is not None
    key = hudi_key(pipeline)
    source = pipeline.table_schema.source

    @dg.asset_check(
        asset=key,
        name=CHECK_NAME,
        partitions_def=pipeline_partitions(pipeline.name),
        required_resource_keys={kafka_key, "spark"},
        pool=pool,
        description="Per partition: the offsets in the Hudi table equal Kafka's offsets below "
        "the latest commit's checkpoint minus dead letters, each exactly once.",
        blocking=False,
    )
    def _check(context: dg.AssetCheckExecutionContext) -> Iterator[Any]:
        from pyspark.sql import functions as F

        from eos_pipeline.adapters.hudi import latest_checkpoint

        kafka = getattr(context.resources, kafka_key).settings()
        spark = context.resources.spark.spark_session
        tps = [parse_partition_key(k) for k in sorted(context.partition_keys)]
        checkpoint = latest_checkpoint(spark, hudi.path) or {}
        counts: dict[int, dict[int, int]] = {tp.partition: {} for tp in tps}
        if checkpoint:
            table = spark.read.format("hudi").load(hudi.path)
            grouped = (
                table.where(F.col(source.partition).isin([tp.partition for tp in tps]))
                .groupBy(source.partition, source.offset)
                .count()
                .collect()
            )
            for row in grouped:
                counts[row[0]][row[1]] = row[2]
        dead = dead_letter_offsets(kafka, pipeline.dead_letter_topic, pipeline.name)
        proofs = []
        for tp in tps:
            position = checkpoint.get(tp, 0)
            low = _low_bound(
                kafka, tp, pipeline, counts[tp.partition], dead.get(tp, set()), position
            )
            committed = OffsetRange(min(low, position), position)
            proofs.append(
                compare(
                    tp,
                    committed,
                    kafka_offsets(kafka, tp, committed),
                    dead.get(tp, set()),
                    counts[tp.partition],
                )
            )
        yield from check_events(context, proofs, key)

    return _check


def iter_pipeline_assets(
    pipeline: Pipeline, clickhouse_pool: str | None, hooks: HooksFor | None = None
) -> Iterator[dg.AssetsDefinition | dg.AssetChecksDefinition]:
    if pipeline.clickhouse is not None:
        yield clickhouse_asset(
            pipeline, clickhouse_pool, hooks(pipeline, CLICKHOUSE_SINK) if hooks else NO_HOOKS
        )
        yield clickhouse_check(pipeline, clickhouse_pool)
    if pipeline.hudi is not None:
        pool = hudi_pool(pipeline)
        yield hudi_asset(pipeline, pool, hooks(pipeline, "hudi") if hooks else NO_HOOKS)
        yield hudi_check(pipeline, pool)


def hudi_pool(pipeline: Pipeline) -> str:
    """One writer per Hudi table: a pool of its own (``dagster.yaml`` gives pools 1 slot)."""
    assert pipeline.hudi is not None
    return f"hudi_{pipeline.hudi.table}"
