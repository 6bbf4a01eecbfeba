"""The decoder contract: which records become rows, with which values, which are dead letters.

Both sinks apply this one contract (SPEC §9), Hudi by running :mod:`core.decode` in Spark's
Python workers: a record is a row in both tables with the same values, or a dead letter of both
with the same error class, whatever a reader downstream would tolerate.

Per record, in order (the first failing rule names the class):

1. ``Oversized``: key + value bytes above ``max_record_bytes``;
2. ``Tombstone``: a null value;
3. ``DecodeError``: not UTF-8, not JSON, not an object, text after it, or an unpaired
   surrogate (``"\\ud800"``: valid JSON, not text). Framed formats replace this rule by
   ``BadFraming`` (no Confluent header), ``UnknownSchemaId`` and ``DecodeError`` (not a value
   of the writer schema); an unreachable registry is never a verdict (the run is retried);
4. per declared column, in order: ``MissingField`` (absent or null, no default, not nullable)
   or ``TypeMismatch`` (the token does not fit the column; docs/faults.md has the table).

Undeclared keys are ignored; a repeated key keeps its last value. Values come back canonical, so
each sink stores them without judging again; types the sinks cannot store alike are refused up
front with a :class:`SchemaError` naming one to use instead.
"""

from __future__ import annotations

import decimal
import functools
import json
import math
import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from ipaddress import IPv4Address, IPv6Address
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from eos_pipeline.core.schema import Column, SchemaError, TableSchema


def split_type(ch_type: str) -> tuple[str, tuple[str, ...]]:
    """``Name(arg, arg)`` split at its top-level commas (nested parentheses kept whole)."""
    name, _, rest = ch_type.partition("(")
    if not rest:
        return name, ()
    parts, depth, current = [], 0, ""
    for ch in rest[:-1]:
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        current += ch
    parts.append(current.strip())
    return name, tuple(parts)


def unwrap(ch_type: str) -> tuple[str, bool]:
    """``ch_type`` without ``LowCardinality``/``Nullable`` wrappers, and whether it was Nullable."""
    nullable = False
    while True:
        name, args = split_type(ch_type)
        if name == "LowCardinality":
            ch_type = args[0]
        elif name == "Nullable":
            ch_type, nullable = args[0], True
        else:
            return ch_type, nullable


class Reject(Exception):
    """A value does not fit its column (internal: becomes a ``TypeMismatch``)."""


INT_RANGES: Final = {
    f"{sign}Int{bits}": (0, (1 << bits) - 1) if sign else (-(1 << bits - 1), (1 << bits - 1) - 1)
    for sign in ("", "U")
    for bits in (8, 16, 32, 64)
}
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
DATE_RANGES: Final = {
    "Date": (date(1970, 1, 1), date(2149, 6, 6)),
    "Date32": (date(1900, 1, 1), date(2299, 12, 31)),
}
_DATETIME_RANGE: Final = (_EPOCH, datetime(2106, 2, 7, 6, 28, 15, tzinfo=UTC))
_DATETIME64_RANGE: Final = (
    datetime(1900, 1, 1, tzinfo=UTC),
    datetime(2299, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
)
_ISO: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})?)?"
)
_DATE: Final = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_DECIMAL_TEXT: Final = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_UUID: Final = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_FLOAT32: Final = struct.Struct("<f")
_WIDE: Final = decimal.Context(prec=200)  # quantize without the default 28-digit limit


def kind_of(value: Any) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        Decimal: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def mismatch(value: Any, type_name: str, why: str = "") -> Reject:
    detail = f" ({why})" if why else ""
    return Reject(f"{kind_of(value)} {_show(value)} does not fit {type_name}{detail}")


Converter = Callable[[Any], Any]


def int_value(type_name: str) -> Converter:
    low, high = INT_RANGES[type_name]

    def convert(value: Any) -> Any:
        if type(value) is not int:
            raise mismatch(value, type_name, "needs a JSON integer")
        if not low <= value <= high:
            raise mismatch(value, type_name, f"out of range [{low}, {high}]")
        return value

    return convert


