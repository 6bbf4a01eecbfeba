"""What Dagster's catalog knows of a pipeline's tables beyond their metadata: how fresh they
must be (a ``FreshnessPolicy`` from ``lag_target_seconds``, shown in Asset Health) and where each
column comes from (``dagster/column_lineage``: every table column from a field of the topic's
records, whose columns the topic asset declares in ``dagster/column_schema``).

Applied to the specs the factories build (``dg.map_asset_specs``), so the asset and topic
modules stay as they are.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Iterable
from datetime import timedelta

import dagster as dg

from eos_pipeline.components.assets import topic_key
from eos_pipeline.components.config import Pipeline
from eos_pipeline.core.schema import SourceColumns

#: The fields of a Kafka record that source columns copy, by the role the column plays.
KAFKA_FIELDS = {
    "topic": ("topic", "string", "the record's topic"),
    "partition": ("partition", "int32", "the record's partition"),
    "offset": ("offset", "int64", "the record's offset in its partition"),
    "timestamp": ("timestamp", "int64", "the record's timestamp (milliseconds since the epoch)"),
}


def _source_fields(source: SourceColumns) -> dict[str, str]:
    """Table source column -> the Kafka record field it copies."""
    roles = {"topic": source.topic, "partition": source.partition, "offset": source.offset}
    if source.timestamp is not None:
        roles["timestamp"] = source.timestamp
    return {column: KAFKA_FIELDS[role][0] for role, column in roles.items()}


def freshness_policy(pipeline: Pipeline) -> dg.FreshnessPolicy | None:
    if pipeline.lag_target_seconds is None:
        return None
    fail = timedelta(seconds=pipeline.lag_target_seconds)
    warn = fail / 2 if fail >= timedelta(minutes=2) else None  # Dagster's floor: one minute
    return dg.FreshnessPolicy.time_window(fail_window=fail, warn_window=warn)


def topic_columns(pipeline: Pipeline) -> dg.TableSchema:
    """A topic's records as the pipeline reads them: Kafka's own fields, then the payload's."""
    kafka = [
        dg.TableColumn(name=name, type=type_, description=what)
        for name, type_, what in KAFKA_FIELDS.values()
    ]
    payload = [
        dg.TableColumn(name=name, type=ch_type, description="field of the record's payload")
        for name, ch_type in _payload_types(pipeline)
    ]
    return dg.TableSchema(columns=[*kafka, *payload])


def _payload_types(pipeline: Pipeline) -> list[tuple[str, str]]:
    if pipeline.schema_ is not None:  # as written
        return list(pipeline.schema_.items())
    return [(c.name, c.sql_type) for c in pipeline.table_schema.columns]


def column_lineage(pipeline: Pipeline) -> dg.TableColumnLineage:
    """Each table column from its field of the topic's records (one topic per Hudi table; a
    ClickHouse table reading several topics has each column from all of them)."""
    schema = pipeline.table_schema
    from_kafka = _source_fields(schema.source)
    topics = [topic_key(t) for t in pipeline.kafka.topics]
    return dg.TableColumnLineage(
        deps_by_column={
            column: [
                dg.TableColumnDep(asset_key=key, column_name=from_kafka.get(column, column))
                for key in topics
            ]
            for column in schema.column_names
        }
    )


def with_table_facts(
    pipeline: Pipeline, assets: Iterable[dg.AssetsDefinition]
) -> list[dg.AssetsDefinition]:
    """The pipeline's table assets with their freshness policy and column lineage."""
    policy = freshness_policy(pipeline)
    lineage = column_lineage(pipeline)

    def apply(spec: dg.AssetSpec) -> dg.AssetSpec:
        spec = spec.merge_attributes(metadata={"dagster/column_lineage": lineage})
        return spec.replace_attributes(freshness_policy=policy) if policy else spec

    return list(dg.map_asset_specs(apply, assets))


def with_topic_columns(pipeline: Pipeline, spec: dg.AssetSpec) -> dg.AssetSpec:
    """A source topic's spec with the columns its records carry (the dead-letter topic's records
    are whatever failed: no columns)."""
    if spec.key not in {topic_key(t) for t in pipeline.kafka.topics}:
        return spec
    return spec.merge_attributes(metadata={"dagster/column_schema": topic_columns(pipeline)})
