r"""Decode Kafka record values into table columns by :mod:`core.contract`'s rules; a record that
cannot be stored comes back with an error class for the dead-letter topic, never dropped. Pure
(a framed value's writer schema never changes once registered), so a re-read range sorts the
same records the same way and a re-sent chunk equals its first attempt.

Three paths, one verdict; whatever a fast path refuses takes the next one:

* :func:`decode_json` judges one record at a time: the reference;
* :func:`decode_json_arrow` parses a chunk with Arrow, answering only where it can prove the
  reference would agree;
* :func:`native_payload` lets ClickHouse parse the JSON, which is more lenient than the contract
  (chDB 26.9 takes ``"1"`` into an Int, wraps ``300`` into Int8, takes ``+1``, ``\q``, raw control
  characters, two objects on a line...). So it must agree or refuse: per schema
  (:func:`native_plan`), per chunk (byte scans) and per row in the adapter's SQL (every value
  re-checked as its raw token; a miss makes the INSERT throw before it writes).

Framed values (Avro, Protobuf, JSON Schema): Confluent's header, read by confluent-kafka, the
payload by fastavro or protobuf (no codec by hand), judged as a JSON object (:func:`plain`). An
unreachable registry raises :class:`RegistryUnavailableError`, never a verdict.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import mmap
import re
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Protocol

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
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
    INT_RANGES,
    TOMBSTONE_VERDICT,
    Contract,
    ErrorClass,
    FieldRule,
    Verdict,
    compile_contract,
    judge,
    judge_object,
    parse_object,
)
from eos_pipeline.core.errors import Transient
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import Format, SchemaError, SourceColumns, TableSchema


@dataclass(frozen=True, slots=True)
class BadRecord:
    index: int
    error_class: ErrorClass
    message: str


@dataclass
class Decoded:
    """Columns of the good records (``index`` maps each row back to its input position)."""

    columns: dict[str, list[Any]]
    index: list[int] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)


def decode_json(values: Sequence[bytes | None], schema: TableSchema) -> Decoded:
    """The reference: each JSON value judged by the contract."""
    if schema.format.kind.framed:
        raise ValueError(f"decode_json cannot read {schema.format.kind.value} values")
    contract = compile_contract(schema)
    return collect(values, contract, lambda raw: judge(raw, contract))


def collect(
    values: Sequence[bytes | None],
    contract: Contract,
    verdict_of: Callable[[bytes | None], Verdict],
) -> Decoded:
    """Verdicts gathered into columns and bad records: the one shape every decoder returns."""
    out = Decoded(columns={name: [] for name in contract.names})
    cols = [out.columns[name] for name in contract.names]
    for i, raw in enumerate(values):
        verdict = verdict_of(raw)
        if verdict.row is None:
            assert verdict.error_class is not None
            out.bad.append(BadRecord(i, verdict.error_class, verdict.message))
            continue
        for column, value in zip(cols, verdict.row, strict=True):
            column.append(value)
        out.index.append(i)
    return out


# ---- the bulk path --------------------------------------------------------------------------

# The types both fast paths (Arrow's JSON reader, ClickHouse's parser) read as the reference does,
# with the same values (Float32 may round differently parsed straight to float32; times, decimals
# and nested types differ), by the kind ClickHouse checks their tokens as.
_FAST_KINDS = {
    **dict.fromkeys(INT_RANGES, "int"),
    "Float64": "float",
    "Bool": "bool",
    "String": "string",
}
_ARROW_TYPES = {name: pa.type_for_alias(name.lower()) for name in _FAST_KINDS}
# A surrogate escape that is not half of a pair (``\\ud83d\\ude00`` is fine): the reference
# refuses the record, Arrow's reader would not.
_SURROGATE_ESCAPE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]"
)
# Parsed on the calling thread: Arrow's pool cost ~0.45 CPU-s per 160 MB instead of ~0.35, and
# was no faster with both cores busy (benchmarks/README.md, issue 15).
_ARROW_BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class _ArrowPlan:
    schema: pa.Schema
    # per column: the default for a missing or null value (None: NULL), and whether NULL may stay
    fills: tuple[tuple[str, pa.Scalar | None, bool], ...]


@functools.lru_cache(maxsize=64)
def _arrow_plan(schema: TableSchema) -> _ArrowPlan | None:
    columns = []
    fills = []
    for rule in compile_contract(schema).fields:
        arrow_type = _ARROW_TYPES.get(rule.base)
        if arrow_type is None:
            return None
        fill = None
        if rule.has_default:
            try:
                fill = pa.scalar(rule.default, arrow_type)
            except (pa.ArrowException, ValueError, TypeError, OverflowError):
                return None
        columns.append(pa.field(rule.name, arrow_type))
        fills.append((rule.name, fill, rule.nullable))
    return _ArrowPlan(pa.schema(columns), tuple(fills))


def json_lines(values: Sequence[bytes | None]) -> bytes | None:
    """The values joined by newlines if each is ``{...}`` in valid UTF-8 without an unpaired
    surrogate escape, else None. A value holding a line break then fails to parse or yields more
    rows, which the callers' row counts catch."""
    if not values:
        return None
    try:
        data = b"\n".join(values)  # type: ignore[arg-type]
    except TypeError:
        return None  # a tombstone (None)
    if not lines_framed(values, data):
        return None
    if unpaired_surrogate(data):
        return None  # a \\uD8xx-\\uDFxx escape may be unpaired: the reference judges it
    # Arrow's JSON reader and ClickHouse copy invalid UTF-8 into strings unchecked; the reference
    # refuses the record (a dead letter), so only valid UTF-8 may go on.
    if not data.isascii() and not _valid_utf8(data):
        return None
    return data


