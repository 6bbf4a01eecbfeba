"""What each asset, check and run shows in Dagster's UI, for both sinks, and the partitions:
dynamic, one per Kafka topic-partition (``core.planning`` keys them), so a topic that grows needs
no restart. A run's materializations carry each partition's own numbers and the run's list of
partitions once (:func:`record_run`); a run that did nothing records no activity numbers
(:func:`quiet_when_idle`).
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import contextlib
import hashlib
import importlib.metadata
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import dagster as dg

from eos_pipeline.components.config import Pipeline
from eos_pipeline.core.contract import is_required
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import partition_key
from eos_pipeline.core.positions import lag
from eos_pipeline.core.schema import Column, SourceColumns
from eos_pipeline.sinks.clickhouse import case_summary

# ------------------------------------------------------------------------------- Partitions


def partitions_name(pipeline: str) -> str:
    return f"{pipeline}_topic_partitions"


def pipeline_partitions(pipeline: str) -> dg.DynamicPartitionsDefinition:
    """The partitions shared by every asset of one pipeline (all its topics' partitions)."""
    return dg.DynamicPartitionsDefinition(name=partitions_name(pipeline))


# ------------------------------------------------------------------------------ Definitions

CLICKHOUSE_SINK = "clickhouse"


def source_roles(source: SourceColumns) -> dict[str, str]:
    """Table source column -> the Kafka record field it copies."""
    roles = {source.topic: "topic", source.partition: "partition", source.offset: "offset"}
    if source.timestamp is not None:
        roles[source.timestamp] = "timestamp"
    return roles


_SOURCE_DESCRIPTIONS = {
    "topic": "Kafka topic the row was read from",
    "partition": "Kafka partition the row was read from",
    "offset": "Kafka offset of the record (with topic and partition: the row's identity)",
    "timestamp": "Kafka record timestamp (UTC, milliseconds)",
}


def column_schema(pipeline: Pipeline, type_of: Callable[[Column], str]) -> dg.TableSchema:
    """The table's columns as the pipeline declares them: source columns first, then payload."""
    schema = pipeline.table_schema
    described = {c: _SOURCE_DESCRIPTIONS[r] for c, r in source_roles(schema.source).items()}
    payload = "payload field of the JSON record"
    if pipeline.subject is not None:  # where the column came from: the mapping, shown
        payload = (
            f"field of {pipeline.format} registry subject {pipeline.subject} "
            f"(schema id {schema.schema_id}; types mapped as in docs/formats.md)"
        )
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=col.name,
                type=type_of(col),
                description=described.get(
                    col.name,
                    payload + (", required" if is_required(col) else ", optional"),
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
    # the Hudi path comes from the environment (the demo's directory): left out too, and how
    # long runs follow the stream (it changes when rows land, not which)
    target_fields = target.model_dump(mode="json", exclude={"path", "follow"})
    columns: Any = pipeline.schema_
    if columns is None:  # from the registry: its columns and the schema id they came from
        schema = pipeline.table_schema
        columns = [schema.schema_id, [[c.name, c.sql_type, c.default] for c in schema.columns]]
    what = json.dumps([pipeline.format, columns, target_fields], sort_keys=True)
    return f"{_package_version()}+{hashlib.sha256(what.encode()).hexdigest()[:12]}"


def _package_version() -> str:
    try:
        return importlib.metadata.version("eos_pipeline")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


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
    from eos_pipeline.adapters.spark import spark_type

    hudi = pipeline.hudi
    assert hudi is not None
    return {
        "pipeline": pipeline.name,
        "table_path": hudi.path,
        "dead_letter_topic": pipeline.dead_letter_topic,
        "dagster/table_name": hudi.table,
        "dagster/uri": hudi.path if "://" in hudi.path else Path(hudi.path).absolute().as_uri(),
        "dagster/column_schema": column_schema(
            pipeline, lambda c: spark_type(c.ch_type).simpleString()
        ),
    }


# ------------------------------------------------------------------ Run results, both sinks

#: Dagster's standard key for a table's row count (plotted over time on the asset page).
ROW_COUNT_KEY = "dagster/row_count"


#: A run's table of partitions lists at most this many: each partition's numbers are on its own
#: materialization, and a table of thousands of rows is read by no one.
TABLE_MAX_ROWS = 100


def markdown_table(header: list[str], rows: Iterable[Iterable[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def partitions_table(header: list[str], rows: Sequence[Sequence[object]]) -> Any:
    """A run's partitions as a markdown table, the first :data:`TABLE_MAX_ROWS` of them."""
    text = markdown_table(header, rows[:TABLE_MAX_ROWS])
    if len(rows) > TABLE_MAX_ROWS:
        text += (
            f"\n\n{len(rows) - TABLE_MAX_ROWS} more partitions: each one's numbers are on its "
            "own materialization."
        )
    return dg.MetadataValue.md(text)


@contextlib.contextmanager
def _partition_keys_read_once(instance: dg.DagsterInstance) -> Iterator[None]:
    """Dagster checks each ``add_asset_metadata(partition_key=...)`` against the run's range by
    reading every key of the dynamic partitions from storage, and asking it whether the range's
    ends exist: N partitions, N reads of N keys (at 4,096 partitions ~80 s of a run) and 2N
    queries. Inside the block no key is added, so one read stands for all; the instance's own
    methods are back after it."""
    read = instance.get_dynamic_partitions
    known: dict[str, Sequence[str]] = {}
    sets: dict[str, frozenset[str]] = {}

    def keys(partitions_def_name: str) -> Sequence[str]:
        if partitions_def_name not in known:
            known[partitions_def_name] = read(partitions_def_name)
        return known[partitions_def_name]

    def has(partitions_def_name: str, partition_key: str) -> bool:
        if partitions_def_name not in sets:
            sets[partitions_def_name] = frozenset(keys(partitions_def_name))
        return partition_key in sets[partitions_def_name]

    instance.get_dynamic_partitions = keys  # type: ignore[method-assign]
    instance.has_dynamic_partition = has  # type: ignore[method-assign]
    try:
        yield
    finally:
        del instance.get_dynamic_partitions, instance.has_dynamic_partition


def per_partition(
    context: dg.AssetExecutionContext, values: Mapping[str, Mapping[str, Any]]
) -> None:
    """Give each partition of the run its own numbers: Dagster records one materialization per
    partition of a run, all with the run's metadata, which these override."""
    with _partition_keys_read_once(context.instance):
        for key, metadata in values.items():
            context.add_asset_metadata(dict(metadata), partition_key=key)


class RunMetadata(NamedTuple):
    """What a run records: its own numbers, each partition's, and the entries that list the
    run's partitions (``once``: see :func:`record_run`)."""

    metadata: dict[str, Any]
    partitions: dict[str, dict[str, Any]]
    once: dict[str, Any]


def record_run(context: dg.AssetExecutionContext, run: RunMetadata) -> dict[str, Any]:
    """Give each partition its numbers; returns the run's metadata for its ``MaterializeResult``.

    ``run.once`` lists the run's partitions: Dagster copies the run's metadata onto every
    partition's materialization, so at N partitions it would be stored N times (~1.6 GB of event
    log at 4,096). A run of several partitions puts it on its last partition key's only (Dagster
    stores a run's partition events in no fixed order: not always the asset page's latest)."""
    metadata, partitions, once = run
    if len(partitions) <= 1:
        per_partition(context, partitions)
        return {**metadata, **once}
    last = next((k for k in reversed(context.partition_keys) if k in partitions), None)
    last = last if last is not None else list(partitions)[-1]
    per_partition(context, {**partitions, last: {**once, **partitions[last]}})
    return dict(metadata)


#: Numbers that count what a run did (plotted over time on the asset page).
ACTIVITY_KEYS = (
    "records_read",
    "inserted",
    "skipped",
    "cropped",
    "dead_letters",
    "commit_records_read",
    "commit_inserted",
    "commit_dead_letters",
)
IDLE_CASE = (
    "caught up: nothing to read, nothing written (a backfill or run of a caught-up partition "
    "does nothing; the last write is in an earlier materialization)"
)


def quiet_when_idle(
    metadata: dict[str, Any], partitions: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A run that read nothing records its state (position, lag, rows) but no activity numbers:
    zeros from a backfill of a caught-up partition would be plotted beside real runs and read as
    a collapse. A run that did anything keeps its zeros per partition (a partition's numbers
    override the run's, they cannot remove them)."""
    if any(metadata.get(key) for key in ACTIVITY_KEYS):
        return metadata, partitions
    quiet = {k: v for k, v in metadata.items() if k not in ACTIVITY_KEYS}
    quiet["case"] = IDLE_CASE
    return quiet, {
        key: {k: v for k, v in values.items() if k not in ACTIVITY_KEYS} | {"case": IDLE_CASE}
        for key, values in partitions.items()
    }


# -------------------------------------------------------------------------- ClickHouse runs

#: Rows in the whole table (all partitions), beside each partition's ``dagster/row_count``.
TABLE_ROWS_KEY = "table_row_count"


def clickhouse_run_metadata(
    reports: Sequence[Any],
    row_counts: Mapping[str, int],
    *,
    clustered: bool,
    table_rows: int,
) -> RunMetadata:
    """The run's metadata and each partition's (none for a run over several clusters).

    ``table_rows`` (the whole table's) is shown beside each partition's ``dagster/row_count``:
    the asset's overview shows the latest partition's numbers, where "row count" alone would
    read as the table's.
    """
    rows = []
    partition_values: dict[str, dict[str, Any]] = {}
    for r in reports:
        key = partition_key(r.tp)
        values = {
            "offset_range": f"[{r.start}, {r.end})",
            "records_read": r.records_read,
            "inserted": r.rows_sent,
            "skipped": sum(b.width for batch in r.batches for b in batch.skipped),
            "cropped": sum(b.cropped.width for b in r.batches if b.cropped is not None),
            "dead_letters": r.dead_letters,
            "case": case_summary(r.cases) or "caught up",
            "lag_after": lag(r.end, r.target_end),
        }
        rows.append([key, *values.values(), r.epoch])
        partition_values[key] = {**values, ROW_COUNT_KEY: row_counts[key]}
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
    totals = ("records_read", "inserted", "skipped", "cropped", "dead_letters")
    metadata: dict[str, Any] = {
        "offset_range": ", ".join(f"{row[0]} {row[1]}" for row in rows),
        **{name: sum(row[i] for row in rows) for i, name in enumerate(totals, start=2)},
        "case": "; ".join(f"{row[0]}: {row[7]}" for row in rows),
        "lag_after": sum(row[8] for row in rows),
    }
    metadata[TABLE_ROWS_KEY] = table_rows
    for values in partition_values.values():
        values[TABLE_ROWS_KEY] = table_rows
    if clustered:
        # Physical topics are not Dagster partitions: the run-wide numbers stand for each.
        metadata["cluster"] = reports[0].cluster if reports else ""
        metadata["reread_after_switch"] = sum(r.reread for r in reports)
        metadata["skipped_after_switch"] = sum(r.skipped for r in reports)
        partition_values = {}
    once = {"partitions": partitions_table(header, rows)}
    return RunMetadata(*quiet_when_idle(metadata, partition_values), once)


# -------------------------------------------------------------------------------- Hudi runs

#: Metadata key under which the Hudi asset records the table's checkpoint after its run (for
#: the UI; the sensors read the table's own timeline).
HUDI_CHECKPOINT_KEY = "checkpoint_after"


def _hudi_rows(
    report: Any, label: Callable[[TopicPartition], str], before: Mapping | None = None
) -> list[list[object]]:
    """A Hudi run's partitions: range, read, written, DLQ, [checkpoint before,] after, lag."""
    return [
        [
            label(tp),
            str(r),
            report.records_read.get(tp, 0),
            report.rows_written.get(tp, 0),
            report.dead_letters.get(tp, 0),
            *([] if before is None else [before.get(tp, "new")]),
            report.checkpoint_after.get(tp),
            report.lag_after.get(tp, 0),
        ]
        for tp, r in sorted(report.ranges.items())
    ]


def clustered_hudi_metadata(report: Any) -> dict[str, Any]:
    """A clustered Hudi run's metadata: the cluster read and the exact resume after a switch.
    Physical topics (``T``, ``B.T``) are not Dagster partitions: the run-wide numbers stand."""
    rows = _hudi_rows(report, lambda tp: f"{report.cluster}:{partition_key(tp)}")
    header = ["partition", "offset range", "read", "written", "DLQ", "to", "lag after"]
    metadata: dict[str, Any] = {
        "cluster": report.cluster or "",
        "offset_range": ", ".join(f"{row[0]} {row[1]}" for row in rows),
        "records_read": report.total_records_read,
        "inserted": report.total_rows_written,
        "dead_letters": report.total_dead_letters,
        "reread_after_switch": report.reread,
        "skipped_after_switch": report.skipped,
        "case": f"commit {report.instant_time}" if report.instant_time else "caught up: no commit",
        "instant_time": report.instant_time or "",
        "operation": report.operation or "",
        "lag_after": sum(report.lag_after.values()),
        "seconds": round(report.seconds, 2),
        HUDI_CHECKPOINT_KEY: dg.MetadataValue.json(
            {partition_key(tp): off for tp, off in sorted(report.checkpoint_after.items())}
        ),
        "partitions": partitions_table(header, rows),
    }
    return quiet_when_idle(metadata, {})[0]


def hudi_run_metadata(
    report: Any, row_counts: Mapping[TopicPartition, int] | None, keys: Collection[str]
) -> RunMetadata:
    """A Hudi run's metadata: the commit's numbers, and each partition of ``keys`` its own.

    Each partition's event overrides the unprefixed numbers with its share; the ``commit_*``
    ones stay. ``row_counts``: rows per partition in the table (None: no table yet).
    """
    lags = report.lag_after
    rows = _hudi_rows(report, partition_key, report.checkpoint_before or {})
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
        # the Hudi operation of the commit (``auto`` resolved by the plan's size)
        "operation": report.operation or "",
        "lag_after": sum(lags.values()),
        "seconds": round(report.seconds, 2),
    }
    once = {
        HUDI_CHECKPOINT_KEY: dg.MetadataValue.json(
            {str(tp.partition): off for tp, off in sorted(report.checkpoint_after.items())}
        ),
        "partitions": partitions_table(header, rows),
    }
    quiet, partitions = quiet_when_idle(
        metadata,
        {
            partition_key(tp): {
                "offset_range": str(r),
                "records_read": report.records_read.get(tp, 0),
                "inserted": report.rows_written.get(tp, 0),
                "cropped": cropped[tp],
                "dead_letters": report.dead_letters.get(tp, 0),
                "lag_after": lags.get(tp, 0),
                **({ROW_COUNT_KEY: row_counts[tp]} if row_counts is not None else {}),
            }
            for tp, r in sorted(report.ranges.items())
            if partition_key(tp) in keys
        },
    )
    return RunMetadata(quiet, partitions, once)


def hudi_row_counts(
    spark: Any, path: str, pipeline: Pipeline, tps: list[TopicPartition]
) -> dict[TopicPartition, int]:
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
