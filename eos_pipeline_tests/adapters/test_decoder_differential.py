"""One verdict per record (SPEC §9): the three decoders against each other on a real Spark session.

Generated records over every column type the contract supports (valid values, values of the
wrong JSON type, out of range, missing and null fields, extra and nested fields, odd whitespace,
broken JSON, invalid UTF-8, tombstones, oversized records) go through the per-record reference
(``core.decode.decode_json``), the Arrow bulk decoder (``decode_json_arrow``, where its types
allow) and the Spark decoder of the Hudi sink (``adapters.spark``). Each record must get
the same verdict from all of them: a row with the same values, or the same error class and
message.

``EOS_DIFF_RECORDS`` sets how many records each schema gets (CI: a few hundred; a long run:
``EOS_DIFF_RECORDS=20000``). The count judged is printed.
"""

from __future__ import annotations

import json
import math
import os
import random
import string
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from ipaddress import IPv4Address, IPv6Address
from typing import Any

import pytest
from clickhouse_connect.driver.client import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.spark import KAFKA_SCHEMA, PARSED_COLUMN, tag_json
from eos_pipeline.core.contract import compile_contract, oversized, unwrap
from eos_pipeline.core.decode import decode_json, decode_json_arrow
from eos_pipeline.core.schema import Column, TableSchema

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RECORDS = int(os.environ.get("EOS_DIFF_RECORDS", "400"))
MAX_RECORD_BYTES = 1500

RICH = TableSchema(
    (
        Column("i8", "Int8"),
        Column("u8", "UInt8", default=7),
        Column("i64", "Int64"),
        Column("u64", "UInt64", nullable=True),
        Column("i32n", "Nullable(Int32)"),
        Column("f32", "Float32", nullable=True),
        Column("f64", "Float64"),
        Column("dec", "Decimal(9, 2)", nullable=True),
        Column("b", "Bool", default=False),
        Column("s", "String"),
        Column("fs", "FixedString(4)", nullable=True),
        Column("lcs", "LowCardinality(String)", default="x"),
        Column("uid", "UUID", nullable=True),
        Column("ip4", "IPv4", nullable=True),
        Column("ip6", "IPv6", nullable=True),
        Column("d", "Date", nullable=True),
        Column("d32", "Date32", nullable=True),
        Column("dt", "DateTime", nullable=True),
        Column("dt64", "DateTime64(3, 'UTC')", nullable=True),
        Column("dtb", "DateTime64(6, 'Europe/Berlin')", nullable=True),
        Column("arr", "Array(Int64)"),
        Column("arrn", "Array(Nullable(Int8))", nullable=False, default=None),
        Column("m", "Map(String, Int64)"),
    )
)
# Types the Arrow bulk path can vouch for: it must answer for clean batches and agree.
SIMPLE = TableSchema(
    (
        Column("id", "Int64"),
        Column("small", "UInt8", default=7),
        Column("big", "UInt64", nullable=True),
        Column("name", "String", default="none"),
        Column("score", "Float64", nullable=True),
        Column("flag", "Bool"),
        Column("kind", "LowCardinality(String)", nullable=True),
    )
)


class Raw:
    """JSON text written as is (a number spelled a particular way, a bad token)."""

    def __init__(self, text: str) -> None:
        self.text = text


def dump(value: Any, rng: random.Random) -> str:
    """JSON text with random spacing; ``Raw`` and ``Decimal`` are written verbatim."""
    space = rng.choice(["", "", " ", "\n", "\t ", "  "])
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        body = f",{space}".join(f"{json.dumps(k)}:{space}{dump(v, rng)}" for k, v in items)
        return "{" + space + body + space + "}"
    if isinstance(value, list):
        return "[" + f",{space}".join(dump(v, rng) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return json.dumps(value, ensure_ascii=rng.random() < 0.5)


_text = st.text(st.characters(codec="utf-8"), max_size=6)
_any_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        _text,
        st.sampled_from(
            [
                Raw("1.0"),
                Raw("1e3"),
                Raw("-0"),
                Raw("12.345"),
                Raw("1e400"),
                Raw('"12"'),
                Raw('"\\ud800"'),
                Raw('"\\ud83d\\ude00"'),
                "2024-02-30",
                "2024-01-01T10:00:00+25:00",
                "1969-12-31",
                "2299-12-31 23:59:59.9999999",
                "2106-02-07 06:28:16",
                "not-a-uuid",
                "256.1.1.1",
                "::ffff:1.2.3.4",
                "0.5",
                "abcde",
            ]
        ),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=5,
)


