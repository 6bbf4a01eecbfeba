"""Value rules of the decoder contract: which JSON token fits which column type, and as what.

One converter per supported ClickHouse type turns a parsed JSON value into its canonical Python
value or raises :class:`Reject` with the reason (the scalar ones are in
:mod:`core.scalar_values`, the containers here); :mod:`core.contract` applies them per record.
Types the two sinks cannot store alike are refused up front with a :class:`SchemaError` naming a
type to use instead. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Final

from eos_pipeline.core.scalar_values import (
    DATE_RANGES,
    INT_RANGES,
    Converter,
    Reject,
    bool_value,
    date_value,
    datetime_value,
    decimal_value,
    fixed_string_value,
    float_value,
    int_value,
    ip_value,
    kind_of,
    mismatch,
    string_value,
    uuid_value,
)
from eos_pipeline.core.schema import SchemaError
from eos_pipeline.core.type_names import split_type, unwrap

__all__ = ["TOKENS", "Converter", "Reject", "converter", "kind_of", "unwrap"]

TOKENS: Final[dict[str, str]] = {
    "Int8..Int64, UInt8..UInt64": 'a JSON integer within the type\'s range (not 1.0, not "1")',
    "Float32, Float64": "a JSON number, or NaN/Infinity/-Infinity; Float32 rounds to float32",
    "Decimal(P, S)": "a JSON number or a decimal string, at most S fraction and P-S integer digits",
    "Bool": "true or false",
    "String": "a JSON string (not a number, not an object)",
    "FixedString(N)": "a JSON string of at most N UTF-8 bytes",
    "UUID": "a string in 8-4-4-4-12 hex form (stored lower-case)",
    "IPv4, IPv6": "a string holding an address (stored in its compressed form)",
    "Date, Date32": "a 'YYYY-MM-DD' string within the type's range",
    "DateTime, DateTime64(P[, tz])": (
        "whole seconds since the epoch as a JSON integer, or an ISO-8601 string "
        "'YYYY-MM-DD[ T]hh:mm:ss[.fff][Z|+hh:mm]' (no offset: the column's time zone, else "
        "UTC), within the type's range; fractions beyond P digits are cut off; P at most 6"
    ),
    "Array(T)": "a JSON array whose elements each fit T",
    "Map(String, T)": "a JSON object whose values each fit T",
    "Nullable(T), LowCardinality(T)": "as T; null only where Nullable",
}

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


def _unquote(tz: str) -> str:
    return tz.strip().strip("'")


def converter(ch_type: str, where: str = "column") -> tuple[Converter, bool]:
    """The value rule for a canonical type string, and whether the type allows null.

    Raises :class:`SchemaError` for a type the contract does not support, naming a type to use.
    """
    base, nullable = unwrap(ch_type)
    parsed = split_type(base)
    name = parsed.name
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
        precision, scale = int(parsed.args[0]), int(parsed.args[1])
        if precision > 38:
            raise SchemaError(
                f"{where}: {base} holds more than 38 digits, which Spark decimals cannot; "
                "use Decimal(38, S) or String"
            )
        return decimal_value(base, precision, scale), nullable
    if name == "Bool":
        return bool_value, nullable
    if name == "String":
        return string_value(base), nullable
    if name == "FixedString":
        return fixed_string_value(base, int(parsed.args[0])), nullable
    if name == "UUID":
        return uuid_value, nullable
    if name in ("IPv4", "IPv6"):
        return ip_value(name), nullable
    if name in DATE_RANGES:
        return date_value(name), nullable
    if name == "DateTime":
        return datetime_value(base, 0, _unquote(parsed.args[0]) if parsed.args else None), nullable
    if name == "DateTime64":
        precision = int(parsed.args[0])
        if precision > 6:
            raise SchemaError(
                f"{where}: {base} keeps nanoseconds, Spark timestamps keep microseconds; "
                "use DateTime64(6) or less"
            )
        tz = _unquote(parsed.args[1]) if len(parsed.args) > 1 else None
        return datetime_value(base, precision, tz), nullable
    if name == "Array":
        element, element_nullable = converter(parsed.args[0], f"{where} element")
        return _array(base, element, element_nullable), nullable
    if name == "Map":
        key_base, _ = unwrap(parsed.args[0])
        if key_base != "String":
            raise SchemaError(f"{where}: {base}: JSON object keys are strings; use Map(String, T)")
        value, value_nullable = converter(parsed.args[1], f"{where} value")
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
