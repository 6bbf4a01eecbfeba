"""Columns derived from a writer schema take every record of that schema as a row."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from eos_pipeline.adapters.registry import RegistrySchemas
from eos_pipeline.core.contract import compile_contract
from eos_pipeline.core.decode import decode_framed
from eos_pipeline.core.evolution import avro_columns, protobuf_columns
from eos_pipeline.core.schema import (
    Format,
    PayloadFormat,
    RegistrySettings,
    SchemaError,
    TableSchema,
)
from eos_pipeline_tests.support.framed import AVRO_ORDER, ProtoOrder, framed_values, order


def test_avro_types_map_to_columns_the_contract_accepts() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "n", "type": ["null", "long"], "default": None},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "d", "type": {"type": "int", "logicalType": "date"}},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                        "precision": 9, "scale": 2}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": ["null", "int"]}},
            {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A"]}},
            {"name": "level", "type": "int", "default": 3},
        ],
    }  # fmt: skip
    columns = avro_columns(json.dumps(schema))
    assert [(c.name, c.ch_type) for c in columns] == [
        ("n", "Nullable(Int64)"),
        ("ts", "DateTime64(3, 'UTC')"),
        ("d", "Date32"),
        ("amount", "Decimal(9, 2)"),
        ("tags", "Array(String)"),
        ("attrs", "Map(String, Nullable(Int32))"),
        ("kind", "String"),
        ("level", "Int32"),
    ]
    assert columns[-1].default == 3
    compile_contract(TableSchema(columns))


def test_a_nested_record_or_a_wide_union_is_refused_naming_the_field() -> None:
    nested = {"type": "record", "name": "I", "fields": []}
    for bad in (nested, ["int", "string"]):
        schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": bad}]}
        with pytest.raises(SchemaError, match="field 'x'"):
            avro_columns(json.dumps(schema))


@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_every_record_of_the_schema_is_a_row_of_the_derived_columns(fmt: str) -> None:
    client = SchemaRegistryClient.new_client({"url": "mock://columns"})
    values = framed_values(client, fmt, "derived", 20)
    columns = avro_columns(AVRO_ORDER) if fmt == "avro" else protobuf_columns(ProtoOrder.DESCRIPTOR)
    settings = RegistrySettings("mock://columns")
    schema = TableSchema(columns, format=PayloadFormat(Format(fmt), settings))
    decoded = decode_framed(values, schema, RegistrySchemas(settings, client))
    assert decoded.bad == [] and len(decoded.index) == 20
    assert decoded.columns["customer"] == [order(i)["customer"] for i in range(20)]
    assert decoded.columns["note"] == [order(i)["note"] for i in range(20)]


def test_json_schema_properties_map_to_columns() -> None:
    from eos_pipeline.core.evolution import json_schema_columns

    schema = {
        "type": "object",
        "required": ["id", "tags"],
        "properties": {
            "id": {"type": "integer"},
            "price": {"type": "number"},
            "at": {"type": "string", "format": "date-time"},
            "ok": {"type": ["boolean", "null"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "level": {"type": "integer", "default": 2},
        },
    }
    columns = json_schema_columns(json.dumps(schema))
    assert [(c.name, c.sql_type, c.default) for c in columns] == [
        ("id", "Int64", None),
        ("price", "Nullable(Float64)", None),
        ("at", "Nullable(DateTime64(6, 'UTC'))", None),
        ("ok", "Nullable(Bool)", None),
        ("tags", "Array(String)", None),
        ("level", "Int64", 2),
    ]
    compile_contract(TableSchema(columns))
    with pytest.raises(SchemaError, match="property 'o'"):
        json_schema_columns(json.dumps({"properties": {"o": {"type": "object"}}}))
