"""Table columns from a writer schema, and whether a table can follow a newer one (pure).

Columns (:func:`writer_columns`; docs/formats.md has the table): each field becomes the column
whose contract rule takes what the decoder gives it, so a record of that schema is always a row;
a type no column holds alike in both sinks is refused naming the field.

Evolution (:func:`plan_evolution`): both tables change *before* a newer writer's row is written:
an optional field is an added column, a wider type widens its column, an older writer needs
nothing; anything else is :class:`IncompatibleSchemaChange`. The answer depends only on the two
column lists, so every retry of a range decides the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from eos_pipeline.core.contract import is_required, unwrap
from eos_pipeline.core.decode import PROTO_WRAPPERS, WriterSchema, proto_class, proto_message_index
from eos_pipeline.core.errors import NeedsPerson
from eos_pipeline.core.schema import NOT_NULLABLE, Column, SchemaError, TableSchema

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


def _avro_type(avro: Any, where: str) -> tuple[str, bool]:
    """The column type, and whether it may be null."""
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
    return ch_type if ch_type.startswith(NOT_NULLABLE) else f"Nullable({ch_type})"


def avro_columns(schema_text: str) -> tuple[Column, ...]:
    schema = json.loads(schema_text)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaError("the writer schema is not an Avro record")
    columns = []
    for field in schema["fields"]:
        where = f"field {field['name']!r}"
        ch_type, nullable = _avro_type(field["type"], where)
        if nullable:
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
    getattr(FieldDescriptor, f"TYPE_{proto}"): ch_type
    for ch_type, protos in {
        "Bool": ("BOOL",),
        "Int32": ("INT32", "SINT32", "SFIXED32"),
        "Int64": ("INT64", "SINT64", "SFIXED64"),
        "UInt32": ("UINT32", "FIXED32"),
        "UInt64": ("UINT64", "FIXED64"),
        "Float32": ("FLOAT",),
        "Float64": ("DOUBLE",),
        "String": ("STRING", "BYTES", "ENUM"),  # bytes as base64, enums by name
    }.items()
    for proto in protos
}
_PROTO_MESSAGES = {**PROTO_WRAPPERS, "google.protobuf.Timestamp": "DateTime64(6, 'UTC')"}


def _proto_type(field: FieldDescriptor) -> str:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name in _PROTO_MESSAGES:
            return _PROTO_MESSAGES[name]
        raise SchemaError(
            f"field {field.name!r}: message {name} has no column type both sinks store alike"
        )
    return _PROTO_SCALARS[field.type]


def protobuf_columns(message: Descriptor) -> tuple[Column, ...]:
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
    """What an unset proto3 scalar reads as, so a writer without the field stores it too."""
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
    """The column type, and whether it may be null."""
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
    """A property not ``required`` is nullable (or takes its ``default``)."""
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
            ch_type = _nullable(ch_type)
        columns.append(Column(name, ch_type, default=default))
    return tuple(columns)


def writer_columns(
    writer: WriterSchema, message_indexes: Sequence[int] = (0,), message: str | None = None
) -> tuple[Column, ...]:
    """For Protobuf, of the message the records' indexes name, or the top-level ``message``."""
    if writer.schema_type == "PROTOBUF":
        indexes = tuple(message_indexes) or (0,)
        if message is not None:
            indexes = (proto_message_index(writer, message),)
        return protobuf_columns(proto_class(writer, indexes).DESCRIPTOR)
    if writer.schema_type == "JSON":
        return json_schema_columns(writer.text)
    return avro_columns(writer.text)


#: Each family's types from narrow to wide: a column of a later type holds every value of an
#: earlier one, so ``MODIFY COLUMN`` to it loses nothing (and Hudi promotes the same way).
_WIDENING = (
    ("Int8", "Int16", "Int32", "Int64"),
    ("UInt8", "UInt16", "UInt32", "UInt64"),
    ("Float32", "Float64"),
)

WHAT_TO_DO = (
    "Register a compatible schema instead (in the registry set the subject's compatibility to "
    "BACKWARD or FULL so it refuses such a change), or migrate both tables by hand "
    "(ALTER TABLE ... MODIFY/ADD COLUMN; a new Hudi table) and restart the pipeline; until then "
    "this partition stops and the others go on"
)


