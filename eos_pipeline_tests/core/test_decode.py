"""The bulk (Arrow) decoder against the per-record reference decoder.

The bulk path may only ever answer when the reference would have accepted every record with the
same values; otherwise it must decline (None) so the reference judges the chunk and names the
dead letters. The property test throws valid, odd and broken JSON at both and compares.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eos_pipeline.core.decode import add_source_columns, decode_json, decode_json_arrow
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import Column, SchemaError, SourceColumns, TableSchema

SCHEMA = TableSchema(
    (
        Column("id", "Int64"),
        Column("small", "UInt8", default=7),
        Column("name", "String", default="none"),
        Column("score", "Float64", nullable=True),
        Column("flag", "Bool"),
        Column("kind", "LowCardinality(String)", nullable=True),
    )
)
FLOAT_COLUMNS = {"score"}


def same_value(column: str, ref: Any, fast: Any) -> bool:
    if column in FLOAT_COLUMNS and ref is not None and fast is not None:
        ref = float(ref)  # the reference passes ints through; ClickHouse stores a double
        return (math.isnan(ref) and math.isnan(fast)) or (ref == fast and type(fast) is float)
    return type(ref) is type(fast) and ref == fast


def assert_agree(values: list[bytes | None], schema: TableSchema = SCHEMA) -> bool:
    """Compare both decoders; return whether the bulk path answered."""
    ref = decode_json(values, schema)
    fast = decode_json_arrow(values, schema)
    if fast is None:
        return False
    assert not ref.bad, f"bulk path accepted records the reference rejects: {ref.bad}"
    assert ref.index == list(range(len(values)))
    got = fast.to_pydict()
    assert list(got) == [c.name for c in schema.columns]
    for name, column in ref.columns.items():
        assert len(got[name]) == len(column)
        for i, (r, f) in enumerate(zip(column, got[name], strict=True)):
            assert same_value(name, r, f), f"{name}[{i}]: reference {r!r}, bulk {f!r}"
    return True


def good(i: int, **extra: Any) -> bytes:
    obj = {"id": i, "small": i % 256, "name": f"n{i}", "score": i / 3, "flag": i % 2 == 0}
    obj.update(extra)
    return json.dumps(obj).encode()


def test_plain_records_take_the_bulk_path_with_identical_values() -> None:
    values = [good(i) for i in range(50)] + [
        b'{"id": -0, "flag": false, "score": 3, "ignored": {"deep": [1, {"x": null}]}}',
        b'{"id":9223372036854775807,"flag":true,"name":"\\u00e9\\ud83d\\ude00\\n","score":NaN}',
        b'{"i\\u0064": 5, "flag": true, "small": null, "kind": null, "score": -Infinity}',
    ]
    assert assert_agree(values)
    table = decode_json_arrow(values, SCHEMA)
    assert table is not None and table.column("small")[52].as_py() == 7  # default for null


@pytest.mark.parametrize(
    "odd",
    [
        None,  # tombstone
        b"",
        b" " + good(1),  # valid JSON for the reference, refused by the byte scan
        good(1) + b"\r",
        b'{"id": 1,\n"flag": true}',  # a newline between tokens
        good(1) + b" " + good(2),  # two objects in one value
        b'{"id": 1, "id": 2, "flag": true}',  # duplicate key: the reference keeps the last
        b'{"id": 1.0, "flag": true}',
        b'{"id": "1", "flag": true}',
        b'{"id": true, "flag": true}',
        b'{"id": 1, "flag": 1}',
        b'{"id": 1, "small": 256, "flag": true}',
        b'{"id": 1, "small": -1, "flag": true}',
        b'{"id": 99999999999999999999, "flag": true}',
        b'{"id": 1, "flag": true, "name": 5}',
        b'{"id": 1, "flag": true, "score": "1.5"}',
        b'{"id": 1, "flag": true, "score": 1e400}',
        b'{"flag": true}',  # required field missing
        b'{"id": null, "flag": true}',
        b'{"id": 1, "flag": true, "name": "\xff"}',
        b'{"id": 1, "flag": true, "name": "\\ud800"}',
        b'{"id": 1, "flag": true, "name": "a\tb"}',
        b"[1, 2]",
        b"{not json",
    ],
)
def test_anything_unusual_goes_to_the_reference_or_agrees_with_it(odd: bytes | None) -> None:
    values = [good(0), odd, good(2)]
    if decode_json(values, SCHEMA).bad:
        assert decode_json_arrow(values, SCHEMA) is None
    else:
        # Valid for the reference too (a newline or blank between tokens, leading blanks):
        # the bulk path may answer, but only with the reference's values.
        assert_agree(values)


def test_schemas_with_types_arrow_cannot_vouch_for_use_the_reference() -> None:
    for ch_type, value in [("Float32", 0.1), ("DateTime64(3)", 1), ("Array(Int64)", [1])]:
        schema = TableSchema((Column("id", "Int64"), Column("x", ch_type)))
        values = [json.dumps({"id": 1, "x": value}).encode()]
        assert decode_json_arrow(values, schema) is None
    # A default the contract would refuse as a value is a configuration error, for both paths.
    mismatched_default = TableSchema((Column("id", "Int64", default="5"),))
    with pytest.raises(SchemaError, match=r"default '5'.*does not fit Int64"):
        decode_json_arrow([b'{"id": 1}'], mismatched_default)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)
_objects = st.dictionaries(
    st.sampled_from(["id", "small", "name", "score", "flag", "kind", "other"]), _scalars
)
_fragments = st.sampled_from(
    [b"", b" ", b"\n", b"\r", b"}", b"{", b",", b'"id":1', b"\xff", b"\\ud800", b"NaN", b"\t"]
)


@st.composite
def _value(draw: st.DrawFn) -> bytes | None:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return None
    text = json.dumps(draw(_objects), allow_nan=True).encode()
    if kind <= 6:
        return text
    # Splice a fragment somewhere: most splices break the value, some keep it valid JSON.
    at = draw(st.integers(0, len(text)))
    return text[:at] + draw(_fragments) + text[at:]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_value(), min_size=1, max_size=6))
def test_bulk_path_never_disagrees_with_the_reference(values: list[bytes | None]) -> None:
    assert_agree(values)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(good, st.integers(0, 10**6)), min_size=1, max_size=8))
def test_well_formed_chunks_always_take_the_bulk_path(values: list[bytes]) -> None:
    assert assert_agree(values)


def test_source_columns_are_typed_for_the_table() -> None:
    payload = decode_json_arrow([good(1), good(2)], SCHEMA)
    assert payload is not None
    table = add_source_columns(
        payload, SourceColumns(), TopicPartition("t", 3), [10, 12], [1767323045678, 1767323045679]
    )
    assert table.column("_topic").to_pylist() == ["t", "t"]
    assert table.schema.field("_partition").type == pa.int32()
    assert table.column("_offset").to_pylist() == [10, 12]
    assert table.schema.field("_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert table.column("_timestamp")[0].value == 1767323045678
    without_time = add_source_columns(
        payload, SourceColumns(timestamp=None), TopicPartition("t", 0), [1, 2], [0, 0]
    )
    assert "_timestamp" not in without_time.column_names
    with pytest.raises(ValueError, match="offsets"):
        add_source_columns(payload, SourceColumns(), TopicPartition("t", 0), [1], [0, 0])


def test_chunks_larger_than_one_arrow_block_agree_too() -> None:
    # Arrow parses blocks of a few MiB on several threads: a value with a newline between its
    # tokens may straddle a block boundary. Either way the answer must be the reference's.
    filler = "x" * 1500
    values = [good(i, note=filler) for i in range(4000)]
    assert assert_agree(values)
    for at in (10, 2700, 3999):
        odd = list(values)
        odd[at] = odd[at].replace(b'"name":', b'\n"name":\n', 1)
        assert_agree(odd)
        odd[at] = odd[at].replace(b"\n", b"\n{}\n", 1)  # a line that is an object of its own
        assert decode_json_arrow(odd, SCHEMA) is None
