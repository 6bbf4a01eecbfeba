"""The ClickHouse sink: idempotent chunk inserts, chDB or server, and the reads that prove them.

Exactly-once into ClickHouse rests on ClickHouse's own insert deduplication (SPEC §3): every chunk
is inserted with a deterministic ``insert_deduplication_token`` and the table keeps a window of
recent tokens, so a chunk sent again after a crash is dropped by ClickHouse. What was measured
with chDB 26.9 (ClickHouse 26.9.2.1, clickhouse-connect 1.12) and what this module does about it:

* **The window is what turns tokens on.** With ``non_replicated_deduplication_window = 0`` (the
  MergeTree default) a repeated token inserts the rows again. Tables are created with a window,
  and :meth:`ClickHouseSink.ensure_table` refuses an existing table whose window is 0. The window
  counts the last N *blocks of the whole table*, across all topic-partitions writing to it, so it
  must exceed the inserts that can happen between a crash and its retry. Replicated tables (the
  sink creates MergeTree tables; a replicated one is created beforehand and accepted) also forget
  tokens after ``replicated_deduplication_window_seconds`` (server default 1 h): give them longer
  than a crash can take to be retried. The non-replicated log lives on disk
  (``deduplication_logs/``) and survived closing all clients, re-opening the engine in-process,
  and restarting the process.
* **Only the token counts, not the rows.** Different rows under a token already seen are dropped
  too, so a token must name exactly one set of rows: the chunk's own offset bounds (Kafka never
  changes what a given offset range holds). The tokens themselves are built elsewhere.
* **One INSERT must become one block, the same way on every retry.** ClickHouse names a block
  by the token *and the number of the source block it came from* (26.x ``DeduplicationInfo``:
  the user token is extended with the source block number; after squashing, with the last one),
  and writes one part per output block. Both counts vary by default: clickhouse-connect cuts
  Native data into ~2 MiB blocks sized by sampling rows; JSONEachRow is cut into 10 MiB segments
  by parallel parsing and into ``max_block_size`` rows (chDB reads ``INSERT ... FROM INFILE``) or
  ``max_insert_block_size`` rows (HTTP body); squashing emits at ``min_insert_block_size_*``; and
  a user profile can change any of these. Measured: 200,000 rows sent under one token first as
  one block, then as four, were stored twice; under a profile with strict 1,000-row blocks, a
  retry of a 5,000-row one-block insert stored 4,000 rows twice. So every insert here sends one
  Native block or one Arrow record batch, under :meth:`ClickHouseSink.insert_settings`, whose
  thresholds keep parsing to one source block and squashing to one output block. A chunk is then
  one part with one id whichever path sent it (tested: JSONEachRow, columnar and Arrow retries
  of each other are dropped). The price: a chunk is held whole in memory and JSON is parsed on
  one thread, so callers keep chunks bounded.
* **Settings per insert:** besides the token, ``insert_deduplicate=1`` plus
  ``deduplicate_insert='enable'`` (26.x: the newer setting supersedes the older one, and a user
  profile could disable it) and ``async_insert=0`` (async inserts deduplicate differently).
* chDB's insert summary reports rows read, not rows written, so an insert cannot tell whether
  ClickHouse dropped it as a duplicate: :meth:`offsets_in_table` is the proof.
* ``DateTime64`` columns read a bare number as *seconds*, on both paths: a Python ``int`` in the
  columnar path and a JSON number in JSONEachRow (``1767323045678`` is 56,000 years away;
  ``1767323045.678`` is right). Kafka's millisecond timestamps go in as ``datetime`` values, a
  pyarrow ``timestamp('ms')`` column, or JSON ``ms / 1000`` written with three decimals.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Self

import clickhouse_connect
import pyarrow as pa
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import Error as CHError
from clickhouse_connect.driver.exceptions import OperationalError
from clickhouse_connect.driver.httpclient import HttpClient

from eos_pipeline.adapters.clickhouse.connection import (
    ClickHouseSinkError,
    explained_errors,
    open_embedded,
    parse_url,
    scrub_password,
)
from eos_pipeline.adapters.clickhouse.ddl import (
    DEFAULT_DEDUP_WINDOW,
    add_column_sql,
    check_table,
    column_types,
    create_database_sql,
    create_table_sql,
    modify_column_sql,
    table_ref,
)
from eos_pipeline.adapters.clickhouse.native_json import insert_native
from eos_pipeline.core.decode import NativePlan, NativeRows
from eos_pipeline.core.evolution import Evolution, catch_up
from eos_pipeline.core.offsets import OffsetRange
from eos_pipeline.core.proof import TableAggregate
from eos_pipeline.core.schema import (
    SourceColumns,
    TableSchema,
    quote_identifier,
    validate_identifiers,
)

logger = logging.getLogger(__name__)

# Large enough that neither parsing nor squashing ever cuts one INSERT into several blocks.
ONE_BLOCK_THRESHOLD = 1 << 40


class ClickHouseSink:
    """Writes chunks into ClickHouse so that sending a chunk twice stores it once (one block per
    chunk under the caller's token, see the module docstring), over chDB or a server; reads by
    Kafka source coordinates prove it held, and a replay deletes a range by them."""

    def __init__(self, client: Client, *, target: str = "ClickHouse") -> None:
        self._client = client
        self.target = target

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        connect_timeout: float = 10.0,
        send_receive_timeout: float = 300.0,
    ) -> Self:
        """Open ``chdb:///path`` (embedded, the default) or ``http(s)://user:pass@host:port/db``."""
        target = parse_url(url)
        if target.embedded:
            assert target.path is not None
            client = open_embedded(target.path)
        else:
            try:
                client = clickhouse_connect.get_client(
                    interface=target.scheme,
                    host=target.host,
                    port=target.port,
                    username=target.username or "default",
                    password=target.password or "",
                    database=target.database,
                    connect_timeout=connect_timeout,
                    send_receive_timeout=send_receive_timeout,
                )
            except OperationalError as ex:
                reason = scrub_password(ex, target)
                raise ClickHouseSinkError(
                    f"cannot reach ClickHouse at {target.display}: {reason}. Check "
                    "the host and port, that the server is running and reachable from here",
                    retryable=True,
                ) from None
            except CHError as ex:
                reason = scrub_password(ex, target)
                raise ClickHouseSinkError(
                    f"cannot connect to ClickHouse at {target.display}: {reason}. "
                    "Check the user name, password and database in the URL",
                    code=ex.code,
                ) from None
        logger.info("connected to %s (ClickHouse %s)", target.display, client.server_version)
        return cls(client, target=target.display)

    @property
    def client(self) -> Client:
        return self._client

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- DDL ------------------------------------------------------------------------------------

    def ensure_table(
        self,
        database: str,
        table: str,
        schema: TableSchema,
        *,
        dedup_window: int = DEFAULT_DEDUP_WINDOW,
    ) -> None:
        """Create the database and table if missing; fail if an existing one cannot be used
        (``ddl.check_table``)."""
        db_sql = create_database_sql(database)
        table_sql = create_table_sql(database, table, schema, dedup_window=dedup_window)
        with explained_errors("creating the table", self.target, database, table):
            self._client.command(db_sql)
            self._client.command(table_sql)
        if schema.schema_id is not None:
            # A subject's latest schema may be newer than the table: it catches up first.
            existing = column_types(self._client, database, table)
            self.evolve_table(database, table, catch_up(schema, existing))
        with explained_errors("checking the table", self.target, database, table):
            check_table(self._client, database, table, schema, target=self.target)

    def evolve_table(self, database: str, table: str, evolution: Evolution) -> list[str]:
        """Add and widen the columns ``evolution`` names; returns the statements sent.

        Idempotent, so a run killed after it and retried sends nothing twice: a column is added
        ``IF NOT EXISTS`` and widened only while the table's type differs. A widening waits for
        its mutation (``mutations_sync``), so no insert lands before the parts are converted.
        """
        if evolution.empty:
            return []
        existing = column_types(self._client, database, table)
        sent = []
        with explained_errors("evolving the table", self.target, database, table):
            for col in evolution.added:
                if col.name not in existing:
                    sent.append(add_column_sql(database, table, col))
                    self._client.command(sent[-1])
            for col in evolution.widened:
                if existing.get(col.name) != col.sql_type:
                    sent.append(modify_column_sql(database, table, col))
                    self._client.command(sent[-1], settings={"mutations_sync": 2})
        if sent:
            logger.info("%s.%s evolved to schema id %d: %s", database, table,
                        evolution.writer_id, "; ".join(sent))  # fmt: skip
        return sent

    # ---- inserts --------------------------------------------------------------------------------

    def insert_settings(self, dedup_token: str) -> dict[str, Any]:
        """Settings that make one INSERT one block, deduplicated by ``dedup_token``."""
        if not isinstance(dedup_token, str) or not dedup_token:
            raise ValueError(f"dedup_token must be a non-empty str, got {dedup_token!r}")
        known = self._client.server_settings
        token_def = known.get("insert_deduplication_token")
        if token_def is not None and token_def.readonly:
            raise ClickHouseSinkError(
                f"the ClickHouse user on {self.target} may not change settings (readonly), so "
                "inserts cannot carry a deduplication token: use a user with readonly = 0"
            )
        settings: dict[str, Any] = {
            "insert_deduplication_token": dedup_token,
            "insert_deduplicate": 1,
            "min_insert_block_size_rows": ONE_BLOCK_THRESHOLD,
            "min_insert_block_size_bytes": ONE_BLOCK_THRESHOLD,
        }
        optional = {
            "deduplicate_insert": "enable",
            "async_insert": 0,
            # One output block: squashing must not cut or split it.
            "use_strict_insert_block_limits": 0,
            "max_insert_block_size_bytes": 0,
            # One source block: parsing must not cut the input (HTTP bodies are parsed in
            # max_insert_block_size rows, chDB's INFILE in max_block_size rows, parallel
            # parsing in byte segments).
            "input_format_parallel_parsing": 0,
            "max_insert_block_size": ONE_BLOCK_THRESHOLD,
            "max_block_size": ONE_BLOCK_THRESHOLD,
            "input_format_max_block_size_bytes": 0,
        }
        settings.update({k: v for k, v in optional.items() if k in known})
        return settings

    def insert_chunk(
        self,
        database: str,
        table: str,
        columns: Mapping[str, Sequence[Any]] | pa.Table,
        dedup_token: str,
    ) -> int:
        """Insert one chunk as one block under ``dedup_token``; return the rows sent.

        ``columns`` maps column names to equally long value lists, or is a pyarrow Table. A chunk
        without rows sends nothing (there is nothing to deduplicate). Whether ClickHouse kept or
        dropped the block is not reported back; see :meth:`offsets_in_table`.
        """
        ref = table_ref(database, table)
        if isinstance(columns, pa.Table):
            validate_identifiers(columns.column_names, "column name")
            settings = self.insert_settings(dedup_token)
            rows = columns.num_rows
        else:
            names = validate_identifiers(columns.keys(), "column name")
            if not names:
                raise ValueError(f"insert into {ref}: no columns given")
            settings = self.insert_settings(dedup_token)
            data = [columns[n] for n in names]
            lengths = {n: len(v) for n, v in zip(names, data, strict=True)}
            if len(set(lengths.values())) != 1:
                raise ValueError(f"insert into {ref}: columns differ in length: {lengths}")
            rows = len(data[0])
        if rows == 0:
            return 0
        with explained_errors(f"inserting into {ref}", self.target, database, table):
            if isinstance(columns, pa.Table):
                # One record batch, so the server sees one source block.
                self._insert_arrow(ref, columns.combine_chunks(), settings)
                return rows
            context = self._client.create_insert_context(
                ref, column_names=names, column_oriented=True, settings=settings
            )
            # clickhouse-connect would cut ~2 MiB Native blocks (sized by sampling the rows);
            # one Native block is one source block on the server.
            context.req_block_size = rows
            context.data = data
            self._client.insert(context=context)
        return rows

    @property
    def embedded(self) -> bool:
        """True on chDB, where ClickHouse can read a chunk's JSON from a local file."""
        # clickhouse-connect's synchronous clients are the HTTP one and the embedded chDB one;
        # the latter's class is private to the driver, so it is told apart by not being HTTP.
        return not isinstance(self._client, HttpClient)

    def insert_json(
        self,
        database: str,
        table: str,
        plan: NativePlan,
        values: Sequence[bytes | None],
        rows: NativeRows,
        *,
        dedup_token: str,
    ) -> int:
        """ClickHouse parses the chunk's JSON values itself, one block under ``dedup_token`` (chDB
        only); raises ``NativeRefused`` when any value is not one the contract accepts as is,
        having written nothing (see :mod:`eos_pipeline.adapters.clickhouse.native_json`)."""
        if not self.embedded:
            raise ValueError("ClickHouse parses JSON from a local file only in chDB")
        ref = table_ref(database, table)
        insert_native(self._client, ref, plan, values, rows, self.insert_settings(dedup_token))
        return len(rows.offsets)

    def _insert_arrow(self, ref: str, table: pa.Table, settings: dict[str, Any]) -> None:
        if not self.embedded:
            self._client.insert_arrow(ref, table, settings=settings)
            return
        # chDB reads inserts from a file, and its backend copies an Arrow buffer into Python
        # bytes before writing it there (``to_pybytes``); a memoryview of the same Arrow file
        # is written as it is, one copy of the chunk fewer on the hot path.
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        self._client.raw_insert(
            ref, table.column_names, memoryview(sink.getvalue()), settings=settings, fmt="Arrow"
        )

    # ---- reads for proofs and checks ------------------------------------------------------------

    def _select(
        self,
        action: str,
        columns: str,
        where_table: tuple[str, str, str | None, int | None],
        within: OffsetRange | None,
        source: SourceColumns | None,
        tail: str = "",
    ) -> Sequence[Sequence[Any]]:
        """``SELECT columns ... [WHERE <topic-partition in range>] tail``; ``{offset}`` in
        ``columns`` and ``tail`` names the table's offset column."""
        database, table, topic, partition = where_table
        src = source or SourceColumns()
        offset = quote_identifier(src.offset, "offset column")
        sql = f"SELECT {columns.format(offset=offset)} FROM {table_ref(database, table)}"
        params: dict[str, Any] = {}
        if topic is not None:
            where, params = self._source_filter(src, topic, partition, within)
            sql += f" WHERE {where}"
        sql += tail.format(offset=offset)
        with explained_errors(action, self.target, database, table):
            return self._client.query(sql, parameters=params).result_rows

    def offsets_in_table(
        self,
        database: str,
        table: str,
        topic: str,
        partition: int,
        *,
        within: OffsetRange | None = None,
        source: SourceColumns | None = None,
    ) -> list[tuple[int, int]]:
        """``(offset, rows)`` per source offset of one topic-partition, in offset order.

        Exactly-once holds when every offset read from Kafka appears once with ``rows`` equal to
        the records it produced; a duplicate shows up as a larger count.
        """
        rows = self._select(
            "reading offsets",
            "{offset}, count()",
            (database, table, topic, partition),
            within,
            source,
            " GROUP BY {offset} ORDER BY {offset}",
        )
        return [(int(o), int(n)) for o, n in rows]

    def offset_aggregate(
        self,
        database: str,
        table: str,
        topic: str,
        partition: int,
        *,
        within: OffsetRange,
        source: SourceColumns | None = None,
    ) -> TableAggregate:
        """Rows, distinct offsets and their sum in ``within``, summed up by ClickHouse itself:
        the incremental exactly-once check re-checks a proven range without reading its rows."""
        ((rows, distinct, total),) = self._select(
            "summing offsets",
            "count(), uniqExact({offset}), sum(toInt128({offset}))",
            (database, table, topic, partition),
            within,
            source,
        )
        return TableAggregate(int(rows), int(distinct), int(total))

    def lowest_offset(
        self,
        database: str,
        table: str,
        topic: str,
        partition: int,
        *,
        below: int,
        source: SourceColumns | None = None,
    ) -> int | None:
        """The smallest source offset of the topic-partition below ``below``, or None."""
        ((rows, low),) = self._select(
            "reading the lowest offset",
            "count(), min({offset})",
            (database, table, topic, partition),
            OffsetRange(0, below),
            source,
        )
        return int(low) if rows else None

    def delete_offsets(
        self,
        database: str,
        table: str,
        topic: str,
        partition: int,
        within: OffsetRange,
        *,
        source: SourceColumns | None = None,
    ) -> int:
        """Delete the rows of one topic-partition whose source offset is in ``within`` (a replay).

        A synchronous mutation (``mutations_sync = 2``: done on every replica before it returns),
        idempotent: deleting again deletes nothing. Returns how many rows there were.
        """
        action = "deleting a replayed range"
        where_table = (database, table, topic, partition)
        ((rows,),) = self._select(action, "count()", where_table, within, source)
        if rows:
            where, params = self._source_filter(source or SourceColumns(), topic, partition, within)
            with explained_errors(action, self.target, database, table):
                self._client.command(
                    f"ALTER TABLE {table_ref(database, table)} DELETE WHERE {where}",
                    parameters=params,
                    settings={"mutations_sync": 2},
                )
        return int(rows)

    def count(
        self,
        database: str,
        table: str,
        topic: str | None = None,
        partition: int | None = None,
        *,
        source: SourceColumns | None = None,
    ) -> int:
        """Rows in the table, or in one topic / topic-partition of it."""
        if topic is None and partition is not None:
            raise ValueError("count(): a partition needs its topic")
        where_table = (database, table, topic, partition)
        ((rows,),) = self._select("counting rows", "count()", where_table, None, source)
        return int(rows)

    @staticmethod
    def _source_filter(
        src: SourceColumns, topic: str, partition: int | None, within: OffsetRange | None
    ) -> tuple[str, dict[str, Any]]:
        clauses = [f"{quote_identifier(src.topic, 'topic column')} = {{topic:String}}"]
        params: dict[str, Any] = {"topic": topic}
        if partition is not None:
            clauses.append(f"{quote_identifier(src.partition, 'partition column')} = {{p:Int64}}")
            params["p"] = partition
        if within is not None:
            offset = quote_identifier(src.offset, "offset column")
            clauses.append(f"{offset} >= {{start:Int64}} AND {offset} < {{end:Int64}}")
            params.update(start=within.start, end=within.end)
        return " AND ".join(clauses), params
