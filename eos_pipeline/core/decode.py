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
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import Column, SourceColumns, TableSchema

_INT = re.compile(r"^U?Int(8|16|32|64|128|256)$")
_FLOAT = re.compile(r"^(Float32|Float64|BFloat16)$")
_DECIMAL = re.compile(r"^Decimal")
_STRINGISH = re.compile(r"^(String|FixedString|UUID|IPv4|IPv6|Enum8|Enum16|Enum)")
_TIME = re.compile(r"^(Date|Date32|DateTime|DateTime64)\b")


@dataclass(frozen=True, slots=True)
class BadRecord:
    index: int  # position in the input sequence
    error_class: str
    message: str


@dataclass
class Decoded:
    """Columns of the good records (``index`` maps each row back to its input position)."""

    columns: dict[str, list[Any]]
    index: list[int] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)


def _base(ch_type: str) -> tuple[str, bool]:
    nullable = False
    if ch_type.startswith("LowCardinality("):
        ch_type = ch_type[len("LowCardinality(") : -1]
    if ch_type.startswith("Nullable("):
        ch_type, nullable = ch_type[len("Nullable(") : -1], True
    return ch_type, nullable


def _checker(ch_type: str) -> Callable[[Any], bool]:
    if _INT.match(ch_type):
        unsigned = ch_type.startswith("U")
        return lambda v: type(v) is int and (not unsigned or v >= 0)
    if _FLOAT.match(ch_type):
        return lambda v: type(v) in (int, float)
    if _DECIMAL.match(ch_type):
        return lambda v: type(v) in (int, float, str)
    if ch_type == "Bool":
        return lambda v: type(v) is bool
    if _STRINGISH.match(ch_type):
        return lambda v: type(v) is str
    if _TIME.match(ch_type):
        return lambda v: type(v) in (int, str)
    if ch_type.startswith("Array("):
        return lambda v: type(v) is list
    if ch_type.startswith(("Map(", "Tuple(", "JSON", "Object(")):
        return lambda v: type(v) in (dict, list)
    return lambda v: True  # types without a JSON counterpart check: ClickHouse will judge


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    accepts: Callable[[Any], bool]
    nullable: bool
    default: Any
    type_name: str


def _rule(col: Column) -> _Rule:
    base, nullable = _base(col.ch_type)
    return _Rule(col.name, _checker(base), nullable or col.nullable, col.default, col.ch_type)


def decode_json(values: Sequence[bytes | None], schema: TableSchema) -> Decoded:
    """Parse each value as a JSON object and check it against the payload columns."""
    rules = [_rule(c) for c in schema.columns]
    out = Decoded(columns={r.name: [] for r in rules})
    cols = [out.columns[r.name] for r in rules]
    for i, raw in enumerate(values):
        if raw is None:
            out.bad.append(BadRecord(i, "Tombstone", "null value (tombstone): no row to insert"))
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            out.bad.append(BadRecord(i, "DecodeError", f"not valid JSON: {exc}"))
            continue
        if type(obj) is not dict:
            out.bad.append(
                BadRecord(i, "DecodeError", f"expected a JSON object, got {type(obj).__name__}")
            )
            continue
        row = []
        problem = None
        for rule in rules:
            value = obj.get(rule.name, _MISSING)
            if value is _MISSING or value is None:
                if rule.default is not None:
                    value = rule.default
                elif rule.nullable:
                    value = None
                else:
                    what = "missing" if value is _MISSING else "null"
                    problem = BadRecord(
                        i, "MissingField", f"required field {rule.name!r} is {what}"
                    )
                    break
            elif not rule.accepts(value):
                problem = BadRecord(
                    i,
                    "TypeMismatch",
                    f"field {rule.name!r}: {type(value).__name__} value {str(value)[:60]!r} "
                    f"does not fit {rule.type_name}",
                )
                break
            row.append(value)
        if problem is not None:
            out.bad.append(problem)
            continue
        for column, value in zip(cols, row, strict=True):
            column.append(value)
        out.index.append(i)
    return out