def float_value(type_name: str) -> Converter:
    single = type_name == "Float32"

    def convert(value: Any) -> Any:
        kind = type(value)
        if kind is bool or kind not in (int, float, Decimal):
            raise mismatch(value, type_name, "needs a JSON number")
        try:
            number = float(value)
        except OverflowError:
            number = math.copysign(math.inf, value)  # an integer beyond any double
        if single and math.isfinite(number):
            try:
                number = _FLOAT32.unpack(_FLOAT32.pack(number))[0]
            except OverflowError:
                number = math.copysign(math.inf, number)
        return number

    return convert


def decimal_value(type_name: str, precision: int, scale: int) -> Converter:
    quantum = Decimal(1).scaleb(-scale)
    limit = Decimal(10) ** (precision - scale)

    def convert(value: Any) -> Any:
        kind = type(value)
        if kind is str:
            if not _DECIMAL_TEXT.fullmatch(value):
                raise mismatch(value, type_name, "not a decimal number")
            number = Decimal(value)
        elif kind is int or kind is Decimal:
            number = Decimal(value)
        elif kind is float:  # NaN or Infinity: JSON floats otherwise arrive as Decimal
            raise mismatch(value, type_name, "not a finite number")
        else:
            raise mismatch(value, type_name, "needs a JSON number or decimal string")
        if not number.is_finite():
            raise mismatch(value, type_name, "not a finite number")
        try:
            exact = number.quantize(quantum, context=_WIDE)
        except (InvalidOperation, decimal.Overflow):
            raise mismatch(value, type_name, "out of range") from None
        if exact != number:
            raise mismatch(value, type_name, f"more than {scale} digits after the point")
        if exact.copy_abs() >= limit:  # copy_abs: no rounding to the 28-digit context
            raise mismatch(value, type_name, "out of range")
        return exact

    return convert


def bool_value(value: Any) -> Any:
    if type(value) is not bool:
        raise mismatch(value, "Bool", "needs true or false")
    return value


def _text(value: Any, type_name: str) -> str:
    if type(value) is not str:
        raise mismatch(value, type_name, "needs a JSON string")
    return value


def fixed_string_value(type_name: str, length: int) -> Converter:
    def convert(value: Any) -> Any:
        text = _text(value, type_name)
        if len(text.encode("utf-8")) > length:
            raise mismatch(value, type_name, f"longer than {length} bytes")
        return text

    return convert


def uuid_value(value: Any) -> Any:
    text = _text(value, "UUID")
    if not _UUID.fullmatch(text):
        raise mismatch(value, "UUID", "not in 8-4-4-4-12 hex form")
    return str(uuid.UUID(text))


def ip_value(type_name: str) -> Converter:
    parse = IPv4Address if type_name == "IPv4" else IPv6Address

    def convert(value: Any) -> Any:
        text = _text(value, type_name)
        try:
            return str(parse(text))
        except ValueError:
            raise mismatch(value, type_name, "not an address") from None

    return convert


def date_value(type_name: str) -> Converter:
    low, high = DATE_RANGES[type_name]

    def convert(value: Any) -> Any:
        match = _DATE.fullmatch(_text(value, type_name))
        try:
            day = date(*map(int, match.groups())) if match else None
        except ValueError:
            day = None
        if day is None:
            raise mismatch(value, type_name, "not a YYYY-MM-DD date")
        if not low <= day <= high:
            raise mismatch(value, type_name, f"out of range [{low}, {high}]")
        return day

    return convert


def _zone(type_name: str, tz: str | None) -> Any:
    if tz is None:
        return UTC
    tz = tz.strip().strip("'")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise SchemaError(f"{type_name}: unknown time zone {tz!r}") from None