def lines_framed(values: Sequence[bytes | None], data: bytes | mmap.mmap) -> bool:
    """Each value (no tombstone) is ``{...}``, checked at the joins of ``data`` (the values joined
    by newlines)."""
    try:
        lengths = np.fromiter(map(len, values), np.int64, len(values))  # type: ignore[arg-type]
    except TypeError:
        return False  # a tombstone (None)
    if lengths.min() < 2 or int(lengths.sum()) + len(values) - 1 != len(data):
        return False
    last = np.cumsum(lengths + 1) - 2  # position of each value's last byte in ``data``
    raw = np.frombuffer(data, np.uint8)
    return bool((raw[last] == ord("}")).all() and (raw[last - lengths + 1] == ord("{")).all())


def unpaired_surrogate(data: bytes | mmap.mmap) -> bool:
    """True when ``data`` may hold a surrogate escape that is not half of a pair."""
    # ``\\`` first: a one-byte search is many times faster than a three-byte one
    if data.find(b"\\") < 0 or (data.find(b"\\ud") < 0 and data.find(b"\\uD") < 0):
        return False
    return _SURROGATE_ESCAPE.search(data) is not None


def decode_json_arrow(values: Sequence[bytes | None], schema: TableSchema) -> pa.Table | None:
    """The payload columns of every record as one Arrow table, or None (never a verdict): some
    record needs the reference's judgement."""
    if schema.format.kind.framed:
        return None  # Avro/Protobuf/JSON Schema: judged per record (adapters.registry)
    plan = _arrow_plan(schema)
    if plan is None:
        return None
    data = json_lines(values)
    if data is None:
        return None
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=_ARROW_BLOCK_BYTES),
            parse_options=pa_json.ParseOptions(
                explicit_schema=plan.schema,
                unexpected_field_behavior="ignore",
                newlines_in_values=False,
            ),
        )
    except (pa.ArrowException, ValueError):
        return None  # invalid JSON, a wrong type, a duplicate key, bad UTF-8, out of range
    if table.num_rows != len(values):
        return None  # some line held two objects (`{...} {...}`), which the reference refuses
    columns = []
    for name, fill, nullable in plan.fills:
        column = table.column(name)
        if column.null_count:
            if fill is not None:
                column = column.fill_null(fill)
            elif not nullable:
                return None  # a required field is missing or null: a dead letter
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=plan.schema).combine_chunks()


