"""Pipeline tables: the DDL that creates them and the checks an existing table must pass.

A table only deduplicates re-sent chunks if it is a MergeTree with a deduplication window above
0 (see :mod:`eos_pipeline.adapters.clickhouse.sink`), and inserts only land if the declared
columns exist with the declared types. Both are settled here, once, before the first insert.
"""

from __future__ import annotations

import contextlib
import logging
import re

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import Error as CHError

from eos_pipeline.adapters.clickhouse.connection import ClickHouseSinkError
from eos_pipeline.core.evolution import holds
from eos_pipeline.core.schema import Column, TableSchema, quote_identifier

logger = logging.getLogger(__name__)

DEFAULT_DEDUP_WINDOW = 1000


def literal(value: str | int | float | bool) -> str:
    """A Python value as a ClickHouse SQL literal (strings quoted and escaped)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def column_sql(col: Column) -> str:
    """One column of a CREATE TABLE: quoted name, type and optional default."""
    sql = f"{quote_identifier(col.name, 'column name')} {col.sql_type}"
    if col.default is not None:
        sql += f" DEFAULT {literal(col.default)}"
    return sql


def table_ref(database: str, table: str) -> str:
    """``database.table`` with both names validated and quoted."""
    return f"{quote_identifier(database, 'database name')}.{quote_identifier(table, 'table name')}"


def validate_dedup_window(dedup_window: int) -> None:
    """Refuse a window below 1: 0 would silently turn deduplication off."""
    if isinstance(dedup_window, bool) or not isinstance(dedup_window, int) or dedup_window < 1:
        raise ValueError(
            f"dedup_window must be an int >= 1, got {dedup_window!r}: "
            "0 turns ClickHouse insert deduplication off"
        )


def create_database_sql(database: str) -> str:
    return f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database, 'database name')}"


def create_table_sql(
    database: str,
    table: str,
    schema: TableSchema,
    *,
    dedup_window: int = DEFAULT_DEDUP_WINDOW,
) -> str:
    """DDL for a pipeline table: MergeTree sorted by (topic, partition, offset), dedup window on."""
    validate_dedup_window(dedup_window)
    columns = ",\n    ".join(column_sql(c) for c in schema.all_columns)
    order_by = ", ".join(quote_identifier(n, "source column name") for n in schema.source.order_by)
    return (
        f"CREATE TABLE IF NOT EXISTS {table_ref(database, table)}\n(\n"
        f"    {columns}\n)\nENGINE = MergeTree\nORDER BY ({order_by})\n"
        f"SETTINGS non_replicated_deduplication_window = {dedup_window}"
    )


def add_column_sql(database: str, table: str, col: Column) -> str:
    """An evolution's new column; a no-op when a past (killed) run already added it."""
    return f"ALTER TABLE {table_ref(database, table)} ADD COLUMN IF NOT EXISTS {column_sql(col)}"


def modify_column_sql(database: str, table: str, col: Column) -> str:
    """An evolution's widened column (sent only while the table's type differs)."""
    return f"ALTER TABLE {table_ref(database, table)} MODIFY COLUMN {column_sql(col)}"


def column_types(client: Client, database: str, table: str) -> dict[str, str]:
    """The table's columns and their types as the server spells them."""
    return dict(
        client.query(
            "SELECT name, type FROM system.columns "
            "WHERE database = {db:String} AND table = {tb:String}",
            parameters={"db": database, "tb": table},
        ).result_rows
    )


def check_table(
    client: Client, database: str, table: str, schema: TableSchema, *, target: str
) -> None:
    """Fail unless the table can deduplicate inserts and has every declared column and type.

    Extra columns are allowed (inserts name their columns); they are only logged. A table of a
    registry subject (``schema.schema_id`` set) may hold a column in a wider type than declared:
    a newer writer schema widened it (``core.evolution``).
    """
    found = client.query(
        "SELECT engine, engine_full FROM system.tables "
        "WHERE database = {db:String} AND name = {tb:String}",
        parameters={"db": database, "tb": table},
    ).result_rows
    if not found:
        raise ClickHouseSinkError(f"table {database}.{table} was not created on {target}")
    engine, engine_full = found[0]
    if not engine.endswith("MergeTree"):
        raise ClickHouseSinkError(
            f"table {database}.{table} uses engine {engine}, which cannot deduplicate "
            "inserts: use a MergeTree-family table (or drop it and let ensure_table create it)"
        )
    _check_window(client, database, table, engine, engine_full)
    existing = column_types(client, database, table)
    missing = [c for c in schema.all_columns if c.name not in existing]
    evolving = schema.schema_id is not None
    mismatched = [
        (c, existing[c.name])
        for c in schema.all_columns
        if c.name in existing
        and not _same_type(client, c.sql_type, existing[c.name])
        and not (evolving and holds(c, existing[c.name]))
    ]
    problems = []
    if missing:
        problems.append("missing columns: " + ", ".join(f"{c.name} {c.sql_type}" for c in missing))
    if mismatched:
        wrong = [f"{c.name} is {t} in the table but declared {c.sql_type}" for c, t in mismatched]
        problems.append("mismatched types: " + ", ".join(wrong))
    if problems:
        raise ClickHouseSinkError(
            f"table {database}.{table} exists but does not match the declared schema ("
            + "; ".join(problems)
            + "). Migrate it (ALTER TABLE ... ADD/MODIFY COLUMN), fix the declared schema, "
            "or use another table name"
        )
    extra = sorted(set(existing) - set(schema.column_names))
    if extra:
        logger.info("table %s.%s has undeclared columns %s", database, table, extra)


def _check_window(client: Client, database: str, table: str, engine: str, engine_full: str) -> None:
    replicated = engine.startswith(("Replicated", "Shared"))
    setting = (
        "replicated_deduplication_window" if replicated else "non_replicated_deduplication_window"
    )
    match = re.search(rf"\b{setting}\s*=\s*(\d+)", engine_full)
    if match:
        window = int(match.group(1))
    else:
        rows = client.query(
            "SELECT value FROM system.merge_tree_settings WHERE name = {n:String}",
            parameters={"n": setting},
        ).result_rows
        window = int(rows[0][0]) if rows else 0
    if window < 1:
        raise ClickHouseSinkError(
            f"table {database}.{table} has {setting} = 0, so ClickHouse would not drop "
            "re-sent chunks and retries would duplicate rows. Run: ALTER TABLE "
            f"{table_ref(database, table)} MODIFY SETTING {setting} = "
            f"{DEFAULT_DEDUP_WINDOW}"
        )


def _same_type(client: Client, declared: str, actual: str) -> bool:
    if declared == actual:
        return True
    # The server's spelling decides, e.g. for aliases it resolves differently per version.
    with contextlib.suppress(CHError):
        normalized = client.query(
            "SELECT toTypeName(defaultValueOfTypeName({t:String}))",
            parameters={"t": declared},
        ).result_rows[0][0]
        return normalized == actual
    return False
