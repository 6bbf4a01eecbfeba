"""ClickHouse over clickhouse-connect, for chDB and servers alike, one module per concern.

* :mod:`~eos_pipeline.adapters.clickhouse.connection`: reaching ClickHouse (the connection URL,
  parsed and redacted; chDB's data directory and its locks; driver errors explained, retryable
  or not).
* :mod:`~eos_pipeline.adapters.clickhouse.ddl`: pipeline tables, created and checked.
* :mod:`~eos_pipeline.adapters.clickhouse.sink`: idempotent inserts (the rules that make a
  re-sent chunk land once) and the reads that prove them.
* :mod:`~eos_pipeline.adapters.clickhouse.native_json`: ClickHouse parsing a chunk's JSON itself.

Callers import from here; the names below are the package's public surface.
"""

from eos_pipeline.adapters.clickhouse.connection import (
    ClickHouseSinkError,
    ClickHouseTarget,
    parse_url,
    redact_url,
)
from eos_pipeline.adapters.clickhouse.ddl import (
    DEFAULT_DEDUP_WINDOW,
    create_database_sql,
    create_table_sql,
)
from eos_pipeline.adapters.clickhouse.sink import ONE_BLOCK_THRESHOLD, ClickHouseSink

__all__ = [
    "DEFAULT_DEDUP_WINDOW",
    "ONE_BLOCK_THRESHOLD",
    "ClickHouseSink",
    "ClickHouseSinkError",
    "ClickHouseTarget",
    "create_database_sql",
    "create_table_sql",
    "parse_url",
    "redact_url",
]
