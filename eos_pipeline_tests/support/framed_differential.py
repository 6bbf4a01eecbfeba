"""One generated case of the framed-format differential tests (Avro, Protobuf): the ClickHouse
sink's decoder, the Hudi sink's Spark decoder and confluent-kafka's own deserializer on the
same framed bytes must agree record by record."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st
from pyspark.sql import SparkSession

from eos_pipeline.adapters.registry import decode_values
from eos_pipeline.core.contract import compile_contract
from eos_pipeline.core.schema import Column, TableSchema
from eos_pipeline_tests.adapters.test_decoder_differential import same, spark_verdicts

#: Verdicts on the bytes themselves, before any column rule: a strict reader refuses them too.
FRAMING_VERDICTS = frozenset({"BadFraming", "UnknownSchemaId", "DecodeError"})


def table_against(draw: st.DrawFn, fields: Sequence[tuple[str, Sequence[str]]]) -> TableSchema:
    """A table schema for generated writer fields (name, column types to try: the first fits,
    the others may not), sometimes with a column the writer does not have."""
    columns = []
    for name, column_types in fields:
        # mostly a column that fits, so that most schemas also give rows
        column_type = draw(st.sampled_from([column_types[0]] * 8 + list(column_types[1:])))
        columns.append(Column(name, column_type))
    if draw(st.integers(0, 3)) == 0:  # a column the writer does not have
        columns.append(
            draw(
                st.sampled_from(
                    [
                        Column("absent", "Int64", default=5),
                        Column("absent", "Nullable(String)"),
                        Column("absent", "String"),  # required: every record is MissingField
                    ]
                )
            )
        )
    table = TableSchema(tuple(columns))
    try:
        compile_contract(table)
    except ValueError:
        table = TableSchema(tuple(Column(c.name, "String", nullable=True) for c in columns))
    return table


def judge_alike(
    spark: SparkSession,
    schema: TableSchema,
    subject: str,
    records: Sequence[tuple[bytes, int]],
    read_back: Callable[[bytes], dict[str, Any]],
    tally: Counter[str],
    *,
    damaged_may_be_rows: bool = False,
    reader_refuses_bad_bytes: bool = False,
) -> None:
    """Judge ``records`` (framed value, how it was damaged: 0 not at all) by both sinks'
    decoders and compare: the same verdict and message, the same row values; each row's
    columns as ``read_back`` (confluent-kafka's deserializer, as plain fields) reads them.

    ``damaged_may_be_rows``: a damaged value may still be a value of its schema (a Protobuf
    message cut at a field boundary is one). ``reader_refuses_bad_bytes``: ``read_back`` must
    raise exactly for the verdicts on the bytes (:data:`FRAMING_VERDICTS`).
    """
    values: list[bytes | None] = [v for v, _ in records]
    decoded = decode_values(values, schema)
    reference: dict[int, tuple[str, Any]] = {
        b.index: (str(b.error_class), b.message) for b in decoded.bad
    }
    for n, position in enumerate(decoded.index):
        reference[position] = ("row", {k: v[n] for k, v in decoded.columns.items()})
    got = spark_verdicts(spark, schema, [(None, v) for v in values])
    for i, (value, how) in enumerate(records):
        kind, ref_value = reference[i]
        got_kind, got_value = got[i]
        assert kind == got_kind, f"{subject} value {value!r}: {reference[i]} vs {got[i]}"
        tally[kind] += 1
        if kind != "row":
            assert ref_value == got_value
            if reader_refuses_bad_bytes and kind in FRAMING_VERDICTS:
                try:
                    read_back(value)
                except Exception:
                    continue
                raise AssertionError(f"{subject}: {kind} for {value!r}, but confluent read it")
            if reader_refuses_bad_bytes:
                read_back(value)  # a column rule's verdict: the bytes themselves are fine
            continue
        assert damaged_may_be_rows or how == 0, f"damaged value {value!r} ({how}) became a row"
        for name, want in ref_value.items():
            assert same(want, got_value[name]), (subject, name, want, got_value[name])
        theirs = read_back(value)
        for column in schema.columns:
            if column.name in theirs and theirs[column.name] is not None:
                expected, mine = theirs[column.name], ref_value[column.name]
                assert close(expected, mine), (subject, column, expected, mine)


def close(raw: Any, canonical: Any) -> bool:
    """A value as the writer's format holds it against the contract's canonical value."""
    if isinstance(raw, str) and not isinstance(canonical, str):
        return True  # an ISO date/time or base64 text, converted by the contract's rules
    if isinstance(raw, float) and isinstance(canonical, float):
        return raw == canonical or (raw != raw and canonical != canonical)
    if isinstance(raw, Decimal | int) and isinstance(canonical, Decimal | int):
        return Decimal(raw) == Decimal(canonical)
    if isinstance(raw, list) and isinstance(canonical, list):
        return len(raw) == len(canonical) and all(map(close, raw, canonical))
    if isinstance(raw, dict) and isinstance(canonical, dict):
        return raw.keys() == canonical.keys() and all(close(raw[k], canonical[k]) for k in raw)
    return raw == canonical