def _iso(moment: datetime, rng: random.Random, digits: int) -> str:
    sep = rng.choice(["T", " "])
    text = moment.strftime(f"%Y-%m-%d{sep}%H:%M:%S")
    if digits:
        text += "." + f"{moment.microsecond:06d}{rng.randrange(1000):03d}"[:digits]
    return text + rng.choice(["", "Z", "+02:00", "-05:30"])


@st.composite
def valid_values(draw: st.DrawFn, schema: TableSchema) -> dict[str, Any]:
    """One value per column that the contract accepts (mostly; edges included)."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    out: dict[str, Any] = {}
    for col in schema.columns:
        base, _ = unwrap(col.ch_type)
        out[col.name] = draw(_valid(base, rng))
    return out


def _valid(base: str, rng: random.Random) -> st.SearchStrategy[Any]:
    ints = {
        "Int8": (-128, 127),
        "UInt8": (0, 255),
        "Int32": (-(2**31), 2**31 - 1),
        "Int64": (-(2**63), 2**63 - 1),
        "UInt64": (0, 2**64 - 1),
    }
    if base in ints:
        low, high = ints[base]
        return st.one_of(st.integers(low, high), st.sampled_from([low, high]))
    if base in ("Float32", "Float64"):
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-9, 9))
    if base.startswith("Decimal"):
        return st.one_of(
            st.decimals(-9999999, 9999999, places=2, allow_nan=False).map(lambda d: d),
            st.decimals(-9999999, 9999999, places=2, allow_nan=False).map(str),
            st.integers(-9999999, 9999999),
        )
    if base == "Bool":
        return st.booleans()
    if base in ("String",):
        return _text
    if base.startswith("FixedString"):
        return st.text(string.ascii_letters, max_size=4)
    if base == "UUID":
        return st.uuids().map(lambda u: str(u).upper() if rng.random() < 0.3 else str(u))
    if base == "IPv4":
        return st.ip_addresses(v=4).map(str)
    if base == "IPv6":
        return st.ip_addresses(v=6).map(str)
    if base == "Date":
        return st.dates(date(1970, 1, 1), date(2149, 6, 6)).map(str)
    if base == "Date32":
        return st.dates(date(1900, 1, 1), date(2299, 12, 31)).map(str)
    if base.startswith("DateTime64"):
        return st.datetimes(datetime(1900, 1, 2), datetime(2299, 12, 30)).map(
            lambda m: _iso(m, rng, rng.choice([0, 3, 6, 9]))
        )
    if base.startswith("DateTime"):
        return st.one_of(
            st.integers(0, 2**32 - 1),
            st.datetimes(datetime(1970, 1, 2), datetime(2106, 2, 6)).map(lambda m: _iso(m, rng, 0)),
        )
    if base == "Array(Int64)":
        return st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)
    if base == "Array(Nullable(Int8))":
        return st.lists(st.none() | st.integers(-128, 127), max_size=3)
    if base == "Map(String, Int64)":
        return st.dictionaries(_text, st.integers(-(2**63), 2**63 - 1), max_size=3)
    raise AssertionError(f"no generator for {base}")


@st.composite
def records(draw: st.DrawFn, schema: TableSchema) -> tuple[bytes | None, bytes | None]:
    """A (key, value) pair: mostly valid objects with a few perturbed fields, some broken."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    key = draw(st.none() | st.binary(max_size=8))
    shape = draw(st.integers(0, 99))
    if shape < 3:
        return key, None  # tombstone
    obj = draw(valid_values(schema))
    names = [c.name for c in schema.columns]
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):
        name = draw(st.sampled_from(names))
        action = draw(st.integers(0, 9))
        if action < 2:
            obj.pop(name, None)
        elif action < 3:
            obj[name] = None
        else:
            obj[name] = draw(_any_json)
    if draw(st.booleans()):
        obj[draw(_text)] = draw(_any_json)  # an extra (maybe nested) field
    text = dump(obj, rng)
    if shape < 6:
        text = " " * rng.randrange(3) + text + rng.choice(["", " ", "\n", " x", " {}", ","])
    value = text.encode("utf-8", "surrogatepass")
    if shape in (6, 7):
        at = rng.randrange(len(value) + 1)
        value = value[:at] + rng.choice([b"\xff", b"\xc3", b"{", b"}", b'"', b"\x00"]) + value[at:]
    if shape == 8:
        value = b"[" + value + b"]"
    if shape == 9:
        value = value[:-1] + b', "pad": "' + b"p" * MAX_RECORD_BYTES + b'"}'
    return key, value


