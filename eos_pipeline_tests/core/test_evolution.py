"""Which writer schemas a table can follow, and how (core.evolution)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from eos_pipeline.core.errors import Fault
from eos_pipeline.core.evolution import IncompatibleSchemaChange, avro_columns, plan_evolution
from eos_pipeline.core.schema import Column, TableSchema


def _avro(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": list(fields)})


BASE = [
    {"name": "id", "type": "long"},
    {"name": "qty", "type": "int"},
    {"name": "price", "type": "float"},
    {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
    {"name": "note", "type": ["null", "string"], "default": None},
]


def _table() -> TableSchema:
    return TableSchema(avro_columns(_avro(*BASE)), schema_id=5)


def test_fields_added_with_defaults_and_widened_types_are_followed() -> None:
    newer = _avro(
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "long"},  # int -> long
        {"name": "price", "type": "double"},  # float -> double
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B", "C"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "channel", "type": "string", "default": "web"},
        {"name": "coupon", "type": ["null", "string"], "default": None},
    )
    evolution = plan_evolution(_table(), avro_columns(newer), writer_id=9)
    assert [(c.name, c.sql_type, c.default) for c in evolution.added] == [
        ("channel", "String", "web"),
        ("coupon", "Nullable(String)", None),
    ]
    assert [(c.name, c.sql_type) for c in evolution.widened] == [
        ("qty", "Int64"),
        ("price", "Float64"),
    ]
    evolved = evolution.apply(_table())
    assert evolved.schema_id == 9
    assert [c.name for c in evolved.columns] == [
        "id", "qty", "price", "kind", "note", "channel", "coupon"
    ]  # fmt: skip
    assert evolution.describe()["columns_added"] == ["channel String", "coupon Nullable(String)"]
    # the older writer after the evolution: nothing more to do (its types fit, the new
    # columns take their defaults)
    assert plan_evolution(evolved, avro_columns(_avro(*BASE)), writer_id=5).empty


def test_a_field_removed_that_had_a_default_needs_nothing() -> None:
    fewer = _avro(*BASE[:4])
    assert plan_evolution(_table(), avro_columns(fewer), writer_id=6).empty


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ([*BASE[:1], {"name": "qty", "type": "string"}, *BASE[2:]], "qty", "cannot hold"),
        ([*BASE, {"name": "must", "type": "long"}], "must", "required"),
        ([BASE[0], *BASE[2:]], "qty", "no default"),  # a required field removed
        ([{"name": "id", "type": "int"}, *BASE[1:]], None, None),  # narrowed: fits, no change
    ],
)
def test_a_change_the_tables_cannot_follow_names_the_field_and_both_ids(
    fields: list[dict[str, Any]], field: str | None, words: str | None
) -> None:
    columns = avro_columns(_avro(*fields))
    if field is None:
        assert plan_evolution(_table(), columns, writer_id=7).empty
        return
    with pytest.raises(IncompatibleSchemaChange) as caught:
        plan_evolution(_table(), columns, writer_id=7)
    message = str(caught.value)
    assert f"field {field!r}" in message and words in message  # type: ignore[operator]
    assert "schema id 7" in message and "schema id 5" in message and "BACKWARD" in message
    assert caught.value.fault is Fault.NEEDS_PERSON
    assert (caught.value.field, caught.value.table_id, caught.value.writer_id) == (field, 5, 7)


def test_a_column_may_become_nullable() -> None:
    table = TableSchema((Column("a", "Int32"),), schema_id=1)
    evolution = plan_evolution(table, (Column("a", "Nullable(Int64)"),), writer_id=2)
    assert [(c.name, c.sql_type) for c in evolution.widened] == [("a", "Nullable(Int64)")]


def _proto(name: str, extra: bool) -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{name}.proto", package="evo", syntax="proto3")
    msg = fdp.message_type.add(name="Sale")
    msg.field.add(name="id", number=1, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    kind = fdp.enum_type.add(name="Kind")
    for n, symbol in enumerate(["UNKNOWN", "A", "B"] if extra else ["UNKNOWN", "A"]):
        kind.value.add(name=symbol, number=n)
    msg.field.add(name="kind", number=2, type=f.TYPE_ENUM, label=f.LABEL_OPTIONAL,
                  type_name=".evo.Kind")  # fmt: skip
    if extra:  # a new plain field and a new optional one
        msg.field.add(name="qty", number=3, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
        note = msg.field.add(name="note", number=4, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
        note.proto3_optional, note.oneof_index = True, 0
        msg.oneof_decl.add(name="_note")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("evo.Sale"))


def test_new_protobuf_fields_and_enum_symbols_are_followed_and_old_records_read_defaults() -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from eos_pipeline.adapters.registry import RegistrySchemas
    from eos_pipeline.core.decode import decode_framed
    from eos_pipeline.core.evolution import protobuf_columns
    from eos_pipeline.core.schema import Format, PayloadFormat, RegistrySettings

    old, new = _proto("v1", extra=False), _proto("v2", extra=True)
    settings = RegistrySettings("mock://evolution-proto")
    table = TableSchema(protobuf_columns(old.DESCRIPTOR),
                        format=PayloadFormat(Format.PROTOBUF, settings), schema_id=1)  # fmt: skip
    evolution = plan_evolution(table, protobuf_columns(new.DESCRIPTOR), writer_id=2)
    assert [(c.name, c.sql_type, c.default) for c in evolution.added] == [
        ("qty", "Int64", 0),
        ("note", "Nullable(String)", None),
    ]
    assert evolution.widened == ()  # a new enum symbol is still a String
    client = SchemaRegistryClient.new_client({"url": settings.url})
    ctx = SerializationContext("evo", MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    values = [
        ProtobufSerializer(old, client, conf)(old(id=1, kind=1), ctx),
        ProtobufSerializer(new, client, conf)(new(id=2, kind=2, qty=5, note="x"), ctx),
    ]
    decoded = decode_framed(values, evolution.apply(table), RegistrySchemas(settings, client))
    assert decoded.bad == []
    assert decoded.columns["qty"] == [0, 5] and decoded.columns["note"] == [None, "x"]
    assert decoded.columns["kind"] == ["A", "B"]
