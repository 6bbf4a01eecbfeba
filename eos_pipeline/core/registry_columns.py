"""Table columns derived from a writer schema: Avro, Protobuf and JSON Schema to ClickHouse types.

The mapping behind "columns from the registry" (issue 27, step 4; docs/formats.md has the
table): each field becomes the column type whose contract rule takes the value the decoder gives
it (:func:`core.formats.plain`), so a record of that schema is always a row. Spark's types follow
from the ClickHouse ones (``adapters.spark_decode.spark_type``). A type no column can hold alike
in both sinks (a nested record, a union of two types) is refused naming the field. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from eos_pipeline.core.formats import WriterSchema, proto_descriptor, proto_message_index
from eos_pipeline.core.schema import Column, SchemaError

_AVRO_PRIMITIVES = {
    "boolean": "Bool",
    "int": "Int32",
    "long": "Int64",
    "float": "Float32",
    "double": "Float64",
    "string": "String",
    "bytes": "String",  # base64 text
}
_AVRO_LOGICAL = {
    "date": "Date32",
    "timestamp-millis": "DateTime64(3, 'UTC')",
    "timestamp-micros": "DateTime64(6, 'UTC')",
    "local-timestamp-millis": "DateTime64(3)",
    "local-timestamp-micros": "DateTime64(6)",
    "uuid": "UUID",
}
#: Column types ClickHouse refuses to wrap in Nullable(...).
_NOT_NULLABLE = ("Array(", "Map(")


def _avro_type(avro: Any, where: str) -> tuple[str, bool]:
    """The column type for an Avro type, and whether it may be null."""
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise SchemaError(f"{where}: a union of {avro} has no single column type")
        inner, _ = _avro_type(branches[0], where)
        return inner, len(branches) != len(avro)
    if isinstance(avro, str):
        if avro in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[avro], False
        raise SchemaError(f"{where}: Avro type {avro!r} (a named type) has no column type")
    kind, logical = avro.get("type"), avro.get("logicalType")
    if logical == "decimal":
        precision, scale = int(avro["precision"]), int(avro.get("scale", 0))
        return (f"Decimal({precision}, {scale})" if precision <= 38 else "String"), False
    if logical in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[logical], False
    if kind in ("enum", "fixed"):
        return "String", False
    if kind == "array":
        inner, nullable = _avro_type(avro["items"], f"{where} items")
        return f"Array({_nullable(inner) if nullable else inner})", False
    if kind == "map":
        inner, nullable = _avro_type(avro["values"], f"{where} values")
        return f"Map(String, {_nullable(inner) if nullable else inner})", False
    if kind in _AVRO_PRIMITIVES:
        return _AVRO_PRIMITIVES[kind], False
    raise SchemaError(
        f"{where}: Avro {kind} has no column type both sinks store alike (flatten it upstream)"
    )


def _nullable(ch_type: str) -> str:
    return ch_type if ch_type.startswith(_NOT_NULLABLE) else f"Nullable({ch_type})"


def avro_columns(schema_text: str) -> tuple[Column, ...]:
    """The payload columns of an Avro record schema, in field order."""
    schema = json.loads(schema_text)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaError("the writer schema is not an Avro record")
    columns = []
    for field in schema["fields"]:
        where = f"field {field['name']!r}"
        ch_type, nullable = _avro_type(field["type"], where)
        if nullable and not ch_type.startswith(_NOT_NULLABLE):
            ch_type = _nullable(ch_type)
        default = field.get("default")
        columns.append(
            Column(
                field["name"],
                ch_type,
                default=default if isinstance(default, (int, float, str, bool)) else None,
            )
        )
    return tuple(columns)


_PROTO_SCALARS = {
    FieldDescriptor.TYPE_BOOL: "Bool",
    FieldDescriptor.TYPE_INT32: "Int32",
    FieldDescriptor.TYPE_SINT32: "Int32",
    FieldDescriptor.TYPE_SFIXED32: "Int32",
    FieldDescriptor.TYPE_INT64: "Int64",
    FieldDescriptor.TYPE_SINT64: "Int64",
    FieldDescriptor.TYPE_SFIXED64: "Int64",
    FieldDescriptor.TYPE_UINT32: "UInt32",
    FieldDescriptor.TYPE_FIXED32: "UInt32",
    FieldDescriptor.TYPE_UINT64: "UInt64",
    FieldDescriptor.TYPE_FIXED64: "UInt64",
    FieldDescriptor.TYPE_FLOAT: "Float32",
    FieldDescriptor.TYPE_DOUBLE: "Float64",
    FieldDescriptor.TYPE_STRING: "String",
    FieldDescriptor.TYPE_BYTES: "String",
    FieldDescriptor.TYPE_ENUM: "String",
}
_PROTO_WRAPPERS = {
    "google.protobuf.DoubleValue": "Float64",
    "google.protobuf.FloatValue": "Float32",
    "google.protobuf.Int64Value": "Int64",
    "google.protobuf.UInt64Value": "UInt64",
    "google.protobuf.Int32Value": "Int32",
    "google.protobuf.UInt32Value": "UInt32",
    "google.protobuf.BoolValue": "Bool",
    "google.protobuf.StringValue": "String",
    "google.protobuf.BytesValue": "String",
    "google.protobuf.Timestamp": "DateTime64(6, 'UTC')",
}


def _proto_type(field: FieldDescriptor) -> str:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name in _PROTO_WRAPPERS:
            return _PROTO_WRAPPERS[name]
        raise SchemaError(
            f"field {field.name!r}: message {name} has no column type both sinks store alike"
        )
    return _PROTO_SCALARS[field.type]


def protobuf_columns(message: Descriptor) -> tuple[Column, ...]:
    """The payload columns of a Protobuf message, in field order."""
    columns = []
    for field in message.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value = _proto_type(field.message_type.fields_by_name["value"])
            columns.append(Column(field.name, f"Map(String, {value})"))
        elif field.is_repeated:
            columns.append(Column(field.name, f"Array({_proto_type(field)})"))
        elif field.has_presence:
            columns.append(Column(field.name, _nullable(_proto_type(field))))
        else:  # proto3 scalars without presence read as their default when unset
            columns.append(Column(field.name, _proto_type(field), default=_proto_default(field)))
    return tuple(columns)


def _proto_default(field: FieldDescriptor) -> str | int | float | bool:
    """What an unset proto3 scalar reads as: also what a record of a writer without the field
    (an older or newer schema) stores, so the field may be added or removed."""
    if field.type == FieldDescriptor.TYPE_ENUM:
        return str(field.enum_type.values_by_number[0].name)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return False
    if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        return ""
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return 0.0
    return 0


_JSON_TYPES = {"integer": "Int64", "number": "Float64", "string": "String", "boolean": "Bool"}


def _json_type(spec: Any, where: str) -> tuple[str, bool]:
    """The column type of a JSON Schema property, and whether it may be null."""
    kinds = spec.get("type") if isinstance(spec, dict) else None
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    nullable = "null" in kinds
    kinds = [k for k in kinds if k != "null"]
    if len(kinds) != 1:
        raise SchemaError(f"{where}: JSON Schema type {spec.get('type')!r} has no single column")
    if kinds[0] == "array":
        inner, inner_null = _json_type(spec.get("items", {}), f"{where} items")
        return f"Array({_nullable(inner) if inner_null else inner})", False
    if kinds[0] in _JSON_TYPES:
        if kinds[0] == "string" and spec.get("format") == "date-time":
            return "DateTime64(6, 'UTC')", nullable
        return _JSON_TYPES[kinds[0]], nullable
    raise SchemaError(f"{where}: JSON Schema {kinds[0]} has no column type both sinks store alike")


def json_schema_columns(schema_text: str) -> tuple[Column, ...]:
    """The columns of a JSON Schema object: its ``properties`` in order; a property not in
    ``required`` is nullable (or takes its ``default``)."""
    schema = json.loads(schema_text)
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        raise SchemaError("the writer schema is not a JSON Schema object with properties")
    required = set(schema.get("required") or ())
    columns = []
    for name, spec in schema["properties"].items():
        ch_type, nullable = _json_type(spec, f"property {name!r}")
        default = spec.get("default") if isinstance(spec, dict) else None
        default = default if isinstance(default, (int, float, str, bool)) else None
        if (nullable or name not in required) and default is None:
            ch_type = _nullable(ch_type) if not ch_type.startswith(_NOT_NULLABLE) else ch_type
        columns.append(Column(name, ch_type, default=default))
    return tuple(columns)


def writer_columns(
    writer: WriterSchema, message_indexes: Sequence[int] = (0,), message: str | None = None
) -> tuple[Column, ...]:
    """The payload columns of a registered writer schema (for Protobuf: of the message the
    records name by their indexes, or the top-level ``message`` named)."""
    if writer.schema_type == "PROTOBUF":
        indexes = tuple(message_indexes) or (0,)
        if message is not None:
            indexes = (proto_message_index(writer, message),)
        return protobuf_columns(proto_descriptor(writer, indexes))
    if writer.schema_type == "JSON":
        return json_schema_columns(writer.text)
    return avro_columns(writer.text)
