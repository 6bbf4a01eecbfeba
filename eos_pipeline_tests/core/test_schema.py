"""Identifier and type validation: what may reach SQL, and in which spelling."""

from __future__ import annotations

import pytest

from eos_pipeline.core.schema import (
    Column,
    SchemaError,
    SourceColumns,
    TableSchema,
    quote_identifier,
    validate_identifier,
    validate_identifiers,
    validate_type,
)
from eos_pipeline_tests.support.core_readings import column


@pytest.mark.parametrize("name", ["a", "_", "_topic", "Events_2024", "A" * 128, "x1_y2"])
def test_valid_identifiers_pass_unchanged(name: str) -> None:
    assert validate_identifier(name) == name
    assert quote_identifier(name) == "`" + name + "`"


@pytest.mark.parametrize(
    "name",
    [
        "",
        "1abc",
        "a-b",
        "a.b",
        "a b",
        " a",
        "a\n",
        "a;",
        "a`b",
        'a"b',
        "a'b",
        "a--",
        "a/*x*/",
        "événement",
        "t\u0430ble",  # Cyrillic a
        "A" * 129,
        None,
        42,
        b"abc",
    ],
)
def test_invalid_identifiers_are_rejected_naming_field_and_value(name: object) -> None:
    with pytest.raises(SchemaError) as err:
        validate_identifier(name, "table name")
    assert str(err.value).startswith(f"invalid table name {name!r}:")
    with pytest.raises(SchemaError):
        quote_identifier(name)


def test_validate_identifiers_reports_the_first_bad_one() -> None:
    assert validate_identifiers(["a", "b"], "column name") == ["a", "b"]
    with pytest.raises(SchemaError, match="invalid column name 'b c'"):
        validate_identifiers(["a", "b c", "d e"], "column name")


@pytest.mark.parametrize(
    ("declared", "canonical"),
    [
        ("String", "String"),
        ("Int64", "Int64"),
        ("UInt32", "UInt32"),
        ("UInt256", "UInt256"),
        ("Float64", "Float64"),
        ("Bool", "Bool"),
        ("UUID", "UUID"),
        ("Date32", "Date32"),
        ("DateTime", "DateTime"),
        ("DateTime('UTC')", "DateTime('UTC')"),
        ("DateTime64(3)", "DateTime64(3)"),
        ("DateTime64( 3 , 'America/New_York' )", "DateTime64(3, 'America/New_York')"),
        ("DateTime64(9,'Etc/GMT+5')", "DateTime64(9, 'Etc/GMT+5')"),
        ("Nullable(String)", "Nullable(String)"),
        ("LowCardinality(String)", "LowCardinality(String)"),
        ("LowCardinality(Nullable(String))", "LowCardinality(Nullable(String))"),
        ("Array(String)", "Array(String)"),
        ("Array(Array(Nullable(Int8)))", "Array(Array(Nullable(Int8)))"),
        ("Map(String, String)", "Map(String, String)"),
        ("Map(String,Array(UInt8))", "Map(String, Array(UInt8))"),
        ("Decimal(18, 4)", "Decimal(18, 4)"),
        ("Decimal(76,0)", "Decimal(76, 0)"),
        ("FixedString(16)", "FixedString(16)"),
        ("Tuple(String, Int64)", "Tuple(String, Int64)"),
        ("Tuple(a String, b Array(Int64))", "Tuple(a String, b Array(Int64))"),
        ("  String\n", "String"),
        ("JSON", "JSON"),
    ],
)
def test_whitelisted_types_come_back_in_canonical_spelling(declared: str, canonical: str) -> None:
    assert validate_type(declared) == canonical


@pytest.mark.parametrize(
    ("declared", "reason"),
    [
        ("String; DROP TABLE t", "';' is not allowed"),
        ("String -- comment", "'-' is not allowed"),
        ("String /* c */", "'/' is not allowed"),
        ("String # c", "'#' is not allowed"),
        ('Nullable("String")', "'\"' is not allowed"),
        ("`String`", "'`' is not allowed"),
        ("DateTime64(3, 'UTC'); DROP TABLE t", "';' is not allowed"),
        ("DateTime64(3, 'U\\'TC')", "not allowed"),
        ("DateTime64(3, 'a b')", "not allowed"),
        ("DateTime64(3, UTC)", "expected a quoted time zone"),
        ("DateTime64(10)", "precision must be an integer in [0, 9]"),
        ("DateTime64", "unknown or incomplete type 'DateTime64'"),
        ("Decimal(18, 19)", "scale must be an integer in [0, 18]"),
        ("Decimal(0, 0)", "precision must be an integer in [1, 76]"),
        ("Decimal(18)", "expected ','"),
        ("FixedString(0)", "length must be an integer"),
        ("String(5)", "String takes no arguments"),
        ("Strin", "unknown or incomplete type 'Strin'"),
        ("string", "unknown or incomplete type 'string'"),
        ("INT", "unknown or incomplete type 'INT'"),
        ("Enum8('a' = 1)", "'=' is not allowed"),
        ("Enum8", "unknown or incomplete type 'Enum8'"),
        ("Map(String)", "Map takes 2 type argument(s), found 1"),
        ("Nullable(String, String)", "Nullable takes 1 type argument(s), found 2"),
        ("Nullable(Array(String))", "cannot make Array(String) Nullable"),
        ("Nullable(LowCardinality(String))", "cannot make LowCardinality(String) Nullable"),
        ("Nullable(Nullable(String))", "cannot make Nullable(String) Nullable"),
        ("Array(String", "unexpected end of type"),
        ("Array(String))", "unexpected ')'"),
        ("Array()", "expected a type name, found ')'"),
        ("String String", "unexpected 'String'"),
        ("", "expected a type such as 'String'"),
        ("Array(" * 20 + "String" + ")" * 20, "nested deeper than 16"),
        ("Tuple(" + ", ".join(["String"] * 200) + ")", "longer than 512"),
    ],
)
def test_unsafe_or_unknown_types_are_rejected(declared: str, reason: str) -> None:
    with pytest.raises(SchemaError) as err:
        validate_type(declared, "type of column 'x'")
    assert "invalid type of column 'x'" in str(err.value)
    assert reason in str(err.value)


