"""Decode Kafka record values into table columns, separating the records that cannot be stored.

Bad records are never dropped and never stop a partition: each is returned with an error class
and message so the sink can send it to the dead-letter topic. Decoding is a pure function of the
bytes and the schema, so re-reading a committed range always sorts the same records the same way,
which keeps a re-sent chunk identical to its first attempt.

Policies:
* a null value (a tombstone) is a bad record of class ``Tombstone``: there is no row to insert;
* a value that is not a JSON object is ``DecodeError``;
* a declared column missing from the object is filled with its default, else NULL when the
  column is nullable, else the record is ``MissingField``;
* a value of the wrong JSON type for its column is ``TypeMismatch``;
* keys that are not declared columns are ignored (schemas evolve upstream first).

Two decoders apply these policies. :func:`decode_json` judges one record at a time in Python and
is the reference. :func:`decode_json_arrow` parses a whole chunk at once with Arrow's JSON reader
(C++, no Python per record) and answers only when it can prove that the reference would have
accepted every record with exactly the same values; otherwise it returns ``None`` and the caller
runs the reference on the chunk. So the bulk path is a pure speed-up: the same bytes always give
the same rows and the same dead letters, whichever path ran (a property test compares the two).
"""

from __future__ import annotations

import functools
import io
import mmap
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from eos_pipeline.core.contract import (
    Contract,
    ErrorClass,
    Verdict,
    compile_contract,
    judge,
    unwrap,
)
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import SourceColumns, TableSchema


@dataclass(frozen=True, slots=True)
class BadRecord:
    index: int  # position in the input sequence
    error_class: ErrorClass
    message: str


@dataclass
class Decoded:
    """Columns of the good records (``index`` maps each row back to its input position)."""

    columns: dict[str, list[Any]]
    index: list[int] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)


def decode_json(values: Sequence[bytes | None], schema: TableSchema) -> Decoded:
    """Judge each value by the contract (:mod:`core.contract`); rows hold canonical values.

    JSON pipelines only: framed formats are decoded by ``adapters.registry.decode_values``.
    """
    if schema.format.kind.framed:
        raise ValueError(f"decode_json cannot read {schema.format.kind.value} values")
    contract = compile_contract(schema)
    return collect(values, contract, lambda raw: judge(raw, contract))


def collect(
    values: Sequence[bytes | None],
    contract: Contract,
    verdict_of: Callable[[bytes | None], Verdict],
) -> Decoded:
    """Each value's verdict (``verdict_of``) gathered into the contract's columns and the bad
    records: the one shape every format's decoder returns."""
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

# Types whose Arrow JSON conversion accepts exactly what the reference accepts, with the same
# value: integers must be JSON integers in range (``1.0``, ``1e3``, ``true`` and ``"1"`` are
# refused by both), Float64 takes integers and decimals, Bool only ``true``/``false``, String only
# JSON strings. Float32 is left out (parsing straight to float32 may round differently from
# parsing to a double first); so are times, decimals and nested types, where ClickHouse parses.
_ARROW_TYPES: dict[str, pa.DataType] = {
    "Int8": pa.int8(),
    "Int16": pa.int16(),
    "Int32": pa.int32(),
    "Int64": pa.int64(),
    "UInt8": pa.uint8(),
    "UInt16": pa.uint16(),
    "UInt32": pa.uint32(),
    "UInt64": pa.uint64(),
    "Float64": pa.float64(),
    "Bool": pa.bool_(),
    "String": pa.string(),
}
# A surrogate escape that is not half of a pair (``\\ud83d\\ude00`` is fine): the reference
# refuses the record, Arrow's reader would not.
_SURROGATE_ESCAPE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]"
)
# Arrow's reader cuts its input into blocks of this size. It parses them on the calling thread:
# on its thread pool the same 160 MB cost ~0.45 CPU-seconds instead of ~0.35 (1 MB blocks on one
# thread were also no slower by the clock with both cores busy, which they are while the next
# batch is read or another partition inserts; measured in benchmarks/README.md, issue 15).
_ARROW_BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class _ArrowPlan:
    schema: pa.Schema
    # Per column: what to put in place of a missing or null value (``None``: leave NULL) and
    # whether a NULL may stay at all.
    fills: tuple[tuple[str, pa.Scalar | None, bool], ...]


@functools.lru_cache(maxsize=64)
def _arrow_plan(schema: TableSchema) -> _ArrowPlan | None:
    """The Arrow schema for ``schema``'s payload, or None when a column needs the reference."""
    contract = compile_contract(schema)
    fields = []
    fills = []
    for col, rule in zip(schema.columns, contract.fields, strict=True):
        arrow_type = _ARROW_TYPES.get(unwrap(col.ch_type)[0])
        if arrow_type is None:
            return None
        fill = None
        if rule.has_default:
            # The contract's canonical default, as the reference fills it in.
            try:
                fill = pa.scalar(rule.default, arrow_type)
            except (pa.ArrowException, ValueError, TypeError, OverflowError):
                return None
        fields.append(pa.field(col.name, arrow_type))
        fills.append((col.name, fill, rule.nullable))
    return _ArrowPlan(pa.schema(fields), tuple(fills))


def json_lines(values: Sequence[bytes | None]) -> bytes | None:
    """The values joined by newlines, if each is ``{...}`` in valid UTF-8 without an unpaired
    surrogate escape; else None (a per-record judgement is needed). Bulk scans only.

    Every value must start with ``{`` and end with ``}`` (checked at the joins, in bulk). Then
    each value is at least one non-empty line, so at least one row for a JSON-lines reader, and
    a value that holds a newline or carriage return either fails to parse (a line cut
    mid-object) or yields more rows (`{...}\\n{...}`): the callers' row count checks catch both.
    """
    count = len(values)
    if count == 0:
        return None
    try:
        data = b"\n".join(values)  # type: ignore[arg-type]
    except TypeError:
        return None  # a tombstone (None)
    if not lines_framed(values, data):
        return None
    if unpaired_surrogate(data):
        return None  # a \\uD8xx-\\uDFxx escape may be unpaired: the reference judges it
    if not data.isascii():
        # Arrow's JSON reader and ClickHouse copy invalid UTF-8 into strings unchecked; the
        # reference refuses the record (a dead letter), so only valid UTF-8 may go on.
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return data


def lines_framed(values: Sequence[bytes | None], data: bytes | mmap.mmap) -> bool:
    """True when each of ``values`` (no tombstone) is at least ``{}`` long and starts with ``{``
    and ends with ``}``, checked at the joins of ``data``, their newline-joined bytes."""
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
    """The payload columns of every record as one Arrow table, or None to use the reference.

    None means "some record needs a per-record judgement" (a dead letter, a shape Arrow reads
    differently, a type not mapped), never that the chunk is bad: the caller then runs
    :func:`decode_json` on the same values. The checks below are bulk byte scans, no Python
    loop over the records.
    """
    if schema.format.kind.framed:
        return None  # Avro/Protobuf/JSON Schema: judged per record (adapters.registry)
    plan = _arrow_plan(schema)
    count = len(values)
    if plan is None or count == 0:
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
    if table.num_rows != count:
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
    """``payload`` plus where each row came from, built as Arrow arrays (no Python objects).

    ``topic`` overrides the topic name stored (a clustered pipeline's ``<cluster>:<topic>``).

    Timestamps are Kafka's milliseconds as ``timestamp('ms', 'UTC')``, which ClickHouse stores
    in ``DateTime64(3, 'UTC')`` without the seconds-or-milliseconds ambiguity of a bare number.
    """
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
