"""The decoder contract, rule by rule: the answers both sinks give for each kind of token."""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest

from eos_pipeline.core.contract import (
    ErrorClass,
    compile_contract,
    is_required,
    judge,
    oversized,
    oversized_positions,
)
from eos_pipeline.core.schema import Column, SchemaError, TableSchema

ROW = "row"


def verdict(ch_type: str, token: str, **column: Any) -> tuple[str, Any]:
    contract = compile_contract(TableSchema((Column("x", ch_type, **column),)))
    result = judge(('{"x": ' + token + "}").encode(), contract)
    if result.row is None:
        return str(result.error_class), result.message
    return ROW, result.row[0]


@pytest.mark.parametrize(
    ("ch_type", "token", "expected"),
    [
        ("Int64", "1", 1),
        ("Int64", "-0", 0),
        ("Int64", "9223372036854775807", 2**63 - 1),
        ("UInt64", "18446744073709551615", 2**64 - 1),
        ("UInt8", "255", 255),
        ("Float64", "3", 3.0),
        ("Float64", "NaN", math.nan),
        ("Float64", "1e400", math.inf),
        ("Float32", "0.1", 0.10000000149011612),
        ("Decimal(9, 2)", "12.5", Decimal("12.50")),
        ("Decimal(9, 2)", '"12.50"', Decimal("12.50")),
        ("Decimal(38, 0)", "9" * 38, Decimal("9" * 38)),
        ("Bool", "true", True),
        ("String", '"a\\u00e9\\ud83d\\ude00"', "aé😀"),
        ("FixedString(4)", '"abcd"', "abcd"),
        ("UUID", '"6F1E2A0C-1D2B-4C3D-8E4F-0123456789AB"', "6f1e2a0c-1d2b-4c3d-8e4f-0123456789ab"),
        ("IPv4", '"10.0.0.1"', "10.0.0.1"),
        ("IPv6", '"2001:DB8:0:0::1"', "2001:db8::1"),
        ("Date", '"2024-02-29"', date(2024, 2, 29)),
        ("Date32", '"1900-01-01"', date(1900, 1, 1)),
        ("DateTime", "0", datetime(1970, 1, 1, tzinfo=UTC)),
        ("DateTime", '"2024-01-02 03:04:05"', datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("DateTime", '"2024-01-02T03:04:05+02:00"', datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC)),
        (
            "DateTime64(3)",
            '"2024-01-02T03:04:05.123987Z"',
            datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC),  # cut to the precision
        ),
        (
            "DateTime64(6, 'Europe/Berlin')",
            '"2024-07-01 12:00:00.5"',  # no offset: the column's zone (summer time, +2)
            datetime(2024, 7, 1, 10, 0, 0, 500000, tzinfo=UTC),
        ),
        ("Array(Nullable(Int8))", "[1, null]", [1, None]),
        ("Map(String, Int64)", '{"a": 1}', {"a": 1}),
    ],
)
def test_accepted_tokens_and_their_stored_values(ch_type: str, token: str, expected: Any) -> None:
    kind, value = verdict(ch_type, token)
    assert kind == ROW, value
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(value)
    else:
        assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    ("ch_type", "token", "why"),
    [
        ("Int64", "1.0", "needs a JSON integer"),
        ("Int64", "1e3", "needs a JSON integer"),
        ("Int64", '"12"', "needs a JSON integer"),
        ("Int64", "true", "needs a JSON integer"),
        ("Int64", "9223372036854775808", "out of range"),
        ("UInt8", "256", "out of range"),
        ("UInt8", "-1", "out of range"),
        ("Float64", '"1.5"', "needs a JSON number"),
        ("Float64", "false", "needs a JSON number"),
        ("Decimal(9, 2)", "1.234", "more than 2 digits after the point"),
        ("Decimal(9, 2)", "12345678", "out of range"),
        ("Decimal(9, 2)", '"12,5"', "not a decimal number"),
        ("Decimal(9, 2)", "NaN", "not a finite number"),
        ("Bool", "1", "needs true or false"),
        ("Bool", '"true"', "needs true or false"),
        ("String", "12", "needs a JSON string"),
        ("String", "true", "needs a JSON string"),
        ("String", '{"a": 1}', "needs a JSON string"),
        ("String", "[1]", "needs a JSON string"),
        ("FixedString(2)", '"\\u00e9\\u00e9"', "longer than 2 bytes"),
        ("UUID", '"6f1e2a0c1d2b4c3d8e4f0123456789ab"', "8-4-4-4-12"),
        ("IPv4", '"256.0.0.1"', "not an address"),
        ("Date", '"1969-12-31"', "out of range"),
        ("Date", '"2024-02-30"', "not a YYYY-MM-DD date"),
        ("Date", "19000", "needs a JSON string"),
        ("DateTime", "-1", "out of range"),
        ("DateTime", '"2106-02-07 06:28:16"', "out of range"),
        ("DateTime", "1.5", "needs epoch seconds or an ISO-8601 string"),
        ("DateTime64(3)", '"2300-01-01 00:00:00"', "out of range"),
        ("DateTime64(3)", '"2024-01-01T00:00:00+24:00"', "bad UTC offset"),
        ("Array(Int8)", "[1, null]", "null element"),
        ("Array(Int8)", "[1, 300]", "out of range"),
        ("Map(String, Int64)", '{"a": "1"}', "needs a JSON integer"),
    ],
)
def test_refused_tokens_are_type_mismatches(ch_type: str, token: str, why: str) -> None:
    kind, message = verdict(ch_type, token)
    assert kind == ErrorClass.TYPE_MISMATCH
    assert message.startswith("field 'x': ") and why in message and ch_type.split("(")[0] in message