def datetime_value(type_name: str, precision: int, tz: str | None) -> Converter:
    zone = _zone(type_name, tz)
    wide = type_name.startswith("DateTime64")
    low, high = _DATETIME64_RANGE if wide else _DATETIME_RANGE
    cut = 10 ** (6 - precision)  # microseconds per unit of the column's precision

    def convert(value: Any) -> Any:
        if type(value) is int:
            try:
                moment = _EPOCH + timedelta(seconds=value)
            except OverflowError:
                raise mismatch(value, type_name, "out of range") from None
        else:
            match = _ISO.fullmatch(_text(value, type_name)) if type(value) is str else None
            if match is None:
                raise mismatch(value, type_name, "needs epoch seconds or an ISO-8601 string")
            year, month, day, hour, minute, second, fraction, offset = match.groups()
            micros = int((fraction or "0")[:6].ljust(6, "0"))
            if offset is None:
                zone_here: Any = zone
            elif offset == "Z":
                zone_here = UTC
            else:
                sign = 1 if offset[0] == "+" else -1
                hours, minutes = int(offset[1:3]), int(offset[4:6])
                if hours > 23 or minutes > 59:
                    raise mismatch(value, type_name, "bad UTC offset")
                zone_here = _fixed_zone(sign * (hours * 60 + minutes))
            fields = [int(part or 0) for part in (year, month, day, hour, minute, second)]
            try:
                moment = datetime(*fields, micros, tzinfo=zone_here).astimezone(UTC)
            except (ValueError, OverflowError):
                raise mismatch(value, type_name, "not a valid date and time") from None
        moment = moment.replace(microsecond=moment.microsecond - moment.microsecond % cut)
        if not low <= moment <= high:
            raise mismatch(value, type_name, f"out of range [{low:%Y-%m-%d}, {high:%Y-%m-%d}]")
        return moment

    return convert


@functools.lru_cache(maxsize=64)
def _fixed_zone(minutes: int) -> Any:
    return timezone(timedelta(minutes=minutes))


#: Types no sink pair can store identically (Spark decimals hold 38 digits, timestamps hold
#: microseconds; ClickHouse's JSON, Tuple and BFloat16 have no Spark counterpart of the same value).
_UNSUPPORTED_HINT: Final = {
    "Int128": "Int64 or Decimal(38, 0)",
    "UInt128": "UInt64 or Decimal(38, 0)",
    "Int256": "Int64 or Decimal(38, 0)",
    "UInt256": "UInt64 or Decimal(38, 0)",
    "BFloat16": "Float32",
    "JSON": "String (the JSON text) or Map(String, String)",
    "Tuple": "Array or Map",
}


def converter(ch_type: str, where: str = "column") -> tuple[Converter, bool]:
    """The value rule for a canonical type, and whether it allows null."""
    base, nullable = unwrap(ch_type)
    name, args = split_type(base)
    if name in _UNSUPPORTED_HINT:
        raise SchemaError(
            f"{where}: type {ch_type} is not supported by both sinks (ClickHouse and Hudi would "
            f"store different values); use {_UNSUPPORTED_HINT[name]}"
        )
    if name in INT_RANGES:
        return int_value(name), nullable
    if name in ("Float32", "Float64"):
        return float_value(name), nullable
    if name == "Decimal":
        precision, scale = int(args[0]), int(args[1])
        if precision > 38:
            raise SchemaError(
                f"{where}: {base} holds more than 38 digits, which Spark decimals cannot; "
                "use Decimal(38, S) or String"
            )
        return decimal_value(base, precision, scale), nullable
    if name == "Bool":
        return bool_value, nullable
    if name == "String":
        return functools.partial(_text, type_name=base), nullable
    if name == "FixedString":
        return fixed_string_value(base, int(args[0])), nullable
    if name == "UUID":
        return uuid_value, nullable
    if name in ("IPv4", "IPv6"):
        return ip_value(name), nullable
    if name in DATE_RANGES:
        return date_value(name), nullable
    if name == "DateTime":
        return datetime_value(base, 0, args[0] if args else None), nullable
    if name == "DateTime64":
        precision = int(args[0])
        if precision > 6:
            raise SchemaError(
                f"{where}: {base} keeps nanoseconds, Spark timestamps keep microseconds; "
                "use DateTime64(6) or less"
            )
        tz = args[1] if len(args) > 1 else None
        return datetime_value(base, precision, tz), nullable
    if name == "Array":
        element, element_nullable = converter(args[0], f"{where} element")
        return _array(base, element, element_nullable), nullable
    if name == "Map":
        key_base, _ = unwrap(args[0])
        if key_base != "String":
            raise SchemaError(f"{where}: {base}: JSON object keys are strings; use Map(String, T)")
        value, value_nullable = converter(args[1], f"{where} value")
        return _map(base, value, value_nullable), nullable
    raise SchemaError(f"{where}: type {ch_type} is not supported by the decoder contract")


