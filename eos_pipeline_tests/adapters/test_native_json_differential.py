"""ClickHouse's own JSON parser against the per-record decoder (SPEC §9: one verdict per record).

Random chunks over every column type the native path takes (integers, Float64, Bool, String,
LowCardinality/Nullable, defaults), with valid values, values of the wrong JSON type or out of
range, numbers spelled as JSON forbids (``+1``, ``01``, ``.5``, ``1.``), quoted numbers, bad
escapes, raw control bytes, two objects on one line, unknown and repeated keys, tombstones and
broken JSON. Each chunk goes through the native path into chDB: either it is refused (and wrote
nothing), or the reference found every record good and the rows read back from chDB are the
reference's rows, source columns included. The same chunks also go through the Arrow path into a
second table under the same token scheme, and the two tables must hold the same rows.

``EOS_DIFF_RECORDS`` sets how many records (CI: a few hundred; a long run: 20000).
"""

from __future__ import annotations

import math
import os
import random
import uuid
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.clickhouse.native_json import NativeRefused
from eos_pipeline.core.decode import (
    NativeRows,
    add_source_columns,
    decode_json,
    decode_json_arrow,
    native_plan,
)
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import Column, TableSchema
from eos_pipeline_tests.adapters.test_decoder_differential import (
    RICH,
    SIMPLE,
    Raw,
    _any_json,
    dump,
    records,
    same,
    stored,
    valid_values,
)
from eos_pipeline_tests.support.core_readings import joined_native_payload

RECORDS = int(os.environ.get("EOS_DIFF_RECORDS", "400"))

NATIVE = TableSchema(
    (
        Column("i8", "Int8"),
        Column("u8", "UInt8", default=7),
        Column("i32", "Int32", nullable=True),
        Column("i64", "Int64"),
        Column("u64", "UInt64", nullable=True),
        Column("i32n", "Nullable(Int32)"),
        Column("f64", "Float64"),
        Column("f64d", "Float64", default=0.1),
        Column("b", "Bool", default=False),
        Column("bn", "Nullable(Bool)"),
        Column("s", "String"),
        Column("sd", "String", default="it's \\ 'x'"),
        Column("lcs", "LowCardinality(String)", nullable=True),
    )
)

# What ClickHouse's JSONEachRow reads and the contract refuses (measured), and neighbours.
_LEXICAL = [
    Raw("+1"),
    Raw("01"),
    Raw("-01"),
    Raw(".5"),
    Raw("-.5"),
    Raw("1."),
    Raw("1.e5"),
    Raw("-0"),
    Raw("1.0"),
    Raw("1e2"),
    Raw("1E+2"),
    Raw("0x10"),
    Raw('"1"'),
    Raw('"1.5"'),
    Raw('"true"'),
    Raw("true"),
    Raw("false"),
    Raw("1"),
    Raw("0"),
    Raw("300"),
    Raw("-129"),
    Raw("256"),
    Raw("18446744073709551615"),
    Raw("18446744073709551616"),
    Raw("9223372036854775808"),
    Raw("-9223372036854775809"),
    Raw("123456789012345678901234567890"),
    Raw("1e400"),
    Raw("-1e400"),
    Raw("2.2250738585072011e-308"),
    Raw("0.30000000000000004"),
    Raw("NaN"),
    Raw("Infinity"),
    Raw("inf"),
    Raw("nan"),
    Raw('"a\\qb"'),
    Raw('"a\\x41"'),
    Raw('"\\u00e9\\ud83d\\ude00"'),
    Raw('"\\ud800"'),
    Raw('"tab\there"'),
    Raw('"nul\x00"'),
    Raw('"colon:"'),
    Raw('"x\\":"'),
    Raw("{}"),
    Raw("[]"),
    Raw("null"),
    Raw("'x'"),
    Raw('"12"'),
    Raw('""'),
    Raw('"1.2.3.4"'),
    Raw("+.5"),
    Raw("1e+5"),
    Raw("-nan"),
    Raw("+inf"),
    Raw("-Infinity"),
]
_TAILS = ["", "", "", " ", " {}", ",{}", "{}", "x", "}", ",", ' {"i8":1}']