def add_source_columns(
    payload: pa.Table,
    source: SourceColumns,
    tp: TopicPartition,
    offsets: Sequence[int],
    timestamps_ms: Sequence[int],
    topic: str | None = None,
) -> pa.Table:
    """``payload`` plus where each row came from; ``topic`` overrides the stored name (clustered:
    ``<cluster>:<topic>``). Timestamps in ms, UTC: no seconds-or-milliseconds ambiguity."""
    count = payload.num_rows
    if len(offsets) != count or len(timestamps_ms) != count:
        raise ValueError(
            f"{count} rows but {len(offsets)} offsets and {len(timestamps_ms)} timestamps"
        )
    arrays: list[pa.Array] = [
        pa.array([tp.topic if topic is None else topic], pa.string()).take(
            np.zeros(count, dtype=np.int32)
        ),
        pa.array(np.full(count, tp.partition, dtype=np.int32)),
        pa.array(offsets, pa.int64()),
    ]
    names = [source.topic, source.partition, source.offset]
    if source.timestamp is not None:
        arrays.append(pa.array(timestamps_ms, pa.timestamp("ms", tz="UTC")))
        names.append(source.timestamp)
    for name, array in zip(names, arrays, strict=True):
        payload = payload.append_column(name, array)
    return payload


#: The header's length before any Protobuf message indexes: magic byte + 4-byte id.
HEADER_BYTES = 5


class RegistryUnavailableError(Transient):
    """The registry could not be reached or answered 5xx: retried, never a dead letter."""

    code = "registry-unavailable"


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """A registered schema by its ``schemaType``: Avro or JSON Schema text, or a base64
    ``FileDescriptorProto`` with the files it imports, each after its own imports."""

    schema_type: str
    text: str
    dependencies: tuple[str, ...] = ()


class WriterSchemas(Protocol):
    def get(self, schema_id: int) -> WriterSchema | None:
        """None: no such id; :class:`RegistryUnavailableError`: the registry cannot answer."""
        ...


@dataclass(frozen=True, slots=True)
class Frame:
    schema_id: int
    message_indexes: tuple[int, ...]  # (0,) when there are none (Avro, JSON Schema)
    payload: bytes


@functools.cache
def _schema_id_reader() -> Any:
    """confluent-kafka's header reader, imported on first use: its package also loads the
    registry's HTTP client (~0.25 CPU-s of every process that loads the code location), which
    a JSON pipeline never needs."""
    from confluent_kafka.schema_registry.common.serde import SchemaId

    return SchemaId


def read_frame(raw: bytes, kind: Format) -> Frame | str:
    """The Confluent header of ``raw`` and the payload after it, or the ``BadFraming`` message."""
    if len(raw) < HEADER_BYTES:
        return f"{len(raw)} bytes, shorter than the {HEADER_BYTES}-byte Confluent header"
    if raw[0] != 0:
        return f"magic byte {raw[0]}, expected 0 (not in the Confluent wire format)"
    header = _schema_id_reader()(kind.schema_type)
    buffer = io.BytesIO(raw)
    try:
        header.from_bytes(buffer)
    except (SerializationError, EOFError, struct.error, ValueError) as exc:
        return f"bad Protobuf message indexes after schema id: {exc}"
    indexes = tuple(header.message_indexes or (0,))
    if any(i < 0 for i in indexes):
        return f"negative Protobuf message index in {list(indexes)}"
    return Frame(int(header.id), indexes, buffer.read())


