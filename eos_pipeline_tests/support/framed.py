"""Avro and Protobuf test records, written by confluent-kafka's own serializers.

One logical record shape (``Order``) in both formats, the serializers bound to a registry
client (a ``mock://`` one for unit tests, the stack's Apicurio for integration tests), and the
bad values of every kind the contract names for framed formats.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

#: The payload columns both formats fill.
ORDER_COLUMNS = {
    "id": "Int64",
    "customer": "String",
    "amount": "Float64",
    "qty": "Int32",
    "paid": "Bool",
    "note": "Nullable(String)",
    "tags": "Array(String)",
}

AVRO_ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "eos.test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "qty", "type": "long"},  # long: a value above Int32 is a TypeMismatch
            {"name": "paid", "type": "boolean"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
)


def order(i: int) -> dict[str, Any]:
    """The ``i``-th logical record (a value per column, as the tables must hold it)."""
    return {
        "id": i,
        "customer": f"c-{i % 7}-é",
        "amount": i * 1.25,
        "qty": i % 50,
        "paid": i % 2 == 0,
        "note": None if i % 3 else f"n{i}",
        "tags": [f"t{j}" for j in range(i % 3)],
    }


def _order_proto() -> Any:
    """``eos.test.Order`` (nested in a wrapper file so message indexes are not just [0])."""
    fdp = descriptor_pb2.FileDescriptorProto(name="eos_order.proto", package="eos.test")
    fdp.syntax = "proto3"
    fdp.message_type.add(name="Other").field.add(name="x", number=1, type=9, label=1)
    msg = fdp.message_type.add(name="Order")
    f = descriptor_pb2.FieldDescriptorProto
    msg.field.add(name="id", number=1, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    msg.field.add(name="customer", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    msg.field.add(name="amount", number=3, type=f.TYPE_DOUBLE, label=f.LABEL_OPTIONAL)
    msg.field.add(name="qty", number=4, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    msg.field.add(name="paid", number=5, type=f.TYPE_BOOL, label=f.LABEL_OPTIONAL)
    note = msg.field.add(name="note", number=6, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    note.proto3_optional = True
    note.oneof_index = 0
    msg.oneof_decl.add(name="_note")
    msg.field.add(name="tags", number=7, type=f.TYPE_STRING, label=f.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("eos.test.Order"))


ProtoOrder = _order_proto()


def proto_order(i: int) -> Any:
    values = {k: v for k, v in order(i).items() if v is not None}
    return ProtoOrder(**values)


def serializer(client: SchemaRegistryClient, fmt: str, topic: str) -> Callable[[Any], bytes]:
    """Records of ``fmt`` (``avro``: dicts, ``protobuf``: ``ProtoOrder``) to framed bytes."""
    ctx = SerializationContext(topic, MessageField.VALUE)
    if fmt == "avro":
        avro = AvroSerializer(client, AVRO_ORDER)
        return lambda record: avro(record, ctx)
    proto = ProtobufSerializer(ProtoOrder, client, {"use.deprecated.format": False})
    return lambda record: proto(record, ctx)


def framed_values(client: SchemaRegistryClient, fmt: str, topic: str, count: int) -> list[bytes]:
    write = serializer(client, fmt, topic)
    make = order if fmt == "avro" else proto_order
    return [write(make(i)) for i in range(count)]


def bad_values(
    client: SchemaRegistryClient, fmt: str, topic: str
) -> list[tuple[bytes | None, str]]:
    """One value of each bad kind for ``fmt``, with the error class the contract gives it."""
    good = serializer(client, fmt, topic)(order(1) if fmt == "avro" else proto_order(1))
    header = good[:5]
    schema_id = struct.unpack(">I", good[1:5])[0]
    unknown = b"\x00" + struct.pack(">I", schema_id + 100_000) + good[5:]
    big = dict(order(2), qty=1 << 40)
    too_big = serializer(client, fmt, topic)(big if fmt == "avro" else ProtoOrder(**_some(big)))
    bad: list[tuple[bytes | None, str]] = [
        (b"\x01" + good[1:], "BadFraming"),  # magic byte 1
        (b"\x00\x00\x01", "BadFraming"),  # shorter than the header
        (b'{"id": 1}', "BadFraming"),  # plain JSON on a framed topic
        (unknown, "UnknownSchemaId"),
        (too_big, "TypeMismatch"),  # qty does not fit Int32
        (None, "Tombstone"),
    ]
    if fmt == "avro":
        bad += [
            (good[:-2], "DecodeError"),  # truncated: the record does not fit its schema
            (good + b"\x00\x00", "DecodeError"),  # bytes after the record
            (header + b"\x02\xff\xfe", "DecodeError"),
        ]
    else:
        bad += [
            (header + b"\x02\x00\x0a\x05ab", "DecodeError"),  # a string field cut short
            (header + b"\x02\x0a\x0a\x01x", "DecodeError"),  # message index 5: no such message
        ]
    return bad


def _some(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if v is not None}