def test_non_string_type_is_rejected() -> None:
    with pytest.raises(SchemaError):
        validate_type(None)


def test_column_normalizes_type_and_applies_nullable_where_clickhouse_wants_it() -> None:
    assert Column("a", "Map(String,String)").ch_type == "Map(String, String)"
    assert Column("a", "String").sql_type == "String"
    assert Column("a", "String", nullable=True).sql_type == "Nullable(String)"
    assert Column("a", "Nullable(String)", nullable=True).sql_type == "Nullable(String)"
    assert (
        Column("a", "LowCardinality(String)", nullable=True).sql_type
        == "LowCardinality(Nullable(String))"
    )
    assert (
        Column("a", "LowCardinality(Nullable(String))", nullable=True).sql_type
        == "LowCardinality(Nullable(String))"
    )


@pytest.mark.parametrize("ch_type", ["Array(String)", "Map(String, Int64)", "Tuple(Int8)", "JSON"])
def test_nullable_composite_columns_are_rejected(ch_type: str) -> None:
    with pytest.raises(SchemaError, match=r"cannot make .* Nullable"):
        Column("a", ch_type, nullable=True)


def test_column_rejects_bad_name_and_bad_defaults() -> None:
    with pytest.raises(SchemaError, match="invalid column name 'a;b'"):
        Column("a;b", "String")
    with pytest.raises(SchemaError, match="invalid type of column 'a'"):
        Column("a", "String; DROP TABLE t")
    with pytest.raises(SchemaError, match="not finite"):
        Column("a", "Float64", default=float("nan"))
    with pytest.raises(SchemaError, match="literal"):
        Column("a", "String", default=["x"])  # type: ignore[arg-type]
    assert Column("a", "String", default="it's").default == "it's"


def test_source_columns_default_and_custom_names() -> None:
    default = SourceColumns()
    assert [(c.name, c.ch_type) for c in default.columns()] == [
        ("_topic", "LowCardinality(String)"),
        ("_partition", "Int32"),
        ("_offset", "Int64"),
        ("_timestamp", "DateTime64(3, 'UTC')"),
    ]
    assert default.order_by == ("_topic", "_partition", "_offset")
    custom = SourceColumns(topic="t", partition="p", offset="o", timestamp=None)
    assert [c.name for c in custom.columns()] == ["t", "p", "o"]
    assert custom.order_by == ("t", "p", "o")


def test_source_column_names_are_validated_and_distinct() -> None:
    with pytest.raises(SchemaError, match="source column name for offset"):
        SourceColumns(offset="off set")
    with pytest.raises(SchemaError, match="distinct"):
        SourceColumns(topic="x", partition="x")
    with pytest.raises(SchemaError, match="source column name for timestamp"):
        SourceColumns(timestamp="")


def test_table_schema_puts_source_columns_first_and_keeps_declared_order() -> None:
    schema = TableSchema.from_mapping({"z": "String", "a": "Int64"})
    assert schema.column_names == ("_topic", "_partition", "_offset", "_timestamp", "z", "a")
    assert column(schema, "a").ch_type == "Int64"
    with pytest.raises(KeyError):
        column(schema, "missing")


def test_table_schema_rejects_clashes() -> None:
    with pytest.raises(SchemaError, match="'_offset' is declared a source column"):
        TableSchema.from_mapping({"_offset": "Int64"})
    with pytest.raises(SchemaError, match="'a' is declared twice"):
        TableSchema((Column("a", "String"), Column("a", "Int64")))
    with pytest.raises(SchemaError, match="must be Column objects"):
        TableSchema(("a",))  # type: ignore[arg-type]
    # With custom source names, the default names are free for payload use.
    schema = TableSchema.from_mapping({"_offset": "Int64"}, SourceColumns(offset="kafka_offset"))
    assert "_offset" in schema.column_names
