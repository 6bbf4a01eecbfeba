"""The ClickHouse sink's first choice for a step: ClickHouse parses the JSON values itself.

Used where ``clickhouse.json_parser`` allows it, the table lives in chDB and
:func:`eos_pipeline.core.decode.native_plan` vouches for the schema. The step's token and
rows are those of the other paths (Arrow, per-record), so a retry deduplicates against a block
written by any of them; a refused chunk writes nothing and goes on to the Arrow path.
"""

from __future__ import annotations

import logging

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.clickhouse.native_json import NativeRefused
from eos_pipeline.core.decode import NativeRows, native_plan
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.sinks.clickhouse_reports import ClickHouseTableSpec

log = logging.getLogger(__name__)


def _possible(spec: ClickHouseTableSpec, sink: ClickHouseSink) -> bool:
    return bool(getattr(sink, "embedded", False)) and native_plan(spec.schema) is not None


def check_json_parser(spec: ClickHouseTableSpec, sink: ClickHouseSink) -> None:
    """Refuse ``json_parser: native`` where ClickHouse cannot parse this pipeline's JSON."""
    if spec.json_parser == "native" and not _possible(spec, sink):
        raise ValueError(
            f"pipeline {spec.pipeline!r}: clickhouse.json_parser is 'native', but ClickHouse "
            "parses JSON itself only into chDB and for columns of Int8..Int64, UInt8..UInt64, "
            "Float64, Bool and String (also LowCardinality or Nullable): use 'auto' or 'arrow'"
        )


def insert_native_step(
    spec: ClickHouseTableSpec,
    sink: ClickHouseSink,
    tp: TopicPartition,
    row_topic: str,
    offsets: list[int],
    values: list[bytes | None],
    stamps: list[int],
    token: str,
) -> int | None:
    """Rows sent, or None: ClickHouse may not parse this chunk, or refused a record (nothing
    was written then; the caller takes the Arrow path)."""
    if spec.json_parser == "arrow" or not _possible(spec, sink):
        return None
    plan = native_plan(spec.schema)
    if plan is None or not values:
        return None
    try:
        rows = NativeRows(spec.schema.source, row_topic, tp.partition, offsets, stamps)
        return sink.insert_json(spec.database, spec.table, plan, values, rows, dedup_token=token)
    except NativeRefused as ex:
        log.debug("%s: ClickHouse's JSON parser refused the chunk (%s); Arrow next", tp, ex)
        return None
