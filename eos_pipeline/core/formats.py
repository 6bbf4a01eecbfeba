"""Framed formats of the decoder contract: Avro, Protobuf and JSON Schema behind a registry.

A framed value is Confluent's wire format: magic byte ``0``, the writer schema's id as 4 bytes
big-endian, for Protobuf the message indexes (zigzag varints naming the message inside the
schema's file), then the payload. The header is read once, here, with confluent-kafka's own
reader (:class:`SchemaId`); the payload is decoded by fastavro, protobuf's runtime or the JSON
rules of :mod:`core.contract`: no codec is written by hand.

Each decoded record becomes the JSON-like values a JSON object would carry (see
:func:`plain`), so :func:`core.contract.judge_object` judges its fields with exactly the rules
of a JSON pipeline. Verdicts depend only on the bytes and on the writer schema of the id in
the header, which never changes once registered: re-reading a range gives the same verdicts.
The schemas are fetched through a :class:`WriterSchemas` (``adapters.registry``); one that
cannot reach the registry raises :class:`RegistryUnavailableError`, which is never a verdict.
Pure: no I/O of its own.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import re
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Protocol

import fastavro
from confluent_kafka.schema_registry.common.serde import SchemaId
from confluent_kafka.serialization import SerializationError
from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    json_format,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from eos_pipeline.core.contract import (
    TOMBSTONE_VERDICT,
    Contract,
    ErrorClass,
    Verdict,
    compile_contract,
    judge_object,
    parse_object,
)
from eos_pipeline.core.decode import Decoded, collect
from eos_pipeline.core.errors import Transient
from eos_pipeline.core.payload_format import Format
from eos_pipeline.core.schema import SchemaError, TableSchema

#: The header's length before any Protobuf message indexes: magic byte + 4-byte id.
HEADER_BYTES = 5


class RegistryUnavailableError(Transient):
    """The registry could not be reached or answered 5xx: transient, never a dead letter
    (``core.retries`` decides by the class: the sensor asks for the run again after a backoff).
    """

    code = "registry-unavailable"


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """A registered schema as the registry returns it for an id."""

    #: ``AVRO``, ``PROTOBUF`` or ``JSON`` (the registry's ``schemaType``).
    schema_type: str
    #: Avro: the schema's JSON; Protobuf: a serialized ``FileDescriptorProto``, base64; JSON
    #: Schema: its JSON.
    text: str
    #: Protobuf only: the files it imports (serialized, base64), each after its own imports.
    dependencies: tuple[str, ...] = ()


class WriterSchemas(Protocol):
    def get(self, schema_id: int) -> WriterSchema | None:
        """The schema registered under ``schema_id``; None when the registry has no such id.

        Raises :class:`RegistryUnavailableError` when the registry cannot answer.
        """
        ...


@dataclass(frozen=True, slots=True)
class Frame:
    schema_id: int
    message_indexes: tuple[int, ...] | None
    payload: bytes


def read_frame(raw: bytes, kind: Format) -> Frame | str:
    """The Confluent header of ``raw`` and the payload after it, or the ``BadFraming`` message."""
    if len(raw) < HEADER_BYTES:
        return f"{len(raw)} bytes, shorter than the {HEADER_BYTES}-byte Confluent header"
    if raw[0] != 0:
        return f"magic byte {raw[0]}, expected 0 (not in the Confluent wire format)"
    header = SchemaId(kind.schema_type)
    buffer = io.BytesIO(raw)
    try:
        header.from_bytes(buffer)
    except (SerializationError, EOFError, struct.error, ValueError) as exc:
        return f"bad Protobuf message indexes after schema id: {exc}"
    indexes = None if header.message_indexes is None else tuple(header.message_indexes)
    if indexes is not None and any(i < 0 for i in indexes):
        return f"negative Protobuf message index in {list(indexes)}"
    return Frame(int(header.id), indexes, buffer.read())


# ---- values ---------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A decoded value as the JSON-like value the contract's converters take.

    Records and maps become dicts, arrays lists; bytes become base64 text; dates, times and
    timestamps ISO-8601 text (a timestamp with its UTC offset); UUIDs text; decimals stay
    ``Decimal``. Numbers, strings, booleans and null are kept as they are.
    """
    kind = type(value)
    if value is None or kind in (str, int, float, bool, Decimal):
        return value
    if kind is dict:
        return {k: plain(v) for k, v in value.items()}
    if kind is list:
        return [plain(v) for v in value]
    if kind is bytes:
        return base64.b64encode(value).decode("ascii")
    if kind in (datetime, date, time):
        return value.isoformat()
    if kind is uuid.UUID:
        return str(value)
    return value


# ---- Avro -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _avro_schema(text: str) -> Any:
    return fastavro.parse_schema(json.loads(text))


def decode_avro(writer: WriterSchema, payload: bytes) -> dict[str, Any]:
    """The record in ``payload`` under its writer schema; raises when the bytes do not fit."""
    buffer = io.BytesIO(payload)
    record = fastavro.schemaless_reader(buffer, _avro_schema(writer.text), None)
    left = len(payload) - buffer.tell()
    if left:
        raise ValueError(f"{left} bytes left after the record")
    if type(record) is not dict:
        raise ValueError(f"the writer schema is not a record (decoded {type(record).__name__})")
    return plain(record)


# ---- Protobuf -------------------------------------------------------------------------------

#: Files every Protobuf schema may import without the registry naming them as references.
_WELL_KNOWN = (any_pb2, duration_pb2, empty_pb2, struct_pb2, timestamp_pb2, wrappers_pb2)
_WRAPPERS = frozenset(
    f"google.protobuf.{n}Value"
    for n in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)