@st.composite
def native_records(draw: st.DrawFn, schema: TableSchema) -> bytes | None:
    """A value shaped like real traffic (compact or ``": "`` separators), a few fields bent."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    if draw(st.integers(0, 29)) == 0:
        return draw(records(schema))[1]  # the generic generator: odd spacing, broken bytes
    obj: dict[str, Any] = draw(valid_values(schema))
    names = [c.name for c in schema.columns]
    for _ in range(draw(st.sampled_from([0] * 12 + [1, 1, 2]))):
        name = draw(st.sampled_from(names))
        action = draw(st.integers(0, 9))
        if action == 0:
            obj.pop(name, None)
        elif action == 1:
            obj[name] = None
        elif action == 2:
            obj[name] = draw(_any_json)
        else:
            obj[name] = draw(st.sampled_from(_LEXICAL))
    if draw(st.integers(0, 29)) == 0:
        obj[draw(st.sampled_from(["extra", "i8x", "S"]))] = 1  # an unknown key
    items = list(obj.items())
    rng.shuffle(items)
    sep = draw(st.sampled_from([":"] * 6 + [": ", ":  "]))
    comma = draw(st.sampled_from([",", ",", ", "]))
    body = comma.join(
        f'"{k}"{sep}{dump(v, rng) if not isinstance(v, Raw) else v.text}' for k, v in items
    )
    if draw(st.integers(0, 29)) == 0 and items:
        body += f'{comma}"{items[0][0]}"{sep}{dump(items[0][1], rng)}'  # a repeated key
    tail = draw(st.sampled_from(_TAILS)) if draw(st.integers(0, 19)) == 0 else ""
    text = "{" + body + "}" + tail
    return text.encode("utf-8", "surrogatepass")


def same_value(want: Any, have: Any) -> bool:
    """``same``, and a float's sign too (0.0 and -0.0 are equal, not the same stored value)."""
    if isinstance(want, float) and isinstance(have, float) and not math.isnan(want):
        return want == have and math.copysign(1, want) == math.copysign(1, have)
    return same(want, have)


def _verdicts(schema: TableSchema, values: list[bytes | None]) -> dict[int, dict[str, Any] | str]:
    decoded = decode_json(values, schema)
    out: dict[int, dict[str, Any] | str] = {b.index: str(b.error_class) for b in decoded.bad}
    for n, position in enumerate(decoded.index):
        out[position] = {k: v[n] for k, v in decoded.columns.items()}
    return out


class Tables:
    """One table per path; chunk ``n`` is partition ``n`` with offsets ``1000 * n + i``."""

    def __init__(self, client: Client, schema: TableSchema) -> None:
        self.client = client
        self.sink = ClickHouseSink(client)
        self.schema = schema
        self.database = f"native_{uuid.uuid4().hex[:8]}"
        self.sink.ensure_table(self.database, "native", schema)
        self.sink.ensure_table(self.database, "arrow", schema)
        self.plan = native_plan(schema)
        assert self.plan is not None

    def offsets(self, n: int, count: int) -> tuple[list[int], list[int]]:
        offsets = [1000 * n + i for i in range(count)]
        return offsets, [1767225600000 + 37 * o for o in offsets]

    def native(self, n: int, values: list[bytes | None]) -> str:
        """``"bytes"``, ``"sql"`` (refused there) or ``"rows"`` (inserted)."""
        payload = joined_native_payload(values)
        if payload is None:
            return "bytes"
        offsets, stamps = self.offsets(n, len(values))
        try:
            rows = NativeRows(self.schema.source, "t", n, offsets, stamps)
            assert self.plan is not None
            sent = self.sink.insert_json(
                self.database, "native", self.plan, values, rows, dedup_token=f"tok-{n}"
            )
        except NativeRefused:
            return "sql"
        assert sent == len(values)
        return "rows"

    def arrow(self, n: int, values: list[bytes | None]) -> bool:
        payload = decode_json_arrow(values, self.schema)
        if payload is None:
            return False
        offsets, stamps = self.offsets(n, len(values))
        table = add_source_columns(
            payload, self.schema.source, TopicPartition("t", n), offsets, stamps
        )
        self.sink.insert_chunk(self.database, "arrow", table, f"tok-{n}")
        return True

    def rows(self, table: str, n: int) -> list[tuple[Any, ...]]:
        names = ", ".join(f"`{c.name}`" for c in self.schema.all_columns)
        return self.client.query(
            f"SELECT {names} FROM `{self.database}`.`{table}` WHERE _partition = {n} "
            "ORDER BY _offset"
        ).result_rows


def check_chunks(client: Client, schema: TableSchema, values: list[bytes | None]) -> dict[str, int]:
    """Cut ``values`` into chunks of 1-6 records (plus one of every good record); judge each."""
    ref = _verdicts(schema, values)
    rng = random.Random(len(values))
    chunks, start = [], 0
    while start < len(values):
        size = rng.randint(1, 6)
        chunks.append(list(range(start, min(start + size, len(values)))))
        start += size
    chunks.append([i for i in sorted(ref) if isinstance(ref[i], dict)])
    tables = Tables(client, schema)
    names = [c.name for c in schema.columns]
    tally: dict[str, int] = {}
    for n, chunk in enumerate(chunks):
        part = [values[i] for i in chunk]
        outcome = tables.native(n, part)
        tally[outcome] = tally.get(outcome, 0) + 1
        got = tables.rows("native", n)
        if outcome != "rows":
            assert got == [], f"a refused chunk wrote rows: {part!r}"
            continue
        for i, value in zip(chunk, part, strict=True):
            assert isinstance(ref[i], dict), f"native path accepted {value!r}: reference {ref[i]}"
        offsets, _ = tables.offsets(n, len(part))
        assert [row[2] for row in got] == offsets, part
        for i, row in zip(chunk, got, strict=True):
            want = ref[i]
            assert isinstance(want, dict)
            assert row[0] == "t" and row[1] == n
            for name, have in zip(names, row[4:], strict=True):
                assert same_value(want[name], stored(have)), (
                    f"{values[i]!r}, {name}: reference {want[name]!r}, native {have!r}"
                )
        # The Arrow path writes the same rows, where it answers; under the same token a
        # second native insert is dropped (one block per token).
        if tables.arrow(n, part):
            assert tables.rows("arrow", n) == got
            tally["arrow_same"] = tally.get("arrow_same", 0) + 1
        assert tables.native(n, part) == "rows"
        assert tables.rows("native", n) == got
    return tally


