"""Kafka rows shaped for a Hudi write by hand, for the adapter tests that write without the sink
(the product's sink selects its columns from the table schema, in ``sinks.hudi``)."""

from __future__ import annotations

from typing import Any

from eos_pipeline.adapters.spark import SOURCE_COLUMNS, TIMESTAMP_COLUMN, split_tagged, tag_json
from eos_pipeline.core.schema import TableSchema


def with_source_columns(df: Any) -> Any:
    """Kafka rows with their coordinates renamed for a sink (``_topic``, ``_partition``...)."""
    from pyspark.sql import functions as F

    return df.select(
        *(F.col(src).alias(dst) for src, dst in SOURCE_COLUMNS.items()),
        F.col("timestamp").alias(TIMESTAMP_COLUMN),
        "key",
        "value",
    )


def decode_json(df: Any, schema: TableSchema, *, max_record_bytes: int | None = None) -> Any:
    """Kafka rows split into decoded rows and dead-letter rows by the contract, none dropped
    (the sink tags once and splits a persisted frame: ``tag_json``, ``split_tagged``)."""
    return split_tagged(tag_json(df, schema, max_record_bytes=max_record_bytes), schema)
