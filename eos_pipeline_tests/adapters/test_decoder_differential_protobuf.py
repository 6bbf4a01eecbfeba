"""One verdict per Protobuf record: the ClickHouse sink's decoder, the Hudi sink's Spark decoder
and confluent-kafka's own ``ProtobufDeserializer``, on generated schemas and records (issue 27).

Hypothesis draws proto3 message descriptors, built at run time as ``FileDescriptorProto``s
(every scalar kind, ``repeated``, ``map<string, string>``, ``optional``, an enum,
``google.protobuf.Timestamp`` and ``Int64Value``; the message first in its file, after another
one, or nested, so the message indexes vary), a table schema whose columns may or may not fit
the fields, and messages of each descriptor, written by confluent-kafka's
``ProtobufSerializer`` against the real registry, some of them then damaged (cut short,
trailing bytes, another magic byte, an id the registry does not know, a message index naming
no message). Every record must get the same verdict from both sinks' decoders; confluent's
deserializer must refuse exactly the records judged on their bytes (``BadFraming``,
``UnknownSchemaId``, ``DecodeError``) and read every row's fields as the tables hold them.

``EOS_DIFF_RECORDS`` sets how many records are generated (CI: a few hundred; a long run:
``EOS_DIFF_RECORDS=20000``, 50 to 200 records per schema). The count judged is printed.
"""

from __future__ import annotations