class IncompatibleSchemaChange(NeedsPerson):
    """No retry fixes it: a person must decide."""

    code = "incompatible-schema"

    def __init__(self, message: str, field: str = "", table_id: int | None = None,
                 writer_id: int | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.field = field
        self.table_id = table_id
        self.writer_id = writer_id


@dataclass(frozen=True, slots=True)
class Evolution:
    """What the tables must do before the rows of writer schema ``writer_id`` are written: add
    columns (in the writer's order), widen columns (to what they must become)."""

    table_id: int | None
    writer_id: int
    added: tuple[Column, ...] = ()
    widened: tuple[Column, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.added and not self.widened

    def apply(self, schema: TableSchema) -> TableSchema:
        if self.empty:
            return schema
        wider = {c.name: c for c in self.widened}
        columns = tuple(wider.get(c.name, c) for c in schema.columns) + self.added
        return replace(schema, columns=columns, schema_id=self.writer_id)

    def describe(self) -> dict[str, object]:
        """For the materialization's metadata."""
        return {
            "from_schema_id": self.table_id,
            "schema_id": self.writer_id,
            "columns_added": [f"{c.name} {c.sql_type}" for c in self.added],
            "columns_widened": [f"{c.name} {c.sql_type}" for c in self.widened],
        }


def _rank(base: str) -> tuple[int, int] | None:
    for family, types in enumerate(_WIDENING):
        if base in types:
            return family, types.index(base)
    return None


def _compare(column: Column, writer: Column) -> str:
    """``same``, ``fits`` (the column holds the writer's values), ``wider`` (the writer's type
    widens the column) or ``other``."""
    have, have_null = unwrap(column.sql_type)
    want, want_null = unwrap(writer.sql_type)
    have_null = have_null or column.default is not None  # a null reads as the default
    if have == want:
        if want_null and not have_null:
            return "wider"
        return "same" if have_null == want_null else "fits"
    a, b = _rank(have), _rank(want)
    if a is None or b is None or a[0] != b[0]:
        return "other"
    if b[1] > a[1]:
        return "wider"
    return "fits" if have_null or not want_null else "wider"


def _widened(column: Column, writer: Column) -> Column:
    have, have_null = unwrap(column.sql_type)
    want, want_null = unwrap(writer.sql_type)
    a, b = _rank(have), _rank(want)
    base = want if a is not None and b is not None and b[1] > a[1] else have
    nullable = (have_null or want_null) and column.default is None
    return Column(column.name, f"Nullable({base})" if nullable else base, default=column.default)


def plan_evolution(table: TableSchema, writer: Sequence[Column], *, writer_id: int) -> Evolution:
    old = table.schema_id

    def refuse(field: str, why: str) -> IncompatibleSchemaChange:
        return IncompatibleSchemaChange(
            f"field {field!r}: writer schema id {writer_id} {why} (the table's columns are from "
            f"schema id {old}); the tables cannot follow this change. {WHAT_TO_DO}",
            field,
            old,
            writer_id,
        )

    mine = {c.name: c for c in table.columns}
    theirs = {c.name: c for c in writer}
    source = {c.name for c in table.source.columns()}
    added: list[Column] = []
    widened: list[Column] = []
    for col in writer:
        if col.name in source:
            raise refuse(col.name, "has a field named like a source column")
        have = mine.get(col.name)
        if have is None:
            if is_required(col):
                raise refuse(col.name, f"adds it as a required {col.sql_type} without a default")
            added.append(col)
            continue
        verdict = _compare(have, col)
        if verdict == "wider":
            widened.append(_widened(have, col))
        elif verdict == "other":
            raise refuse(
                col.name, f"gives it type {col.sql_type}, which column {have.sql_type} cannot hold"
            )
    for col in table.columns:
        if col.name not in theirs and is_required(col):
            raise refuse(col.name, f"has no such field, and column {col.sql_type} has no default")
    return Evolution(old, writer_id, tuple(added), tuple(widened))


def holds(column: Column, actual_type: str) -> bool:
    """Whether a column of ``actual_type`` (perhaps widened by a past evolution) holds
    ``column``'s values."""
    try:
        actual = Column(column.name, actual_type, default=column.default)
    except SchemaError:
        return False
    return _compare(actual, column) in ("same", "fits")


def catch_up(schema: TableSchema, existing: Mapping[str, str]) -> Evolution:
    """What an existing table (column name -> type) lacks of ``schema``, resolved at load and
    perhaps newer than the table."""
    assert schema.schema_id is not None
    added, widened = [], []
    for col in schema.columns:
        if col.name not in existing:
            if is_required(col):
                raise IncompatibleSchemaChange(
                    f"field {col.name!r}: schema id {schema.schema_id} requires it (no default), "
                    f"and the existing table has no such column. {WHAT_TO_DO}",
                    col.name,
                    None,
                    schema.schema_id,
                )
            added.append(col)
        else:
            try:
                actual = Column(col.name, existing[col.name], default=col.default)
            except SchemaError:
                continue  # not ours to widen: the table check names the mismatch
            if _compare(actual, col) == "wider":
                widened.append(_widened(actual, col))
    return Evolution(None, schema.schema_id, tuple(added), tuple(widened))