# ---- values ---------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A decoded value as the JSON-like value the contract's converters take (bytes as base64,
    dates and times as ISO-8601, UUIDs as text)."""
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
#: The wrapper messages read as their value, with the column type each becomes.
PROTO_WRAPPERS = {
    "google.protobuf.DoubleValue": "Float64",
    "google.protobuf.FloatValue": "Float32",
    "google.protobuf.Int64Value": "Int64",
    "google.protobuf.UInt64Value": "UInt64",
    "google.protobuf.Int32Value": "Int32",
    "google.protobuf.UInt32Value": "UInt32",
    "google.protobuf.BoolValue": "Bool",
    "google.protobuf.StringValue": "String",
    "google.protobuf.BytesValue": "String",
}


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
def proto_class(writer: WriterSchema, indexes: tuple[int, ...]) -> type[Message]:
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


def proto_message_index(writer: WriterSchema, name: str) -> int:
    _pool, proto = _proto_file(writer.text, writer.dependencies)
    names = [m.name for m in proto.message_type]
    short = name.rsplit(".", 1)[-1]
    if short not in names:
        raise SchemaError(f"the Protobuf schema has no top-level message {name!r} (has {names})")
    return names.index(short)


def _proto_fields(message: Message) -> dict[str, Any]:
    descriptor: Descriptor = message.DESCRIPTOR
    out: dict[str, Any] = {}
    for fd in descriptor.fields:
        value = getattr(message, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_field = fd.message_type.fields_by_name["value"]
            out[fd.name] = {str(k): _proto_value(value_field, v) for k, v in value.items()}
        elif fd.is_repeated:
            out[fd.name] = [_proto_value(fd, v) for v in value]
        elif fd.has_presence and not message.HasField(fd.name):
            out[fd.name] = None  # an unset optional, oneof member or message: null
        else:
            out[fd.name] = _proto_value(fd, value)
    return out


def _proto_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name == "google.protobuf.Timestamp":
            return value.ToJsonString()
        if name in PROTO_WRAPPERS:
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
    if raw is None:
        return TOMBSTONE_VERDICT
    frame = read_frame(raw, kind)
    if isinstance(frame, str):
        return Verdict(None, ErrorClass.BAD_FRAMING, frame)
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
            proto = proto_class(writer, frame.message_indexes)
            obj = _proto_fields(proto.FromString(frame.payload))
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
    """The writer schema ids ``values`` name, first seen first, with their first record's message
    indexes; badly framed values are dead letters whatever the schema."""
    found: dict[int, tuple[int, ...]] = {}
    for raw in values:
        if raw is None:
            continue
        frame = read_frame(raw, kind)
        if isinstance(frame, Frame) and frame.schema_id not in found:
            found[frame.schema_id] = frame.message_indexes
    return found


def decode_framed(
    values: Sequence[bytes | None], schema: TableSchema, schemas: WriterSchemas
) -> Decoded:
    contract = compile_contract(schema)
    kind = schema.format.kind
    return collect(values, contract, lambda raw: judge_framed(raw, kind, contract, schemas))


# A backslash escape JSON does not have; ``\\u`` must be followed by four hex digits.
_BAD_ESCAPE = re.compile(rb'\\(?:[^"\\/bfnrtu]|u(?![0-9a-fA-F]{4}))')


@dataclass(frozen=True, slots=True)
class NativeColumn(FieldRule):
    """How ClickHouse reads one payload column: a ``string`` as a String (which refuses every
    other token); ``int``, ``float``, ``bool`` as ``Dynamic``, checked by token type and range."""

    kind: str
    low: int | None
    high: int | None


@dataclass(frozen=True, slots=True)
class NativePlan:
    columns: tuple[NativeColumn, ...]


@functools.lru_cache(maxsize=64)
def native_plan(schema: TableSchema) -> NativePlan | None:
    """How ClickHouse parses ``schema``'s payload, or None for a column type whose leniency is not
    closed (Float32 rounding, dates, times, decimals, UUIDs, IPs, FixedString, containers)."""
    if schema.format.kind.framed:
        return None  # ClickHouse parses JSON lines only; framed values are decoded per record
    columns = []
    for rule in compile_contract(schema).fields:
        kind = _FAST_KINDS.get(rule.base)
        if kind is None or rule.name.startswith("__eos"):  # the SQL's own names
            return None
        low, high = INT_RANGES[rule.base] if kind == "int" else (None, None)
        of_rule = {f.name: getattr(rule, f.name) for f in fields(FieldRule)}
        columns.append(NativeColumn(**of_rule, kind=kind, low=low, high=high))
    return NativePlan(tuple(columns))


@dataclass(frozen=True, slots=True)
class NativeRows:
    """One offset and Kafka timestamp per JSON line of a chunk."""

    source: SourceColumns
    topic: str
    partition: int
    offsets: Sequence[int]
    timestamps_ms: Sequence[int]


@dataclass(frozen=True, slots=True)
class NativePayload:
    """A chunk's ``quoted``: its count of ``:"`` and ``: "``. Each JSON string value adds exactly
    one (two spaces after a ``:`` and control bytes are refused; a quote in a string is escaped),
    so only a string ending in ``:`` adds more. The INSERT requires it to equal the non-null
    values of String columns: then no other column got a quoted value, and no String column an
    unquoted one."""

    quoted: int


def native_payload(values: Sequence[bytes | None], data: bytes | mmap.mmap) -> NativePayload | None:
    """Whether ClickHouse's parser may read ``data``, the values joined by newlines as the caller
    wrote them for it (a memory map spares a 40 MB join), or None (never a verdict)."""
    if not values or not lines_framed(values, data):
        return None
    raw = np.frombuffer(data, np.uint8)
    scan = _scan(raw)
    # The joins are the only control bytes: each value is one line, and no string holds a raw
    # control character (JSON forbids them, ClickHouse keeps them). As signed bytes, everything
    # beyond ASCII is below 0x20 too: one count proves both, the common case.
    if scan.controls != len(values) - 1:
        if _count(raw, np.less, 0x20) != len(values) - 1:
            return None
        if not _valid_utf8(data):
            return None
    if data.find(b"\\") >= 0 and (_BAD_ESCAPE.search(data) or unpaired_surrogate(data)):
        return None
    if scan.two_spaces:
        return None  # a value after two spaces would escape the count of quoted values
    return NativePayload(scan.quoted)


@dataclass(frozen=True, slots=True)
class _Scan:
    controls: int  # bytes below 0x20 as signed bytes: control characters and all beyond ASCII
    quoted: int  # colons followed by a quote, or by one space and a quote
    two_spaces: bool  # a colon followed by two spaces


def _scan(raw: np.ndarray) -> _Scan:
    """The chunk's byte counts in one pass, a block at a time (a block stays in the cache for
    both looks; a pass per count, as before, cost ~1.9x the CPU)."""
    signed = raw.view(np.int8)
    buf = np.empty(min(_BLOCK, raw.size), bool)
    controls = quoted = 0
    two_spaces = False
    end = raw.size - 2  # a colon in the last two bytes is followed by no value
    for start in range(0, raw.size, _BLOCK):
        out = buf[: min(_BLOCK, raw.size - start)]
        np.less(signed[start : start + _BLOCK], 0x20, out=out)
        controls += int(np.count_nonzero(out))
        np.equal(raw[start : start + _BLOCK], ord(":"), out=out)
        colons = np.flatnonzero(out) + start
        colons = colons[colons < end]
        after = raw[colons + 1]
        quoted += int(np.count_nonzero(after == ord('"')))
        space = after == ord(" ")
        if space.any():
            second = raw[colons[space] + 2]
            quoted += int(np.count_nonzero(second == ord('"')))
            two_spaces = two_spaces or bool((second == ord(" ")).any())
    return _Scan(controls, quoted, two_spaces)


def _valid_utf8(data: bytes | mmap.mmap) -> bool:
    try:
        str(data, "utf-8")
    except UnicodeDecodeError:
        return False
    return True


#: Scans reuse one small buffer: a chunk-sized temporary costs more in fresh pages than the scan.
_BLOCK = 1 << 20


def _count(values: np.ndarray, compare: np.ufunc, operand: int, block: int = _BLOCK) -> int:
    """How many of ``values`` ``compare`` true against ``operand``, a block at a time."""
    buf = np.empty(min(block, values.size), bool)
    count = 0
    for start in range(0, values.size, block):
        part = values[start : start + block]
        out = buf[: part.size]
        compare(part, operand, out=out)
        count += int(np.count_nonzero(out))
    return count