def test_native_plan_takes_only_the_types_it_vouches_for() -> None:
    assert native_plan(NATIVE) is not None
    assert native_plan(SIMPLE) is not None
    assert native_plan(RICH) is None  # dates, decimals, containers, Float32...
    for ch_type in (
        "Float32",
        "Decimal(9, 2)",
        "Date",
        "DateTime",
        "UUID",
        "Array(Nullable(Int64))",
    ):
        assert (
            native_plan(TableSchema((Column("x", ch_type, nullable="Array" not in ch_type),)))
            is None
        )


@pytest.mark.parametrize("schema", [NATIVE, SIMPLE], ids=["native-types", "simple"])
def test_native_parser_agrees_with_the_reference_or_refuses(
    chdb_client: Client, schema: TableSchema
) -> None:
    generated: list[bytes | None] = []

    @settings(
        max_examples=RECORDS, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(native_records(schema))
    def generate(value: bytes | None) -> None:
        generated.append(value)

    generate()
    tally = check_chunks(chdb_client, schema, generated)
    print(f"[native differential] {len(generated)} records, chunks: {tally}")
    # Every outcome must occur, or the test proves less than it says: chunks taken, chunks
    # refused by the byte scans, and chunks refused inside ClickHouse (its checks ran).
    assert tally.get("rows", 0) >= 2 and tally.get("bytes", 0) >= 2 and tally.get("sql", 0) >= 2


@pytest.mark.parametrize("token", [t.text for t in _LEXICAL] + ["1", "true", '"x"'])
def test_each_leniency_is_refused_unless_the_reference_accepts(
    chdb_client: Client, token: str
) -> None:
    """Every measured leniency, in every column kind, alone in a chunk after a good row."""
    good = {"i8": "1", "i64": "2", "i32n": "null", "f64": "1.5", "bn": "true", "s": '"a"'}

    def text(fields: dict[str, str]) -> bytes:
        return ("{" + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}").encode(
            "utf-8", "surrogatepass"
        )

    base = text(good)
    values = [
        text({**good, column: token})
        for column in ("i8", "u8", "u64", "f64", "b", "bn", "s", "lcs")
    ]
    tables = Tables(chdb_client, NATIVE)
    ref = _verdicts(NATIVE, values)
    assert isinstance(_verdicts(NATIVE, [base])[0], dict)
    names = [c.name for c in NATIVE.columns]
    for n, value in enumerate(values):
        if tables.native(n, [base, value]) != "rows":
            assert tables.rows("native", n) == []
            continue
        want = ref[n]
        assert isinstance(want, dict), f"native path accepted {value!r}: reference {want}"
        got = tables.rows("native", n)[1]
        for name, have in zip(names, got[4:], strict=True):
            assert same_value(want[name], stored(have)), (value, name, want[name], have)


@pytest.mark.parametrize(
    ("number", "string"),
    [
        ('"1"', "2"),
        ('"1"', "true"),
        ('"true"', "1"),
        ('"1.5"', "-0.5e3"),
        ('"7"', "+1"),
        # ClickHouse also reads a signed inf, infinity or nan (any case) into a String column
        ('"1"', "-nan"),
        ('"1"', "+inf"),
        ('"1.5"', "-Infinity"),
        ('"1"', "-INFINITY"),
    ],
)
def test_a_quoted_number_and_an_unquoted_string_in_one_record_are_refused(
    chdb_client: Client, number: str, string: str
) -> None:
    """The quote count alone would balance a quoted number in one column against an unquoted
    value in a String column of the same record: the String column's check must catch it."""
    column = "b" if "true" in number else ("f64" if "." in number else "i8")
    fields = {"i8": "1", "i64": "2", "f64": "1.5", "s": '"a"', column: number, "lcs": string}
    value = ("{" + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}").encode()
    assert isinstance(_verdicts(NATIVE, [value])[0], str)  # the reference refuses it
    tables = Tables(chdb_client, NATIVE)
    assert tables.native(0, [value]) in ("bytes", "sql")
    assert tables.rows("native", 0) == []