def spark_verdicts(
    spark: SparkSession, schema: TableSchema, pairs: list[tuple[bytes | None, bytes | None]]
) -> dict[int, tuple[str, Any]]:
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    frame = spark.createDataFrame(
        [("t", 0, i, stamp, k, v) for i, (k, v) in enumerate(pairs)], KAFKA_SCHEMA
    ).repartition(2)  # two tasks, several Arrow batches
    tagged = tag_json(frame, schema, max_record_bytes=MAX_RECORD_BYTES)
    out: dict[int, tuple[str, Any]] = {}
    for row in tagged.collect():
        if row["error_class"] is not None:
            out[row["offset"]] = (row["error_class"], row["error"])
        else:
            out[row["offset"]] = ("row", row[PARSED_COLUMN].asDict(recursive=True))
    return out


def reference_verdicts(
    schema: TableSchema, pairs: list[tuple[bytes | None, bytes | None]]
) -> dict[int, tuple[str, Any]]:
    out: dict[int, tuple[str, Any]] = {}
    kept = []
    for i, (key, value) in enumerate(pairs):
        message = oversized(key, value, MAX_RECORD_BYTES)
        if message is not None:
            out[i] = ("Oversized", message)
        else:
            kept.append(i)
    decoded = decode_json([pairs[i][1] for i in kept], schema)
    for bad in decoded.bad:
        out[kept[bad.index]] = (str(bad.error_class), bad.message)
    for n, position in enumerate(decoded.index):
        out[kept[position]] = ("row", {k: v[n] for k, v in decoded.columns.items()})
    return out


def same(ref: Any, got: Any) -> bool:
    """Equal as stored: Spark hands back UInt64 as Decimal, timestamps as local naive times."""
    if isinstance(ref, float):
        return isinstance(got, float) and (ref == got or (math.isnan(ref) and math.isnan(got)))
    if isinstance(ref, datetime):
        return isinstance(got, datetime) and got.astimezone(UTC) == ref
    if isinstance(ref, int) and isinstance(got, Decimal):
        return Decimal(ref) == got
    if isinstance(ref, list):
        return isinstance(got, list) and len(ref) == len(got) and all(map(same, ref, got))
    if isinstance(ref, dict):
        return (
            isinstance(got, dict)
            and ref.keys() == got.keys()
            and all(same(ref[k], got[k]) for k in ref)
        )
    return type(ref) is type(got) and ref == got


def compare(
    spark: SparkSession, schema: TableSchema, pairs: list[tuple[bytes | None, bytes | None]]
) -> dict[str, int]:
    ref = reference_verdicts(schema, pairs)
    got = spark_verdicts(spark, schema, pairs)
    assert got.keys() == ref.keys()
    tally: dict[str, int] = {}
    for i in sorted(ref):
        (ref_kind, ref_value), (got_kind, got_value) = ref[i], got[i]
        assert ref_kind == got_kind, f"record {pairs[i]!r}: reference {ref[i]}, Spark {got[i]}"
        if ref_kind == "row":
            for name, value in ref_value.items():
                assert same(value, got_value[name]), (
                    f"record {pairs[i]!r}, column {name}: reference {value!r}, "
                    f"Spark {got_value[name]!r}"
                )
        else:
            assert ref_value == got_value
        tally[ref_kind] = tally.get(ref_kind, 0) + 1
    # The Arrow bulk path, over small chunks of every record and over the clean ones: where it
    # answers, every record of the chunk is a row with the reference's values.
    clean = [i for i in sorted(ref) if ref[i][0] == "row"]
    chunks = [list(range(n, min(n + 4, len(pairs)))) for n in range(0, len(pairs), 4)]
    for chunk in [*chunks, clean]:
        chunk = [i for i in chunk if ref[i][0] != "Oversized"]
        bulk = decode_json_arrow([pairs[i][1] for i in chunk], schema) if chunk else None
        if bulk is None:
            continue
        for i, have in zip(chunk, bulk.to_pylist(), strict=True):
            assert ref[i][0] == "row", f"bulk path accepted {pairs[i]!r}: reference {ref[i]}"
            want = ref[i][1]
            assert all(same(want[k], have[k]) for k in want), f"bulk {have} != {want}"
        tally["bulk_answered"] = tally.get("bulk_answered", 0) + 1
    return tally


