"""Readings of the core's rules that only the tests ask for."""

from __future__ import annotations

from eos_pipeline.core.decode import NativePayload, json_lines, native_payload
from eos_pipeline.core.dedup import dedup_token
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.replay import replay_token_name
from eos_pipeline.core.schema import Column, TableSchema


def replay_token(pipeline: str, tp: TopicPartition, chunk: OffsetRange, epoch: int) -> str:
    """The token a replay inserts ``chunk`` under (``sinks.clickhouse.ClickHouseReplay``)."""
    return dedup_token(replay_token_name(pipeline, epoch), tp, chunk)


def column(schema: TableSchema, name: str) -> Column:
    """The column of ``schema`` (source columns included) called ``name``."""
    for col in schema.all_columns:
        if col.name == name:
            return col
    raise KeyError(name)


def joined_native_payload(values: list[bytes | None]) -> NativePayload | None:
    """:func:`native_payload` over ``values`` joined here (the product passes what it wrote)."""
    data = json_lines(values)
    return None if data is None else native_payload(values, data)
