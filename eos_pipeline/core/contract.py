"""The decoder contract: which JSON records become rows, with which values, which are dead letters.

Both sinks apply this one contract (SPEC §9): the ClickHouse sink through :mod:`core.decode`,
the Hudi sink by running the same decoder inside Spark's Python workers (``adapters.spark``).
A record is therefore a row in both tables, with the same values, or a dead letter from both
sinks with the same error class. Nothing here depends on what a reader downstream would have
tolerated: Spark's JSON reader turns a number into text for a string field, ClickHouse wraps an
out-of-range integer; the contract refuses both.

Per record, checked in this order (the first failing rule names the error class):

1. ``Oversized``: key + value bytes above the pipeline's ``max_record_bytes``;
2. ``Tombstone``: a null value;
3. ``DecodeError``: not UTF-8, not JSON, not a JSON object, text after the object, or a string
   holding an unpaired surrogate (``"\\ud800"``: valid JSON syntax, not text);
4. per declared column, in declared order: ``MissingField`` when the field is absent or null
   and the column has no default and is not nullable; ``TypeMismatch`` when the JSON token does
   not fit the column (see :data:`TOKENS`).

Framed formats (``format: avro | protobuf | json_schema``, see :mod:`core.formats`) replace
rule 3 by three checks: ``BadFraming`` (no Confluent header: magic byte 0, a 4-byte schema id,
Protobuf message indexes), ``UnknownSchemaId`` (the registry has no schema with that id) and
``DecodeError`` (the bytes are not a value of the writer schema, or that schema is of another
format); rule 4 then judges the decoded record's fields as it judges a JSON object's. A registry
that cannot be reached is never a verdict: the run fails and is retried.

Keys that are not declared columns are ignored; a repeated key keeps its last value. The values
the contract returns are canonical Python values (``int``, ``float``, ``bool``, ``str``,
``Decimal``, ``date``, aware ``datetime`` in UTC, lists, dicts), which each sink converts to its
storage type without judging again.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final

from eos_pipeline.core.schema import Column, SchemaError, TableSchema
from eos_pipeline.core.values import TOKENS, Converter, Reject, converter, kind_of, unwrap

__all__ = [
    "TOKENS",
    "Contract",
    "ErrorClass",
    "FieldRule",
    "Verdict",
    "compile_contract",
    "is_required",
    "judge",
    "judge_object",
    "oversized",
    "parse_object",
    "unwrap",
]

#: A ``\\uD800``-``\\uDFFF`` escape: only these can decode to a string that is not text.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


class ErrorClass(StrEnum):
    """Why a record is a dead letter; the value is what the dead-letter header carries."""

    OVERSIZED = "Oversized"
    TOMBSTONE = "Tombstone"
    DECODE_ERROR = "DecodeError"
    MISSING_FIELD = "MissingField"
    TYPE_MISMATCH = "TypeMismatch"
    #: Framed formats only (Avro, Protobuf, JSON Schema): the value does not start with the
    #: Confluent header (magic byte 0, a 4-byte schema id; for Protobuf, valid message indexes).
    BAD_FRAMING = "BadFraming"
    #: Framed formats only: the registry answers that it has no schema with the header's id.
    UNKNOWN_SCHEMA_ID = "UnknownSchemaId"
    #: Not a decoding verdict: a batch re-sent inside a range a crash left open, which cannot
    #: carry its first attempt's token (ClickHouse sink only; the range itself is recovered).
    UNRECOVERABLE_REPLAY = "UnrecoverableReplay"


#: What each supported column type accepts, for the README and error messages.


@dataclass(frozen=True, slots=True)
class FieldRule:
    """How one declared column is filled from a record."""

    name: str
    convert: Converter
    nullable: bool
    default: Any  # canonical default value, or None for no default
    has_default: bool

    @property
    def required(self) -> bool:
        """A record without this field (or with null) is a ``MissingField`` dead letter."""
        return not self.has_default and not self.nullable


def is_required(column: Column) -> bool:
    """The one required-field rule: no default and not nullable."""
    return column.default is None and not (column.nullable or unwrap(column.ch_type)[1])


@dataclass(frozen=True)
class Contract:
    """The compiled rules of one schema."""

    fields: tuple[FieldRule, ...]
    exact_decimals: bool  # parse JSON fractions as Decimal (a Decimal column is declared)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


@functools.lru_cache(maxsize=128)
def compile_contract(schema: TableSchema) -> Contract:
    """Compile ``schema``'s payload columns; raises :class:`SchemaError` for unsupported types."""
    rules = []
    exact = False
    for col in schema.columns:
        convert, type_nullable = converter(col.ch_type, f"column {col.name!r}")
        default = None
        if col.default is not None:
            literal = Decimal(str(col.default)) if isinstance(col.default, float) else col.default
            try:
                default = convert(literal)
            except Reject as exc:
                raise SchemaError(f"column {col.name!r}: default {col.default!r}: {exc}") from None
        exact = exact or unwrap(col.ch_type)[0].startswith("Decimal")
        rules.append(
            FieldRule(
                col.name,
                convert,
                col.nullable or type_nullable,
                default,
                col.default is not None,
            )
        )
    return Contract(tuple(rules), exact)


