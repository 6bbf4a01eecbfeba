"""ClickHouse, over clickhouse-connect, for chDB and servers alike: the names callers import."""

from eos_pipeline.adapters.clickhouse.sink import (
    DEFAULT_DEDUP_WINDOW,
    ONE_BLOCK_THRESHOLD,
    ClickHouseSink,
    ClickHouseSinkError,
    ClickHouseTarget,
    create_database_sql,
    create_table_sql,
    parse_url,
    redact_url,
)

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
