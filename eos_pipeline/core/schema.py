"""Declared table schemas, and the validation that keeps them safe to splice into SQL (pure).

Names and type strings from configuration end up in DDL, where they cannot be query parameters,
so each is checked against a strict grammar *before* any SQL is built (identifiers are
backtick-quoted anyway; types parse under a whitelist grammar). Types come back in ClickHouse's
canonical spelling, to compare with what ``system.columns`` reports. A schema also carries how
values are written (:class:`PayloadFormat`), so everything judging records reads them alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Format(StrEnum):
    """The wire format of record values (the pipelines file's ``format:``)."""

    JSON = "json"  #: a JSON object per value, no framing
    AVRO = "avro"  #: Confluent framing + Avro binary
    PROTOBUF = "protobuf"  #: Confluent framing + message indexes + Protobuf binary
    JSON_SCHEMA = "json_schema"  #: Confluent framing + a JSON object

    @property
    def framed(self) -> bool:
        """True when values carry the Confluent header and need the registry."""
        return self is not Format.JSON

    @property
    def schema_type(self) -> str:
        """The registry's ``schemaType`` this format's writer schemas must have."""
        return {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}.get(self, "")


@dataclass(frozen=True, slots=True)
class Secret:
    """A literal value, or the name of the environment variable that holds it."""

    value: str | None = None
    env: str | None = None

    def __repr__(self) -> str:  # never print a literal secret in a log or an error
        return f"Secret(env={self.env!r})" if self.env else "Secret(***)"


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    """Where the schema registry is (its Confluent-compatible API) and how to log in."""

    url: str
    username: str | None = None
    password: Secret | None = None
    token: Secret | None = None
    #: Seconds per registry request before it counts as unreachable.
    timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class PayloadFormat:
    kind: Format = Format.JSON
    registry: RegistrySettings | None = None

    def __post_init__(self) -> None:
        if self.kind.framed and self.registry is None:
            raise ValueError(f"format {self.kind.value} needs a schema registry (registry.url)")


JSON_FORMAT = PayloadFormat()


IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

# Types written without arguments.
_PLAIN_TYPES = frozenset(
    {"String", "Bool", "UUID", "Date", "Date32", "IPv4", "IPv6", "JSON", "BFloat16"}
    | {"Float32", "Float64"}
    | {f"{sign}Int{bits}" for sign in ("", "U") for bits in (8, 16, 32, 64, 128, 256)}
)
# Types that take other types as arguments, with their arity (None: one or more).
_WRAPPERS: dict[str, int | None] = dict(Nullable=1, LowCardinality=1, Array=1, Map=2, Tuple=None)
# Types that ClickHouse refuses to wrap in Nullable(...).
NOT_NULLABLE = ("Nullable(", "LowCardinality(", "Array(", "Map(", "Tuple(", "JSON")

_MAX_TYPE_LENGTH = 512
_MAX_DEPTH = 16
_TOKEN_RE = re.compile(
    r"[ \t\r\n]*(?:([A-Za-z_][A-Za-z0-9_]*)|([0-9]+)|('[A-Za-z0-9_/+\-]{1,64}')|([(),]))"
)


class SchemaError(ValueError):
    """A declared name, type or schema is unusable; the message names the field and value."""


def validate_identifier(value: object, what: str = "identifier") -> str:
    if not isinstance(value, str) or not IDENTIFIER_RE.fullmatch(value):
        raise SchemaError(
            f"invalid {what} {value!r}: must match {IDENTIFIER_RE.pattern} "
            "(ASCII letter or '_' first, then letters, digits or '_', at most 128 characters)"
        )
    return value


def quote_identifier(value: object, what: str = "identifier") -> str:
    """Validated and backtick-quoted: never read as SQL syntax."""
    return f"`{validate_identifier(value, what)}`"


def validate_type(ch_type: object, what: str = "column type") -> str:
    """The canonical spelling of a type the whitelist grammar accepts."""
    if not isinstance(ch_type, str) or not ch_type.strip():
        raise SchemaError(f"invalid {what} {ch_type!r}: expected a type such as 'String'")
    if len(ch_type) > _MAX_TYPE_LENGTH:
        raise SchemaError(f"invalid {what} {ch_type[:40]!r}...: longer than {_MAX_TYPE_LENGTH}")
    try:
        return _TypeParser(ch_type).parse()
    except _ParseError as ex:
        raise SchemaError(f"invalid {what} {ch_type!r}: {ex}") from None


class _ParseError(Exception):
    pass


class _TypeParser:
    """Recursive descent over the whitelist grammar; anything it does not know is an error."""

    def __init__(self, text: str) -> None:
        self.tokens = self._tokenize(text)
        self.pos = 0

    @staticmethod
    def _tokenize(text: str) -> list[str]:
        tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN_RE.match(text, pos)
            if not match:
                bad = text[pos:].lstrip()[:1]
                raise _ParseError(f"character {bad!r} is not allowed in a type")
            tokens.append(next(g for g in match.groups() if g is not None))
            pos = match.end()
        return tokens

    def parse(self) -> str:
        result = self._type(depth=0)
        if self.pos != len(self.tokens):
            raise _ParseError(f"unexpected {self.tokens[self.pos]!r} after {result!r}")
        return result

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> str:
        token = self._peek()
        if token is None:
            raise _ParseError("unexpected end of type")
        if expected is not None and token != expected:
            raise _ParseError(f"expected {expected!r}, found {token!r}")
        self.pos += 1
        return token

    def _int(self, what: str, low: int, high: int) -> int:
        token = self._take()
        if not token.isdigit() or not low <= int(token) <= high:
            raise _ParseError(f"{what} must be an integer in [{low}, {high}], found {token!r}")
        return int(token)

    def _type(self, depth: int) -> str:
        if depth > _MAX_DEPTH:
            raise _ParseError(f"nested deeper than {_MAX_DEPTH} levels")
        name = self._take()
        if not IDENTIFIER_RE.fullmatch(name):
            raise _ParseError(f"expected a type name, found {name!r}")
        has_args = self._peek() == "("
        if name in _PLAIN_TYPES:
            if has_args:
                raise _ParseError(f"{name} takes no arguments")
            return name
        if name == "DateTime" and not has_args:
            return name
        if not has_args:
            raise _ParseError(f"unknown or incomplete type {name!r}")
        self._take("(")
        if name == "DateTime":
            tz = self._timezone()
            self._take(")")
            return f"DateTime({tz})"
        if name == "DateTime64":
            precision = self._int("DateTime64 precision", 0, 9)
            tz = None
            if self._peek() == ",":
                self._take(",")
                tz = self._timezone()
            self._take(")")
            return f"DateTime64({precision}, {tz})" if tz else f"DateTime64({precision})"
        if name == "Decimal":
            precision = self._int("Decimal precision", 1, 76)
            self._take(",")
            scale = self._int("Decimal scale", 0, precision)
            self._take(")")
            return f"Decimal({precision}, {scale})"
        if name == "FixedString":
            length = self._int("FixedString length", 1, 1 << 20)
            self._take(")")
            return f"FixedString({length})"
        if name not in _WRAPPERS:
            raise _ParseError(f"unknown type {name!r}")
        args = [self._element(name, depth)]
        while self._peek() == ",":
            self._take(",")
            args.append(self._element(name, depth))
        self._take(")")
        arity = _WRAPPERS[name]
        if arity is not None and len(args) != arity:
            raise _ParseError(f"{name} takes {arity} type argument(s), found {len(args)}")
        if name == "Nullable" and args[0].startswith(NOT_NULLABLE):
            raise _ParseError(f"ClickHouse cannot make {args[0]} Nullable")
        return f"{name}({', '.join(args)})"

    def _element(self, parent: str, depth: int) -> str:
        # Tuple elements may be named: `Tuple(a String, b Int64)`.
        nxt = self.tokens[self.pos + 1] if self.pos + 1 < len(self.tokens) else None
        if parent == "Tuple" and nxt is not None and IDENTIFIER_RE.fullmatch(nxt):
            element_name = self._take()
            if not IDENTIFIER_RE.fullmatch(element_name):
                raise _ParseError(f"invalid Tuple element name {element_name!r}")
            return f"{element_name} {self._type(depth + 1)}"
        return self._type(depth + 1)

    def _timezone(self) -> str:
        token = self._take()
        if not token.startswith("'"):
            raise _ParseError(f"expected a quoted time zone such as 'UTC', found {token!r}")
        return token


@dataclass(frozen=True, slots=True)
class Column:
    """One declared column. ``default`` is a literal value, never an SQL expression."""

    name: str
    ch_type: str
    nullable: bool = False
    default: str | int | float | bool | None = None

    def __post_init__(self) -> None:
        validate_identifier(self.name, "column name")
        canonical = validate_type(self.ch_type, f"type of column {self.name!r}")
        object.__setattr__(self, "ch_type", canonical)
        if self.nullable:
            base = _strip_low_cardinality(canonical)
            if not base.startswith("Nullable(") and base.startswith(NOT_NULLABLE):
                raise SchemaError(
                    f"column {self.name!r}: ClickHouse cannot make {canonical} Nullable; "
                    "make its elements Nullable or give it a default instead"
                )
        if isinstance(self.default, float) and not math.isfinite(self.default):
            raise SchemaError(f"column {self.name!r}: default {self.default!r} is not finite")
        if self.default is not None and not isinstance(self.default, (str, int, float, bool)):
            raise SchemaError(
                f"column {self.name!r}: default must be a str, int, float or bool literal, "
                f"got {type(self.default).__name__}"
            )

    @property
    def sql_type(self) -> str:
        """The type as it goes into DDL, with ``nullable`` applied where ClickHouse wants it."""
        base = _strip_low_cardinality(self.ch_type)
        if not self.nullable or base.startswith("Nullable("):
            return self.ch_type
        if base != self.ch_type:
            return f"LowCardinality(Nullable({base}))"
        return f"Nullable({self.ch_type})"


def _strip_low_cardinality(ch_type: str) -> str:
    prefix = "LowCardinality("
    return ch_type[len(prefix) : -1] if ch_type.startswith(prefix) else ch_type


@dataclass(frozen=True, slots=True)
class SourceColumns:
    """Names of the columns saying where each row came from (``timestamp`` None: none)."""

    topic: str = "_topic"
    partition: str = "_partition"
    offset: str = "_offset"
    timestamp: str | None = "_timestamp"

    def __post_init__(self) -> None:
        for what in ("topic", "partition", "offset", "timestamp"):
            value = getattr(self, what)
            if what == "timestamp" and value is None:
                continue
            validate_identifier(value, f"source column name for {what}")
        names = [n for n in (self.topic, self.partition, self.offset, self.timestamp) if n]
        if len(set(names)) != len(names):
            raise SchemaError(f"source column names must be distinct, got {names}")

    def columns(self) -> tuple[Column, ...]:
        cols = [
            Column(self.topic, "LowCardinality(String)"),
            Column(self.partition, "Int32"),
            Column(self.offset, "Int64"),
        ]
        if self.timestamp is not None:
            cols.append(Column(self.timestamp, "DateTime64(3, 'UTC')"))
        return tuple(cols)

    @property
    def order_by(self) -> tuple[str, str, str]:
        return (self.topic, self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class TableSchema:
    """Payload columns plus the source columns every pipeline table carries. ``schema_id``: the
    writer schema the columns come from, raised as the table evolves (None: a written
    ``schema:``, which never evolves on its own)."""

    columns: tuple[Column, ...]
    source: SourceColumns = field(default_factory=SourceColumns)
    format: PayloadFormat = JSON_FORMAT
    schema_id: int | None = None

    def __post_init__(self) -> None:
        cols = tuple(self.columns)
        object.__setattr__(self, "columns", cols)
        for col in cols:
            if not isinstance(col, Column):
                raise SchemaError(f"columns must be Column objects, got {col!r}")
        seen: set[str] = set()
        for col in self.all_columns:
            if col.name in seen:
                source = col.name in {c.name for c in self.source.columns()}
                clash = "a source column" if source else "twice"
                raise SchemaError(f"column {col.name!r} is declared {clash}")
            seen.add(col.name)

    @classmethod
    def from_mapping(
        cls,
        columns: Mapping[str, str],
        source: SourceColumns | None = None,
        payload_format: PayloadFormat = JSON_FORMAT,
    ) -> TableSchema:
        """From ``{"name": "Type"}`` as configured, in order."""
        return cls(
            tuple(Column(name, ch_type) for name, ch_type in columns.items()),
            source or SourceColumns(),
            payload_format,
        )

    @property
    def all_columns(self) -> tuple[Column, ...]:
        """Source columns first, as the table is created."""
        return self.source.columns() + self.columns

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.all_columns)


def validate_identifiers(values: Iterable[object], what: str) -> list[str]:
    return [validate_identifier(v, what) for v in values]
