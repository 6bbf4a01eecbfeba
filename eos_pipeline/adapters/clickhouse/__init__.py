"""ClickHouse over clickhouse-connect, for chDB and servers alike, one module per concern
(connection, ddl, sink, native_json); callers import from here, the package's public surface.
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