import base64
import io
import os
import struct
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.common.serde import SchemaId
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from eos_pipeline.core.schema import Format, PayloadFormat, RegistrySettings, TableSchema
from eos_pipeline_tests.support.framed_differential import judge_alike, table_against

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RECORDS = int(os.environ.get("EOS_DIFF_RECORDS", "300"))
#: Records per schema at most: more on a long run, where each schema's Spark job and
#: registration, not its records, take the time.
PER_SCHEMA = max(12, RECORDS // 100)
MIN_PER_SCHEMA = max(1, RECORDS // 400)
_I64 = (-(2**63), 2**63 - 1)
_I32 = (-(2**31), 2**31 - 1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_F = descriptor_pb2.FieldDescriptorProto
_SYMBOLS = ("SYM_A", "SYM_B", "SYM_C")

#: Field kind -> (proto type, type name, label, values of it, column types to try: the first
#: fits, the others may not).
FIELD_KINDS: dict[str, tuple[int, str, int, st.SearchStrategy[Any], list[str]]] = {
    "int64": (_F.TYPE_INT64, "", 1, st.integers(*_I64), ["Int64", "Int8", "UInt32", "String"]),
    "int32": (_F.TYPE_INT32, "", 1, st.integers(*_I32), ["Int32", "Int64", "Int16"]),
    "sint64": (_F.TYPE_SINT64, "", 1, st.integers(*_I64), ["Int64", "Int32"]),
    "uint64": (_F.TYPE_UINT64, "", 1, st.integers(0, 2**64 - 1), ["UInt64", "Int64"]),
    "fixed32": (_F.TYPE_FIXED32, "", 1, st.integers(0, 2**32 - 1), ["UInt32", "Int32"]),
    "double": (_F.TYPE_DOUBLE, "", 1, st.floats(allow_nan=True), ["Float64", "Int64"]),
    "float": (_F.TYPE_FLOAT, "", 1, st.floats(width=32, allow_nan=False), ["Float32", "Float64"]),
    "bool": (_F.TYPE_BOOL, "", 1, st.booleans(), ["Bool", "Int8"]),
    "string": (
        _F.TYPE_STRING,
        "",
        1,
        st.text(max_size=12),
        ["String", "Int64", "UUID", "FixedString(4)"],
    ),
    "bytes": (_F.TYPE_BYTES, "", 1, st.binary(max_size=12), ["String"]),
    "repeated": (
        _F.TYPE_INT64,
        "",
        3,
        st.lists(st.integers(*_I64), max_size=4),
        ["Array(Int64)", "Array(Int8)"],
    ),
    "map": (
        _F.TYPE_MESSAGE,
        "map",
        3,
        st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
        ["Map(String, String)"],
    ),
    "optional": (
        _F.TYPE_INT64,
        "optional",
        1,
        st.none() | st.integers(*_I32),
        ["Nullable(Int64)", "Int64"],
    ),
    "enum": (
        _F.TYPE_ENUM,
        ".gen.Sym",
        1,
        st.integers(0, len(_SYMBOLS) - 1),
        ["String", "LowCardinality(String)"],
    ),
    "timestamp": (
        _F.TYPE_MESSAGE,
        ".google.protobuf.Timestamp",
        1,
        st.none()
        | st.integers(-(2**40), 2**42).map(lambda ms: _EPOCH + timedelta(milliseconds=ms)),
        ["DateTime64(3, 'UTC')", "DateTime64(3)", "Nullable(DateTime64(3, 'UTC'))"],
    ),
    "wrapper": (
        _F.TYPE_MESSAGE,
        ".google.protobuf.Int64Value",
        1,
        st.none() | st.integers(*_I64),
        ["Nullable(Int64)", "Int64"],
    ),
}


def _file(kinds: list[str], placement: int, n: int) -> tuple[type[Message], list[str]]:
    """A proto3 file whose message ``Gen`` has one field of each kind; ``placement`` 0: the
    first message, 1: after another, 2: nested in another. Returns its class and field names."""
    fdp = descriptor_pb2.FileDescriptorProto(name=f"gen_{n}.proto", package="gen")
    fdp.syntax = "proto3"
    fdp.dependency.extend(["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"])
    enum = fdp.enum_type.add(name="Sym")
    for number, symbol in enumerate(_SYMBOLS):
        enum.value.add(name=symbol, number=number)
    if placement == 1:
        fdp.message_type.add(name="Other").field.add(name="x", number=1, type=9, label=1)
    if placement == 2:
        outer = fdp.message_type.add(name="Outer")
        message = outer.nested_type.add(name="Gen")
        full = "gen.Outer.Gen"
    else:
        message = fdp.message_type.add(name="Gen")
        full = "gen.Gen"
    names = []
    for number, kind in enumerate(kinds, start=1):
        proto_type, type_name, label, _, _ = FIELD_KINDS[kind]
        name = f"f{number}_{kind}"
        names.append(name)
        field = message.field.add(name=name, number=number, type=proto_type, label=label)
        if type_name == "map":
            entry = message.nested_type.add(name=f"F{number}Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=1)
            entry.field.add(name="value", number=2, type=_F.TYPE_STRING, label=1)
            field.type_name = f".{full}.F{number}Entry"
        elif type_name == "optional":
            field.proto3_optional = True
            field.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name=f"_{name}")
        elif type_name:
            field.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full)), names


def _message(cls: type[Message], kinds: list[str], names: list[str], values: list[Any]) -> Message:
    fields: dict[str, Any] = {}
    for kind, name, value in zip(kinds, names, values, strict=True):
        if value is None:
            continue
        # messages of the well-known types as dicts: the file's pool has its own classes
        if kind == "timestamp":
            micros = (value - _EPOCH) // timedelta(microseconds=1)
            seconds, rest = divmod(micros, 1_000_000)
            value = {"seconds": seconds, "nanos": rest * 1000}
        elif kind == "wrapper":
            value = {"value": value}
        fields[name] = value
    return cls(**fields)


@st.composite
def proto_tables(draw: st.DrawFn) -> tuple[list[str], int, TableSchema, list[list[Any]]]:
    """Field kinds, where the message sits, a table schema against it, and field values."""
    kinds = draw(st.lists(st.sampled_from(sorted(FIELD_KINDS)), min_size=1, max_size=5))
    placement = draw(st.integers(0, 2))
    table = table_against(
        draw, [(f"f{n}_{kind}", FIELD_KINDS[kind][4]) for n, kind in enumerate(kinds, start=1)]
    )
    values = st.tuples(*(FIELD_KINDS[k][3] for k in kinds)).map(list)
    records = draw(st.lists(values, min_size=MIN_PER_SCHEMA, max_size=PER_SCHEMA))
    return kinds, placement, table, records


def _damage(value: bytes, how: int) -> bytes:
    if how == 1:
        return value[:-1]  # cut short: at a field boundary still a message
    if how == 2:
        return value + b"\x02"  # a tag of field 0: not a message
    if how == 3:
        return b"\x01" + value[1:]
    if how == 4:
        return b"\x00" + struct.pack(">I", 10_000_000) + value[5:]
    if how == 5:  # message index 9 at the top level: no such message
        header = SchemaId("PROTOBUF")
        buffer = io.BytesIO(value)
        header.from_bytes(buffer)
        return value[:5] + b"\x02\x12" + buffer.read()
    return value


def _fields(message: Message) -> dict[str, Any]:
    """confluent's message as plain fields, read straight off the message (not through the
    product's conversion): what each column must hold."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out[field.name] = dict(value)
        elif field.is_repeated:
            out[field.name] = list(value)
        elif field.type == FieldDescriptor.TYPE_ENUM:
            out[field.name] = field.enum_type.values_by_number[value].name
        elif field.type == FieldDescriptor.TYPE_BYTES:
            out[field.name] = base64.b64encode(value).decode("ascii")
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        elif field.message_type is not None and field.message_type.name == "Timestamp":
            out[field.name] = value.ToDatetime(tzinfo=UTC)
        elif field.message_type is not None:
            out[field.name] = value.value  # Int64Value
        else:
            out[field.name] = value
    return out


def test_protobuf_records_get_one_verdict_from_every_decoder(
    spark: SparkSession, schema_registry: str
) -> None:
    client = SchemaRegistryClient({"url": schema_registry})
    cases: list[tuple[str, type[Message], TableSchema, list[tuple[bytes, int]]]] = []
    budget = [RECORDS]

    @settings(
        max_examples=max(RECORDS // 6, 10),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        proto_tables(), st.lists(st.sampled_from([0] * 6 + [1, 2, 3, 4, 5]), min_size=PER_SCHEMA)
    )
    def generate(
        table: tuple[list[str], int, TableSchema, list[list[Any]]], damage: list[int]
    ) -> None:
        if budget[0] <= 0:
            return
        kinds, placement, schema, records = table
        topic = f"genpb-{len(cases)}"
        cls, names = _file(kinds, placement, len(cases))
        write = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        ctx = SerializationContext(topic, MessageField.VALUE)
        out = []
        for values, how in zip(records, damage, strict=False):
            out.append((_damage(write(_message(cls, kinds, names, values), ctx), how), how))
        budget[0] -= len(out)
        cases.append((topic, cls, schema, out))

    generate()
    settings_ = RegistrySettings(schema_registry)
    tally: Counter[str] = Counter()
    for topic, cls, table, records in cases:
        schema = TableSchema(table.columns, format=PayloadFormat(Format.PROTOBUF, settings_))
        read = ProtobufDeserializer(cls, {"use.deprecated.format": False}, client)
        ctx = SerializationContext(topic, MessageField.VALUE)
        judge_alike(
            spark,
            schema,
            topic,
            records,
            lambda value, read=read, ctx=ctx: _fields(read(value, ctx)),
            tally,
            damaged_may_be_rows=True,
            reader_refuses_bad_bytes=True,
        )
    judged = sum(tally.values())
    print(f"[differential-protobuf] {judged} records in {len(cases)} schemas judged alike: {tally}")
    assert tally.get("row", 0) > judged // 10 and judged - tally.get("row", 0) > judged // 10
    for verdict in ("BadFraming", "UnknownSchemaId", "DecodeError"):
        assert tally[verdict] > 0, tally
