"""What the asset definitions show about their tables before any run: identity (table name,
URI), columns with descriptions, and a code version that changes with what decides the rows."""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import hashlib
import importlib.metadata
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg

from eos_pipeline.components.config import Pipeline
from eos_pipeline.core.contract import is_required
from eos_pipeline.core.schema import Column, SourceColumns

CLICKHOUSE_SINK = "clickhouse"


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


__all__ = [
    "CLICKHOUSE_SINK",
    "clickhouse_definition_metadata",
    "code_version",
    "column_schema",
    "hudi_definition_metadata",
]
