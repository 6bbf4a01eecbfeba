"""Kafka rows shaped for a Hudi write by hand, for the adapter tests that write without the sink
(the product's sink selects its columns from the table schema, in ``sinks.hudi``)."""

from __future__ import annotations

from typing import Any

from eos_pipeline.adapters.spark_decode import SOURCE_COLUMNS, TIMESTAMP_COLUMN


def with_source_columns(df: Any) -> Any:
    """Kafka rows with their coordinates renamed for a sink (``_topic``, ``_partition``...)."""
    from pyspark.sql import functions as F

    return df.select(
        *(F.col(src).alias(dst) for src, dst in SOURCE_COLUMNS.items()),
        F.col("timestamp").alias(TIMESTAMP_COLUMN),
        "key",
        "value",
    )
