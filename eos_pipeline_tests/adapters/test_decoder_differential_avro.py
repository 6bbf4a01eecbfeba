"""One verdict per Avro record: the ClickHouse sink's decoder, the Hudi sink's Spark decoder and
confluent-kafka's own ``AvroDeserializer``, on generated schemas and records (issue 27).

Hypothesis draws Avro record schemas (every primitive, arrays, maps, enums, nullable unions,
``timestamp-millis``, ``date``, ``decimal``), a table schema whose columns may or may not fit the
fields (a ``long`` into ``Int8``, a ``string`` into ``Int64``, a null into a required column, a
column the writer does not have), and records of each schema, written by confluent-kafka's
``AvroSerializer`` against the real registry, some of them then damaged (truncated, trailing
bytes, another magic byte, an id the registry does not know). Every record must get the same
verdict from both sinks' decoders, and every row must hold what confluent-kafka's deserializer
reads from the same bytes.

``EOS_DIFF_RECORDS`` sets how many records are generated (CI: a few hundred; a long run:
``EOS_DIFF_RECORDS=20000``). The count judged is printed.
"""

from __future__ import annotations

import json
import os
import struct
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from eos_pipeline.core.decode import plain
from eos_pipeline.core.schema import Format, PayloadFormat, RegistrySettings, TableSchema
from eos_pipeline_tests.support.framed_differential import judge_alike, table_against

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RECORDS = int(os.environ.get("EOS_DIFF_RECORDS", "300"))
_I64 = (-(2**63), 2**63 - 1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_I32 = (-(2**31), 2**31 - 1)

#: Avro field type -> (values of it, column types to try: the first fits, the others may not).
FIELD_KINDS: dict[str, tuple[Any, st.SearchStrategy[Any], list[str]]] = {
    "long": ("long", st.integers(*_I64), ["Int64", "Int8", "UInt32", "String"]),
    "int": ("int", st.integers(*_I32), ["Int32", "Int64", "Int16"]),
    "double": ("double", st.floats(allow_nan=True), ["Float64", "Int64"]),
    "float": ("float", st.floats(width=32, allow_nan=False), ["Float32", "Float64"]),
    "boolean": ("boolean", st.booleans(), ["Bool", "Int8"]),
    "string": ("string", st.text(max_size=12), ["String", "Int64", "UUID", "FixedString(4)"]),
    "bytes": ("bytes", st.binary(max_size=12), ["String"]),
    "array": (
        {"type": "array", "items": "long"},
        st.lists(st.integers(*_I64), max_size=4),
        ["Array(Int64)", "Array(Int8)"],
    ),
    "map": (
        {"type": "map", "values": "string"},
        st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
        ["Map(String, String)"],
    ),
    "optional": (
        ["null", "long"],
        st.none() | st.integers(*_I32),
        ["Nullable(Int64)", "Int64"],
    ),
    "enum": (
        {"type": "enum", "name": "Sym", "symbols": ["A", "B", "C"]},
        st.sampled_from("ABC"),
        ["String"],
    ),
    "timestamp": (
        {"type": "long", "logicalType": "timestamp-millis"},
        st.integers(-(2**40), 2**42).map(lambda ms: _EPOCH + timedelta(milliseconds=ms)),
        ["DateTime64(3, 'UTC')", "DateTime64(3)"],
    ),
    "date": (
        {"type": "int", "logicalType": "date"},
        st.integers(-30_000, 200_000).map(lambda days: date(1970, 1, 1) + timedelta(days=days)),
        ["Date32", "Date"],
    ),
    "decimal": (
        {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        st.decimals(min_value=-9_999_999, max_value=9_999_999, places=2, allow_nan=False),
        ["Decimal(9, 2)", "Decimal(5, 1)"],
    ),
}


@st.composite
def avro_tables(draw: st.DrawFn) -> tuple[str, TableSchema, list[dict[str, Any]]]:
    """An Avro record schema, a table schema against it, and records of the Avro schema."""
    kinds = draw(st.lists(st.sampled_from(sorted(FIELD_KINDS)), min_size=1, max_size=5))
    fields, values = [], {}
    for n, kind in enumerate(kinds):
        avro_type, strategy, _ = FIELD_KINDS[kind]
        name = f"f{n}_{kind}"
        if isinstance(avro_type, dict) and avro_type.get("type") == "enum":
            avro_type = dict(avro_type, name=f"Sym{n}")
        fields.append({"name": name, "type": avro_type})
        values[name] = strategy
    table = table_against(
        draw, [(f"f{n}_{kind}", FIELD_KINDS[kind][2]) for n, kind in enumerate(kinds)]
    )
    schema = json.dumps({"type": "record", "name": "Gen", "fields": fields})
    records = draw(st.lists(st.fixed_dictionaries(values), min_size=1, max_size=12))
    return schema, table, records


def _damage(value: bytes, how: int) -> bytes:
    if how == 1:
        return value[: max(0, len(value) - 1 - how)]
    if how == 2:
        return value + b"\x02"
    if how == 3:
        return b"\x01" + value[1:]
    if how == 4:
        return b"\x00" + struct.pack(">I", 10_000_000) + value[5:]
    return value


def test_avro_records_get_one_verdict_from_every_decoder(
    spark: SparkSession, schema_registry: str
) -> None:
    client = SchemaRegistryClient({"url": schema_registry})
    cases: list[tuple[str, TableSchema, list[tuple[bytes, dict[str, Any], int]]]] = []
    budget = [RECORDS]

    @settings(
        max_examples=max(RECORDS // 6, 10),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(avro_tables(), st.lists(st.sampled_from([0, 0, 0, 0, 0, 1, 2, 3, 4]), min_size=12))
    def generate(table: tuple[str, TableSchema, list[dict[str, Any]]], damage: list[int]) -> None:
        if budget[0] <= 0:
            return
        avro_schema, schema, records = table
        subject = f"gen-{len(cases)}"
        write = AvroSerializer(client, avro_schema)
        ctx = SerializationContext(subject, MessageField.VALUE)
        out = []
        for record, how in zip(records, damage, strict=False):
            out.append((_damage(write(record, ctx), how), record, how))
        budget[0] -= len(out)
        cases.append((subject, schema, out))

    generate()
    settings_ = RegistrySettings(schema_registry)
    read_back = AvroDeserializer(client)
    tally: Counter[str] = Counter()
    for subject, table, records in cases:
        schema = TableSchema(table.columns, format=PayloadFormat(Format.AVRO, settings_))
        ctx = SerializationContext(subject, MessageField.VALUE)
        judge_alike(
            spark,
            schema,
            subject,
            [(value, how) for value, _, how in records],
            lambda value, ctx=ctx: plain(read_back(value, ctx)),
            tally,
        )
    judged = sum(tally.values())
    print(f"[differential-avro] {judged} records in {len(cases)} schemas judged alike: {tally}")
    assert tally.get("row", 0) > judged // 10 and judged - tally.get("row", 0) > judged // 10