_MISSING = object()


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
# Arrow's reader cuts its input into blocks of this size and parses them on its thread pool.
_ARROW_BLOCK_BYTES = 4 << 20


@dataclass(frozen=True)
class _ArrowPlan:
    schema: pa.Schema
    # Per column: what to put in place of a missing or null value (``None``: leave NULL) and
    # whether a NULL may stay at all.
    fills: tuple[tuple[str, pa.Scalar | None, bool], ...]


@functools.lru_cache(maxsize=64)
def _arrow_plan(schema: TableSchema) -> _ArrowPlan | None:
    """The Arrow schema for ``schema``'s payload, or None when a column needs the reference."""
    fields = []
    fills = []
    for col in schema.columns:
        rule = _rule(col)
        base, _ = _base(col.ch_type)
        arrow_type = _ARROW_TYPES.get(base)
        if arrow_type is None:
            return None
        fill = None
        if col.default is not None:
            # The reference stores the default literally; only a default of the column's own
            # JSON kind comes out the same through Arrow.
            if not rule.accepts(col.default):
                return None
            try:
                fill = pa.scalar(col.default, arrow_type)
            except (pa.ArrowException, ValueError, TypeError, OverflowError):
                return None
        fields.append(pa.field(col.name, arrow_type))
        fills.append((col.name, fill, rule.nullable))
    return _ArrowPlan(pa.schema(fields), tuple(fills))


def decode_json_arrow(values: Sequence[bytes | None], schema: TableSchema) -> pa.Table | None:
    """The payload columns of every record as one Arrow table, or None to use the reference.

    None means "some record needs a per-record judgement" (a dead letter, a shape Arrow reads
    differently, a type not mapped), never that the chunk is bad: the caller then runs
    :func:`decode_json` on the same values. The checks below are bulk byte scans, no Python
    loop over the records.
    """
    plan = _arrow_plan(schema)
    count = len(values)
    if plan is None or count == 0:
        return None
    try:
        data = b"\n".join(values)  # type: ignore[arg-type]
    except TypeError:
        return None  # a tombstone (None)
    # Every value must start with ``{`` and end with ``}`` (checked at the joins, in bulk). Then
    # each value is at least one non-empty line, so at least one row for Arrow, and a value that
    # holds a newline or carriage return either fails to parse (a line cut mid-object) or yields
    # more rows (`{...}\n{...}`): the row count check below catches both, and JSON whitespace
    # before or after the object simply takes the reference path.
    lengths = np.fromiter(map(len, values), np.int64, count)  # type: ignore[arg-type]
    if lengths.min() < 2:
        return None
    last = np.cumsum(lengths + 1) - 2  # position of each value's last byte in ``data``
    raw = np.frombuffer(data, np.uint8)
    if not ((raw[last] == ord("}")).all() and (raw[last - lengths + 1] == ord("{")).all()):
        return None
    if not data.isascii():
        # Arrow's JSON reader copies invalid UTF-8 into strings unchecked; the reference refuses
        # the record (a dead letter), so only valid UTF-8 may take this path.
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(use_threads=True, block_size=_ARROW_BLOCK_BYTES),
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
) -> pa.Table:
    """``payload`` plus where each row came from, built as Arrow arrays (no Python objects).

    Timestamps are Kafka's milliseconds as ``timestamp('ms', 'UTC')``, which ClickHouse stores
    in ``DateTime64(3, 'UTC')`` without the seconds-or-milliseconds ambiguity of a bare number.
    """
    count = payload.num_rows
    if len(offsets) != count or len(timestamps_ms) != count:
        raise ValueError(
            f"{count} rows but {len(offsets)} offsets and {len(timestamps_ms)} timestamps"
        )
    arrays: list[pa.Array] = [
        pa.array([tp.topic], pa.string()).take(np.zeros(count, dtype=np.int32)),
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
