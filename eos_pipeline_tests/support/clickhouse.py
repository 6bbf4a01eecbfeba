"""ClickHouse code no product path runs, kept for the tests that pin ClickHouse's behaviour.

* :class:`Replication`, with :func:`create_table_sql` and :func:`create_database_sql`: the DDL of
  ReplicatedMergeTree tables (optionally ON CLUSTER). The product creates MergeTree tables only;
  without a replication both functions are the product's.
* :class:`JsonEachRowSink`: the product's sink plus an insert of raw JSONEachRow lines parsed by
  ClickHouse itself, which the tests use to show that one INSERT is one block (and one dedup
  token) whatever the input format, under the product's :meth:`~ClickHouseSink.insert_settings`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from eos_pipeline.adapters import clickhouse as product
from eos_pipeline.adapters.clickhouse import DEFAULT_DEDUP_WINDOW, ClickHouseSink
from eos_pipeline.adapters.clickhouse.connection import explained_errors
from eos_pipeline.adapters.clickhouse.ddl import (
    column_sql,
    literal,
    table_ref,
    validate_dedup_window,
)
from eos_pipeline.core.schema import (
    TableSchema,
    quote_identifier,
    validate_identifier,
    validate_identifiers,
)

_REPLICA_PATH_RE = re.compile(r"^[A-Za-z0-9_/{}.\-]{1,256}$")


@dataclass(frozen=True, slots=True)
class Replication:
    """Create ReplicatedMergeTree tables (optionally ON CLUSTER) instead of MergeTree."""

    cluster: str | None = None
    zookeeper_path: str = "/clickhouse/tables/{shard}/{database}/{table}"
    replica_name: str = "{replica}"
    dedup_window_seconds: int = 7 * 24 * 3600

    def __post_init__(self) -> None:
        if self.cluster is not None:
            validate_identifier(self.cluster, "cluster name")
        for what in ("zookeeper_path", "replica_name"):
            value = getattr(self, what)
            if not isinstance(value, str) or not _REPLICA_PATH_RE.fullmatch(value):
                raise ValueError(
                    f"invalid {what} {value!r}: use letters, digits, '_', '/', '.', '-' and "
                    "{macros}"
                )
        if not isinstance(self.dedup_window_seconds, int) or self.dedup_window_seconds < 1:
            raise ValueError(f"dedup_window_seconds must be >= 1, got {self.dedup_window_seconds}")


def _on_cluster(replication: Replication) -> str:
    if replication.cluster is None:
        return ""
    return f" ON CLUSTER {quote_identifier(replication.cluster, 'cluster name')}"


def create_database_sql(database: str, replication: Replication | None = None) -> str:
    if replication is None:
        return product.create_database_sql(database)
    name = quote_identifier(database, "database name")
    return f"CREATE DATABASE IF NOT EXISTS {name}{_on_cluster(replication)}"


def create_table_sql(
    database: str,
    table: str,
    schema: TableSchema,
    *,
    dedup_window: int = DEFAULT_DEDUP_WINDOW,
    replication: Replication | None = None,
) -> str:
    """The product's DDL, or the same table as ReplicatedMergeTree with ``replication``."""
    if replication is None:
        return product.create_table_sql(database, table, schema, dedup_window=dedup_window)
    validate_dedup_window(dedup_window)
    columns = ",\n    ".join(column_sql(c) for c in schema.all_columns)
    order_by = ", ".join(quote_identifier(n, "source column name") for n in schema.source.order_by)
    engine = (
        f"ReplicatedMergeTree({literal(replication.zookeeper_path)}, "
        f"{literal(replication.replica_name)})"
    )
    settings = (
        f"replicated_deduplication_window = {dedup_window}, "
        f"replicated_deduplication_window_seconds = {replication.dedup_window_seconds}"
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {table_ref(database, table)}{_on_cluster(replication)}\n(\n"
        f"    {columns}\n)\nENGINE = {engine}\nORDER BY ({order_by})\nSETTINGS {settings}"
    )


class JsonEachRowSink(ClickHouseSink):
    """The product's sink, plus :meth:`insert_json_each_row`."""

    def insert_json_each_row(
        self,
        database: str,
        table: str,
        raw_lines: bytes,
        dedup_token: str,
        *,
        column_names: Sequence[str] | None = None,
    ) -> None:
        """Insert newline-separated JSON objects as one block, parsed by ClickHouse itself.

        Each object carries its source fields too (``_topic``, ``_partition``, ``_offset``, and
        ``_timestamp`` as seconds with three decimals). Unknown keys are skipped and missing ones
        take column defaults (ClickHouse's defaults); one unparseable object fails the whole
        insert, so nothing of the chunk lands.
        """
        ref = table_ref(database, table)
        names = validate_identifiers(column_names, "column name") if column_names else None
        settings = self.insert_settings(dedup_token)
        if not raw_lines.strip():
            return
        with explained_errors(f"inserting into {ref}", self.target, database, table):
            self._client.raw_insert(ref, names, raw_lines, settings=settings, fmt="JSONEachRow")


__all__ = ["JsonEachRowSink", "Replication", "create_database_sql", "create_table_sql"]
