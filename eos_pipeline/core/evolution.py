"""Schema evolution: can a table follow a newer writer schema, and which columns change (pure).

A pipeline whose columns come from a registry subject (``registry.subject``) stores records of
every writer schema the subject holds. When a record's writer schema differs from the one the
table was derived from, :func:`plan_evolution` compares the writer's derived columns
(:mod:`core.registry_columns`) with the table's and says what both tables must do *before* that
record's row is written:

* a field the table lacks, optional or with a default: an added column (older rows read its
  default, or NULL);
* a field whose type is wider than its column (``Int32`` -> ``Int64``, ``Float32`` -> ``Float64``,
  a value that may now be null): the column is widened;
* a column the writer lacks (a field removed, or an older writer) that is optional or has a
  default: nothing, its rows take the default;
* a narrower type than the column (an older writer): nothing, the column holds it.

Anything else (a type changed or narrowed in the newest schema, a required field added, a
required field removed, a field no column can hold) is :class:`IncompatibleSchemaChange`: the
partition stops, naming the field, both schema ids and what to do. The answer depends only on
the two column lists, so every retry of a range decides the same. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from eos_pipeline.core.contract import is_required
from eos_pipeline.core.errors import NeedsPerson
from eos_pipeline.core.schema import Column, SchemaError, TableSchema
from eos_pipeline.core.values import unwrap

#: Each family's types from narrow to wide: a column of a later type holds every value of an
#: earlier one, so ``MODIFY COLUMN`` to it loses nothing (and Hudi promotes the same way).
_WIDENING = (
    ("Int8", "Int16", "Int32", "Int64"),
    ("UInt8", "UInt16", "UInt32", "UInt64"),
    ("Float32", "Float64"),
)

WHAT_TO_DO = (
    "Register a compatible schema instead (in the registry set the subject's compatibility to "
    "BACKWARD or FULL so it refuses such a change), or migrate both tables by hand "
    "(ALTER TABLE ... MODIFY/ADD COLUMN; a new Hudi table) and restart the pipeline; until then "
    "this partition stops and the others go on"
)


class IncompatibleSchemaChange(NeedsPerson):
    """A writer schema the tables cannot follow: no retry fixes it, a person must decide."""

    code = "incompatible-schema"

    def __init__(self, message: str, field: str = "", table_id: int | None = None,
                 writer_id: int | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.field = field
        self.table_id = table_id
        self.writer_id = writer_id


@dataclass(frozen=True, slots=True)
class Evolution:
    """What the tables must do before the rows of writer schema ``writer_id`` are written."""

    table_id: int | None
    writer_id: int
    #: New columns, in the writer's field order (optional or with a default).
    added: tuple[Column, ...] = ()
    #: Columns with a wider type: the column as it must become.
    widened: tuple[Column, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.added and not self.widened

    def apply(self, schema: TableSchema) -> TableSchema:
        """``schema`` as it is once the tables evolved (same order, columns added at the end)."""
        if self.empty:
            return schema
        wider = {c.name: c for c in self.widened}
        columns = tuple(wider.get(c.name, c) for c in schema.columns) + self.added
        return replace(schema, columns=columns, schema_id=self.writer_id)

    def describe(self) -> dict[str, object]:
        """For the asset's materialization metadata."""
        return {
            "from_schema_id": self.table_id,
            "schema_id": self.writer_id,
            "columns_added": [f"{c.name} {c.sql_type}" for c in self.added],
            "columns_widened": [f"{c.name} {c.sql_type}" for c in self.widened],
        }


def _rank(base: str) -> tuple[int, int] | None:
    for family, types in enumerate(_WIDENING):
        if base in types:
            return family, types.index(base)
    return None


def _compare(column: Column, writer: Column) -> str:
    """``same``, ``fits`` (the column holds the writer's values), ``wider`` (the writer's type
    widens the column) or ``other``."""
    have, have_null = unwrap(column.sql_type)
    want, want_null = unwrap(writer.sql_type)
    have_null = have_null or column.default is not None  # a null reads as the default
    if have == want:
        if want_null and not have_null:
            return "wider"
        return "same" if have_null == want_null else "fits"
    a, b = _rank(have), _rank(want)
    if a is None or b is None or a[0] != b[0]:
        return "other"
    if b[1] > a[1]:
        return "wider"
    return "fits" if have_null or not want_null else "wider"


def _widened(column: Column, writer: Column) -> Column:
    have, have_null = unwrap(column.sql_type)
    want, want_null = unwrap(writer.sql_type)
    a, b = _rank(have), _rank(want)
    base = want if a is not None and b is not None and b[1] > a[1] else have
    nullable = (have_null or want_null) and column.default is None
    return Column(column.name, f"Nullable({base})" if nullable else base, default=column.default)


def plan_evolution(table: TableSchema, writer: Sequence[Column], *, writer_id: int) -> Evolution:
    """How ``table`` follows the columns of writer schema ``writer_id``, or why it cannot."""
    old = table.schema_id

    def refuse(field: str, why: str) -> IncompatibleSchemaChange:
        return IncompatibleSchemaChange(
            f"field {field!r}: writer schema id {writer_id} {why} (the table's columns are from "
            f"schema id {old}); the tables cannot follow this change. {WHAT_TO_DO}",
            field,
            old,
            writer_id,
        )

    mine = {c.name: c for c in table.columns}
    theirs = {c.name: c for c in writer}
    source = {c.name for c in table.source.columns()}
    added: list[Column] = []
    widened: list[Column] = []
    for col in writer:
        if col.name in source:
            raise refuse(col.name, "has a field named like a source column")
        have = mine.get(col.name)
        if have is None:
            if is_required(col):
                raise refuse(col.name, f"adds it as a required {col.sql_type} without a default")
            added.append(col)
            continue
        verdict = _compare(have, col)
        if verdict == "wider":
            widened.append(_widened(have, col))
        elif verdict == "other":
            raise refuse(
                col.name, f"gives it type {col.sql_type}, which column {have.sql_type} cannot hold"
            )
    for col in table.columns:
        if col.name not in theirs and is_required(col):
            raise refuse(col.name, f"has no such field, and column {col.sql_type} has no default")
    return Evolution(old, writer_id, tuple(added), tuple(widened))


def holds(column: Column, actual_type: str) -> bool:
    """True when a table column of ``actual_type`` holds every value of ``column`` (the same
    type, or one a past evolution widened it to)."""
    try:
        actual = Column(column.name, actual_type, default=column.default)
    except SchemaError:
        return False
    return _compare(actual, column) in ("same", "fits")


def catch_up(schema: TableSchema, existing: Mapping[str, str]) -> Evolution:
    """What an existing table (``existing``: column name -> type) lacks of ``schema``, a subject's
    columns resolved at load that may be newer than the table: columns to add and to widen.
    Raises :class:`IncompatibleSchemaChange` for a required column the table lacks."""
    assert schema.schema_id is not None
    added, widened = [], []
    for col in schema.columns:
        if col.name not in existing:
            if is_required(col):
                raise IncompatibleSchemaChange(
                    f"field {col.name!r}: schema id {schema.schema_id} requires it (no default), "
                    f"and the existing table has no such column. {WHAT_TO_DO}",
                    col.name,
                    None,
                    schema.schema_id,
                )
            added.append(col)
        elif not holds(col, existing[col.name]):
            try:
                actual = Column(col.name, existing[col.name], default=col.default)
            except SchemaError:
                continue  # not ours to widen: the table check names the mismatch
            if _compare(actual, col) == "wider":
                widened.append(_widened(actual, col))
    return Evolution(None, schema.schema_id, tuple(added), tuple(widened))