def _array(type_name: str, element: Converter, element_nullable: bool) -> Converter:
    def convert(value: Any) -> Any:
        if type(value) is not list:
            raise mismatch(value, type_name, "needs a JSON array")
        out = []
        for item in value:
            if item is None:
                if not element_nullable:
                    raise mismatch(value, type_name, "null element")
                out.append(None)
            else:
                try:
                    out.append(element(item))
                except Reject as exc:
                    raise mismatch(value, type_name, f"element {len(out)}: {exc}") from None
        return out

    return convert


def _map(type_name: str, value_rule: Converter, value_nullable: bool) -> Converter:
    def convert(value: Any) -> Any:
        if type(value) is not dict:
            raise mismatch(value, type_name, "needs a JSON object")
        out = {}
        for key, item in value.items():
            if item is None:
                if not value_nullable:
                    raise mismatch(value, type_name, f"null value for key {key!r}")
                out[key] = None
            else:
                try:
                    out[key] = value_rule(item)
                except Reject as exc:
                    raise mismatch(value, type_name, f"key {key!r}: {exc}") from None
        return out

    return convert


#: A ``\\uD800``-``\\uDFFF`` escape: only these can decode to a string that is not text.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


class ErrorClass(StrEnum):
    """Why a record is a dead letter, as the dead-letter header says. ``UnrecoverableReplay`` is
    no decoding verdict: a batch re-sent in a range a crash left open, which cannot carry its
    first attempt's token (ClickHouse only; the range itself is recovered)."""

    OVERSIZED = "Oversized"
    TOMBSTONE = "Tombstone"
    DECODE_ERROR = "DecodeError"
    MISSING_FIELD = "MissingField"
    TYPE_MISMATCH = "TypeMismatch"
    BAD_FRAMING = "BadFraming"
    UNKNOWN_SCHEMA_ID = "UnknownSchemaId"
    UNRECOVERABLE_REPLAY = "UnrecoverableReplay"


@dataclass(frozen=True, slots=True)
class FieldRule:
    """How one declared column is filled from a record (``default``: canonical; ``base``: the
    type without ``LowCardinality``/``Nullable``)."""

    name: str
    convert: Converter
    nullable: bool
    default: Any
    has_default: bool
    base: str

    @property
    def required(self) -> bool:
        return not self.has_default and not self.nullable


def is_required(column: Column) -> bool:
    """The one required-field rule: no default and not nullable."""
    return column.default is None and not (column.nullable or unwrap(column.ch_type)[1])


@dataclass(frozen=True)
class Contract:
    """The compiled rules of one schema; with a Decimal column, JSON fractions parse as Decimal."""

    fields: tuple[FieldRule, ...]
    exact_decimals: bool

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


@functools.lru_cache(maxsize=128)
def compile_contract(schema: TableSchema) -> Contract:
    rules = []
    for col in schema.columns:
        convert, type_nullable = converter(col.ch_type, f"column {col.name!r}")
        default = None
        if col.default is not None:
            literal = Decimal(str(col.default)) if isinstance(col.default, float) else col.default
            try:
                default = convert(literal)
            except Reject as exc:
                raise SchemaError(f"column {col.name!r}: default {col.default!r}: {exc}") from None
        nullable = col.nullable or type_nullable
        base = unwrap(col.ch_type)[0]
        rules.append(FieldRule(col.name, convert, nullable, default, col.default is not None, base))
    return Contract(tuple(rules), any(rule.base.startswith("Decimal") for rule in rules))


_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class Verdict:
    """A record's fate: a row (in column order) or an error class and message."""

    row: tuple[Any, ...] | None
    error_class: ErrorClass | None = None
    message: str = ""


def oversized(key: bytes | None, value: bytes | None, max_record_bytes: int | None) -> str | None:
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
    """Positions of the oversized records (a bulk bound first: small records cost two ``max``)."""
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


def parse_object(raw: bytes, contract: Contract) -> dict[str, Any] | str:
    """The JSON object in ``raw``, or the ``DecodeError`` message."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8: {exc.reason} at byte {exc.start}"
    try:
        if contract.exact_decimals:
            # NaN, Infinity, -Infinity stay floats, which Decimal columns refuse
            obj = json.loads(text, parse_float=Decimal, parse_constant=float)
        else:
            obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"not valid JSON: {str(exc)[:120]}"
    if type(obj) is not dict:
        return f"expected a JSON object, got {kind_of(obj)}"
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")
        except UnicodeEncodeError:
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
    """Rule 4, on JSON objects and decoded framed records alike: one set of rules judges all."""
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
