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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eos_pipeline.core.schema import Column, TableSchema

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