@functools.lru_cache(maxsize=256)
def _proto_file(
    text: str, dependencies: tuple[str, ...]
) -> tuple[descriptor_pool.DescriptorPool, descriptor_pb2.FileDescriptorProto]:
    pool = descriptor_pool.DescriptorPool()
    for module in _WELL_KNOWN:
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    for dependency in (*dependencies, text):
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(dependency))
        try:
            pool.FindFileByName(proto.name)
            continue  # a well-known file, or imported twice
        except KeyError:
            pool.Add(proto)
    return pool, proto


@functools.lru_cache(maxsize=1024)
def _proto_class(writer: WriterSchema, indexes: tuple[int, ...]) -> type[Message]:
    pool, proto = _proto_file(writer.text, writer.dependencies)
    names: list[str] = []
    messages = proto.message_type
    for index in indexes:
        if index >= len(messages):
            raise ValueError(f"message index {index} out of range in {list(indexes)}")
        names.append(messages[index].name)
        messages = messages[index].nested_type
    full_name = ".".join(filter(None, [proto.package, *names]))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def proto_descriptor(writer: WriterSchema, indexes: tuple[int, ...]) -> Descriptor:
    """The message a Protobuf writer schema's ``indexes`` name."""
    return _proto_class(writer, indexes).DESCRIPTOR


def proto_message_index(writer: WriterSchema, name: str) -> int:
    """The index of the top-level message ``name`` in a Protobuf writer schema's file."""
    _pool, proto = _proto_file(writer.text, writer.dependencies)
    names = [m.name for m in proto.message_type]
    short = name.rsplit(".", 1)[-1]
    if short not in names:
        raise SchemaError(f"the Protobuf schema has no top-level message {name!r} (has {names})")
    return names.index(short)


def decode_protobuf(
    writer: WriterSchema, indexes: tuple[int, ...], payload: bytes
) -> dict[str, Any]:
    """The message in ``payload`` as a field mapping (every declared field present)."""
    message = _proto_class(writer, indexes or (0,)).FromString(payload)
    return _proto_fields(message)


def _proto_fields(message: Message) -> dict[str, Any]:
    descriptor: Descriptor = message.DESCRIPTOR
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {str(k): _proto_value(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_proto_value(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None  # an unset optional, oneof member or message: null
        else:
            out[field.name] = _proto_value(field, value)
    return out


def _proto_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name == "google.protobuf.Timestamp":
            return value.ToJsonString()
        if name in _WRAPPERS:
            return _proto_value(field.message_type.fields_by_name["value"], value.value)
        if name.startswith("google.protobuf."):
            return json_format.MessageToDict(value)
        return _proto_fields(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        symbol = field.enum_type.values_by_number.get(value)
        return symbol.name if symbol is not None else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


# ---- the verdict ----------------------------------------------------------------------------


#: An object's default repr (``<_io.BytesIO object at 0x7f...>``): its address differs from one
#: process to the next, and a verdict's message must not.
_OBJECT_REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")


def _said(exc: Exception) -> str:
    """What a decoder's exception says, the same for the same bytes in every process."""
    text = _OBJECT_REPR.sub("the payload", str(exc))[:160]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def judge_framed(
    raw: bytes | None, kind: Format, contract: Contract, schemas: WriterSchemas
) -> Verdict:
    """Apply the contract to one framed value (size is judged first, by the caller)."""
    if raw is None:
        return TOMBSTONE_VERDICT
    frame = read_frame(raw, kind)
    if type(frame) is str:
        return Verdict(None, ErrorClass.BAD_FRAMING, frame)
    assert isinstance(frame, Frame)
    writer = schemas.get(frame.schema_id)  # raises RegistryUnavailableError: no verdict
    if writer is None:
        return Verdict(
            None,
            ErrorClass.UNKNOWN_SCHEMA_ID,
            f"schema id {frame.schema_id} is not in the registry (it answered 404)",
        )
    if writer.schema_type != kind.schema_type:
        return Verdict(
            None,
            ErrorClass.DECODE_ERROR,
            f"schema id {frame.schema_id} is a {writer.schema_type} schema; this pipeline "
            f"reads {kind.value}",
        )
    try:
        if kind is Format.AVRO:
            obj: dict[str, Any] | str = decode_avro(writer, frame.payload)
        elif kind is Format.PROTOBUF:
            obj = decode_protobuf(writer, frame.message_indexes or (0,), frame.payload)
        else:
            obj = parse_object(frame.payload, contract)
    except Exception as exc:  # any failure to decode these bytes is a verdict on them
        return Verdict(
            None,
            ErrorClass.DECODE_ERROR,
            f"not a value of writer schema id {frame.schema_id}: {_said(exc)}",
        )
    if type(obj) is str:
        return Verdict(None, ErrorClass.DECODE_ERROR, obj)
    return judge_object(obj, contract)  # type: ignore[arg-type]


def writer_ids(values: Sequence[bytes | None], kind: Format) -> dict[int, tuple[int, ...]]:
    """The writer schema ids framed ``values`` name (in the order first seen), each with the
    message indexes of its first record (Protobuf; ``(0,)`` otherwise). Badly framed values are
    left out: they are dead letters whatever the schema."""
    found: dict[int, tuple[int, ...]] = {}
    for raw in values:
        if raw is None:
            continue
        frame = read_frame(raw, kind)
        if isinstance(frame, Frame) and frame.schema_id not in found:
            found[frame.schema_id] = frame.message_indexes or (0,)
    return found


def decode_framed(
    values: Sequence[bytes | None], schema: TableSchema, schemas: WriterSchemas
) -> Decoded:
    """:func:`core.decode.decode_json`'s counterpart for framed formats: same shape, same rules."""
    contract = compile_contract(schema)
    kind = schema.format.kind
    return collect(values, contract, lambda raw: judge_framed(raw, kind, contract, schemas))