_MISSING: Final = object()


def _no_constant_for_decimals(name: str) -> float:
    return float(name)  # NaN, Infinity, -Infinity: kept as floats, Decimal columns refuse them


@dataclass(frozen=True, slots=True)
class Verdict:
    """A record's fate: ``row`` (values in column order) or an error class and message."""

    row: tuple[Any, ...] | None
    error_class: ErrorClass | None = None
    message: str = ""


def oversized(key: bytes | None, value: bytes | None, max_record_bytes: int | None) -> str | None:
    """The ``Oversized`` message when key + value exceed the limit, else None."""
    if max_record_bytes is None:
        return None
    size = len(key or b"") + len(value or b"")
    if size <= max_record_bytes:
        return None
    return (
        f"key + value is {size} bytes, above the pipeline's max_record_bytes of {max_record_bytes}"
    )


def oversized_positions(
    keys: list[bytes | None], values: list[bytes | None], max_record_bytes: int | None
) -> list[int]:
    """Positions of the records whose key + value exceed the limit (a bulk bound first: a chunk
    of small records costs two ``max`` calls)."""
    if max_record_bytes is None or not values:
        return []
    longest_value = max(map(len, filter(None, values)), default=0)
    longest_key = max(map(len, filter(None, keys)), default=0)
    if longest_value + longest_key <= max_record_bytes:
        return []
    return [
        i
        for i, (k, v) in enumerate(zip(keys, values, strict=True))
        if len(k or b"") + len(v or b"") > max_record_bytes
    ]


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_object(raw: bytes, contract: Contract) -> dict[str, Any] | str:
    """The JSON object in ``raw``, or the ``DecodeError`` message."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8: {exc.reason} at byte {exc.start}"
    try:
        if contract.exact_decimals:
            obj = json.loads(text, parse_float=Decimal, parse_constant=_no_constant_for_decimals)
        else:
            obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"not valid JSON: {str(exc)[:120]}"
    if type(obj) is not dict:
        return f"expected a JSON object, got {kind_of(obj)}"
    if (
        "\\u" in text
        and _SURROGATE_ESCAPE.search(text)
        and _has_lone_surrogate(json.dumps(obj, ensure_ascii=False, default=str))
    ):
        return "a string holds an unpaired UTF-16 surrogate escape (not text)"
    return obj


def judge(raw: bytes | None, contract: Contract) -> Verdict:
    """Apply the contract to one JSON value (size is judged by :func:`oversized` first)."""
    if raw is None:
        return TOMBSTONE_VERDICT
    obj = parse_object(raw, contract)
    if type(obj) is str:
        return Verdict(None, ErrorClass.DECODE_ERROR, obj)
    return judge_object(obj, contract)  # type: ignore[arg-type]


#: The verdict on a null value, whatever the format.
TOMBSTONE_VERDICT: Final = Verdict(
    None, ErrorClass.TOMBSTONE, "null value (tombstone): no row to insert"
)


def judge_object(obj: dict[str, Any], contract: Contract) -> Verdict:
    """Rule 4 on a decoded record: the declared columns, in order, from a field mapping.

    JSON objects come here from :func:`parse_object`; Avro, Protobuf and JSON Schema records
    from :mod:`core.formats`, as the same JSON-like values, so one set of rules judges all.
    """
    row = []
    for rule in contract.fields:
        value = obj.get(rule.name, _MISSING)
        if value is _MISSING or value is None:
            if rule.has_default:
                row.append(rule.default)
            elif rule.nullable:
                row.append(None)
            else:
                what = "missing" if value is _MISSING else "null"
                return Verdict(
                    None, ErrorClass.MISSING_FIELD, f"required field {rule.name!r} is {what}"
                )
            continue
        try:
            row.append(rule.convert(value))
        except Reject as exc:
            return Verdict(None, ErrorClass.TYPE_MISMATCH, f"field {rule.name!r}: {exc}")
    return Verdict(tuple(row))