def test_missing_null_default_and_nullable() -> None:
    assert verdict("Int64", "null") == (ErrorClass.MISSING_FIELD, "required field 'x' is null")
    assert verdict("Int64", "null", default=5) == (ROW, 5)
    assert verdict("Int64", "null", nullable=True) == (ROW, None)
    assert verdict("Nullable(Int64)", "null") == (ROW, None)
    assert verdict("Float64", "null", default=2) == (ROW, 2.0)
    contract = compile_contract(TableSchema((Column("x", "Int64"),)))
    missing = judge(b'{"y": 1}', contract)
    assert (missing.error_class, missing.message) == (
        ErrorClass.MISSING_FIELD,
        "required field 'x' is missing",
    )
    assert is_required(Column("x", "Int64"))
    assert not is_required(Column("x", "Nullable(Int64)"))
    assert not is_required(Column("x", "Int64", default=0))


@pytest.mark.parametrize(
    ("raw", "start"),
    [
        (b"\xff{}", "not valid UTF-8"),
        (b"{", "not valid JSON"),
        (b'{"x": 1} {"x": 2}', "not valid JSON"),
        (b'{"x": 1} x', "not valid JSON"),
        (b"[1]", "expected a JSON object, got array"),
        (b'"x"', "expected a JSON object, got string"),
        (b"", "not valid JSON"),
        (b'\xef\xbb\xbf{"x": 1}', "not valid JSON"),  # a byte-order mark
        (b'{"x": 1, "y": "\\ud800"}', "a string holds an unpaired UTF-16 surrogate"),
    ],
)
def test_values_that_are_not_a_json_object_are_decode_errors(raw: bytes, start: str) -> None:
    contract = compile_contract(TableSchema((Column("x", "Int64"),)))
    result = judge(raw, contract)
    assert result.error_class == ErrorClass.DECODE_ERROR and result.message.startswith(start)


def test_tombstones_oversize_and_what_is_ignored() -> None:
    contract = compile_contract(TableSchema((Column("x", "Int64"),)))
    assert judge(None, contract).error_class == ErrorClass.TOMBSTONE
    assert oversized(b"k", b"12345", 5) == (
        "key + value is 6 bytes, above the pipeline's max_record_bytes of 5"
    )
    assert oversized(b"k", b"1234", 5) is None and oversized(None, b"x" * 9, None) is None
    extra = judge(json.dumps({"x": 1, "other": {"deep": [1, None]}, "x2": "y"}).encode(), contract)
    assert extra.row == (1,)
    repeated = judge(b'{"x": 1, "x": 2}', contract)
    assert repeated.row == (2,)  # the last value of a repeated key
    order = compile_contract(TableSchema((Column("a", "Int8"), Column("b", "Int8"))))
    first = judge(b'{"a": "no", "b": null}', order)  # the first failing column names the error
    assert first.error_class == ErrorClass.TYPE_MISMATCH and "'a'" in first.message


@pytest.mark.parametrize(
    ("ch_type", "hint"),
    [
        ("Int128", "Decimal(38, 0)"),
        ("UInt256", "UInt64"),
        ("BFloat16", "Float32"),
        ("JSON", "String"),
        ("Tuple(String, Int64)", "Array or Map"),
        ("Decimal(76, 0)", "38 digits"),
        ("DateTime64(9)", "DateTime64(6)"),
        ("Map(Int64, String)", "Map(String, T)"),
    ],
)
def test_types_both_sinks_cannot_store_alike_are_refused_up_front(ch_type: str, hint: str) -> None:
    with pytest.raises(SchemaError, match="column 'x'") as caught:
        compile_contract(TableSchema((Column("x", ch_type),)))
    assert hint in str(caught.value)


def test_a_default_must_itself_fit_the_column() -> None:
    with pytest.raises(SchemaError, match="default 300"):
        compile_contract(TableSchema((Column("x", "UInt8", default=300),)))
    ok = compile_contract(TableSchema((Column("x", "DateTime", default="1970-01-01 00:00:00"),)))
    assert ok.fields[0].default == datetime(1970, 1, 1, tzinfo=UTC)


def test_oversized_positions_count_key_and_value_together() -> None:
    keys = [None, b"k" * 4, b"k", None]
    values = [b"v" * 10, b"v" * 7, b"v" * 9, None]
    assert oversized_positions(keys, values, 10) == [1]  # 4 + 7 > 10; 1 + 9 and 10 fit
    assert oversized_positions(keys, values, 9) == [0, 1, 2]
    assert oversized_positions(keys, values, None) == []
    assert oversized_positions([], [], 0) == []
    # The same verdict as the per-record rule, record by record.
    assert oversized_positions(keys, values, 9) == [
        i for i, (k, v) in enumerate(zip(keys, values, strict=True)) if oversized(k, v, 9)
    ]