def test_every_supported_type_compiles_to_a_spark_schema(spark: SparkSession) -> None:
    compile_contract(RICH)
    minimal = {"i8": 1, "i64": 2, "f64": 1.5, "s": "a", "arr": [], "arrn": [None], "m": {}}
    pairs: list[tuple[bytes | None, bytes | None]] = [(None, json.dumps(minimal).encode())]
    ref = reference_verdicts(RICH, pairs)
    assert ref[0][0] == "row", ref
    assert compare(spark, RICH, pairs) == {"row": 1}


@pytest.mark.parametrize("schema", [RICH, SIMPLE], ids=["every-type", "bulk-types"])
def test_three_decoders_give_one_verdict_per_record(
    spark: SparkSession, schema: TableSchema
) -> None:
    # Hypothesis generates the records; Spark then judges them all in one job (a job per
    # example would cost a second each). A failure names the record's bytes.
    generated: list[tuple[bytes | None, bytes | None]] = []

    @settings(
        max_examples=RECORDS,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(records(schema))
    def generate(pair: tuple[bytes | None, bytes | None]) -> None:
        generated.append(pair)

    generate()
    totals = compare(spark, schema, generated)
    judged = sum(v for k, v in totals.items() if k != "bulk_answered")
    print(f"[differential] {judged} records judged alike by all decoders: {totals}")
    # The generator must exercise both sides of the contract, not just one.
    assert totals.get("row", 0) > len(generated) // 20
    assert sum(v for k, v in totals.items() if k not in ("row", "bulk_answered")) > judged // 20


def test_clean_batches_take_the_bulk_path_in_spark_too(spark: SparkSession) -> None:
    pairs = [
        (None, json.dumps({"id": i, "big": 2**64 - 1, "flag": i % 2 == 0, "score": i / 7}).encode())
        for i in range(300)
    ]
    tally = compare(spark, SIMPLE, pairs)
    assert tally["row"] == 300 and tally["bulk_answered"] == 76  # 75 chunks and the whole


def stored(value: Any) -> Any:
    """A value as clickhouse-connect reads it back, in the contract's canonical form."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, (uuid.UUID, IPv4Address, IPv6Address)):
        return str(value)
    if isinstance(value, bytes):  # FixedString: padded with NUL bytes to its length
        return value.rstrip(b"\0").decode()
    if isinstance(value, list):
        return [stored(v) for v in value]
    if isinstance(value, dict):
        return {k: stored(v) for k, v in value.items()}
    return value


def test_clickhouse_stores_the_values_the_contract_returns(chdb_client: Client) -> None:
    """The ClickHouse half of "the same values": the contract's rows go in and come back."""
    generated: list[tuple[bytes | None, bytes | None]] = []

    @settings(max_examples=150, deadline=None, database=None)
    @given(valid_values(RICH))
    def generate(obj: dict[str, Any]) -> None:
        generated.append((None, dump(obj, random.Random(len(generated))).encode()))

    generate()
    decoded = decode_json([v for _, v in generated], RICH)
    assert len(decoded.index) > len(generated) // 2, decoded.bad[:3]
    sink = ClickHouseSink(chdb_client)
    database = f"contract_{uuid.uuid4().hex[:8]}"
    sink.ensure_table(database, "t", RICH)
    columns = dict(decoded.columns)
    rows = len(decoded.index)
    columns |= {"_topic": ["t"] * rows, "_partition": [0] * rows, "_offset": decoded.index}
    columns["_timestamp"] = [datetime(2026, 1, 1, tzinfo=UTC)] * rows
    assert sink.insert_chunk(database, "t", columns, "token-1") == rows
    names = [c.name for c in RICH.columns]
    result = chdb_client.query(
        f"SELECT _offset, {', '.join(f'`{n}`' for n in names)} FROM `{database}`.`t` "
        "ORDER BY _offset"
    )
    back = {row[0]: dict(zip(names, row[1:], strict=True)) for row in result.result_rows}
    assert len(back) == rows
    for n, offset in enumerate(decoded.index):
        for name in names:
            want, have = decoded.columns[name][n], stored(back[offset][name])
            assert same(want, have), f"{generated[offset]!r}, {name}: {want!r} != {have!r}"
