"""ClickHouse sink: idempotent chunk inserts, over clickhouse-connect, for chDB and servers alike.

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
  retry of a 5,000-row one-block insert stored 4,000 rows twice. So every insert here (a) sends
  one Native block or one Arrow record batch; (b) sets ``input_format_parallel_parsing=0``,
  ``max_insert_block_size`` and ``max_block_size`` to 2**40 and
  ``input_format_max_block_size_bytes=0``, so parsing yields one source block; (c) sets
  ``min_insert_block_size_rows/bytes`` to 2**40, ``max_insert_block_size_bytes=0`` and
  ``use_strict_insert_block_limits=0``, so squashing emits one block. A chunk is then one part
  with one id whichever path sent it (tested: JSONEachRow, columnar and Arrow retries of each
  other are dropped). The price: a chunk is held whole in memory and JSON is parsed on one
  thread, so callers keep chunks bounded.
* **Settings per insert:** ``insert_deduplication_token``, ``insert_deduplicate=1`` plus
  ``deduplicate_insert='enable'`` (26.x: the newer setting supersedes the older one, and a user
  profile could disable it) and ``async_insert=0`` (async inserts deduplicate differently).
* **chDB, one engine per process, one process per data path.** Any number of clients may share
  the open path; a client on a *different* path fails ("EmbeddedServer already initialized")
  while any client is open, and works once all are closed (the engine re-initialises, and
  re-opening the first path later works too). A second *process* on an open path fails to lock
  ``<path>/status``. Both are reported as :class:`ClickHouseSinkError` saying what to do.
* chDB's insert summary reports rows read, not rows written, so an insert cannot tell whether
  ClickHouse dropped it as a duplicate: :meth:`offsets_in_table` is the proof.
* ``DateTime64`` columns read a bare number as *seconds*, on both paths: a Python ``int`` in the
  columnar path and a JSON number in JSONEachRow (``1767323045678`` is 56,000 years away;
  ``1767323045.678`` is right). Kafka's millisecond timestamps go in as ``datetime`` values, a
  pyarrow ``timestamp('ms')`` column, or JSON ``ms / 1000`` written with three decimals.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import SplitResult, unquote, urlsplit

import clickhouse_connect
import pyarrow as pa
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import Error as CHError
from clickhouse_connect.driver.exceptions import OperationalError

from eos_pipeline.core.offsets import OffsetRange
from eos_pipeline.core.schema import (
    Column,
    SourceColumns,
    TableSchema,
    quote_identifier,
    validate_identifier,
    validate_identifiers,
)

try:  # the embedded engine's client class; absent if clickhouse-connect drops its chDB backend
    from clickhouse_connect.driver._chdbclient import ChdbClient as _ChdbClient
except ImportError:  # pragma: no cover
    _ChdbClient = None

logger = logging.getLogger(__name__)

DEFAULT_DEDUP_WINDOW = 1000
# Large enough that neither parsing nor squashing ever cuts one INSERT into several blocks.
ONE_BLOCK_THRESHOLD = 1 << 40

_UNKNOWN_TABLE = 60
_UNKNOWN_DATABASE = 81
_READONLY = 164
# Server error codes worth retrying: an idempotent insert can simply be sent again.
_RETRYABLE_CODES = frozenset({159, 202, 209, 210, 242, 252, 319, 999})


class ClickHouseSinkError(RuntimeError):
    """A ClickHouse problem, phrased as what to fix; ``retryable`` when sending again may help."""

    def __init__(self, message: str, *, code: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.retryable = retryable


# ---- URLs ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClickHouseTarget:
    """A parsed connection URL. ``display`` is safe to log: the password is masked."""

    scheme: str
    display: str
    path: str | None = None
    host: str | None = None
    port: int | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None

    @property
    def embedded(self) -> bool:
        return self.scheme == "chdb"


def parse_url(url: str) -> ClickHouseTarget:
    """Parse ``chdb:///abs/path``, ``chdb://rel/path`` or ``http(s)://user:pass@host:port/db``."""
    if not isinstance(url, str) or not url.strip():
        raise ClickHouseSinkError(
            "empty ClickHouse URL: use chdb:///abs/data/path or http(s)://host:port"
        )
    scheme, sep, rest = url.partition(":")
    scheme = scheme.lower()
    if not sep:
        raise ClickHouseSinkError(
            f"ClickHouse URL {redact_url(url)!r} has no scheme: use chdb:///abs/data/path or "
            "http(s)://host:port"
        )
    if scheme == "chdb":
        raw = rest[2:] if rest.startswith("//") else rest
        if "?" in raw or "#" in raw:
            raise ClickHouseSinkError(f"chDB URL {url!r} must not carry a query or fragment")
        if raw in ("", "memory", ":memory:"):
            raise ClickHouseSinkError(
                f"chDB URL {url!r} names no data directory: an in-memory engine forgets its "
                "deduplication log, use chdb:///abs/data/path"
            )
        path = os.path.realpath(os.path.expanduser(raw))
        return ClickHouseTarget(scheme="chdb", display=f"chdb://{path}", path=path)
    if scheme not in ("http", "https"):
        raise ClickHouseSinkError(
            f"unsupported ClickHouse URL scheme {scheme!r} in {redact_url(url)!r}: use "
            "chdb:///abs/data/path, http://host:8123 or https://host:8443"
        )
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ClickHouseSinkError(
            f"ClickHouse URL {redact_url(url)!r}: query parameters are not supported; "
            "pass settings in code"
        )
    try:
        port = parts.port
    except ValueError as ex:
        raise ClickHouseSinkError(f"ClickHouse URL {redact_url(url)!r}: {ex}") from None
    if not parts.hostname:
        raise ClickHouseSinkError(f"ClickHouse URL {redact_url(url)!r} names no host")
    database = unquote(parts.path.strip("/")) or None
    if database is not None:
        validate_identifier(database, "database in the ClickHouse URL")
    return ClickHouseTarget(
        scheme=scheme,
        display=redact_url(url),
        host=parts.hostname,
        port=port or (8443 if scheme == "https" else 8123),
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        database=database,
    )


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***``, for logs and error messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = f"{parts.username or ''}:***@{parts.hostname or ''}"
        if parts.port is not None:
            netloc += f":{parts.port}"
        return SplitResult(parts.scheme, netloc, parts.path, parts.query, parts.fragment).geturl()
    except ValueError:
        return "<unparseable URL>"


# ---- DDL ----------------------------------------------------------------------------------------


def _literal(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _column_sql(col: Column) -> str:
    sql = f"{quote_identifier(col.name, 'column name')} {col.sql_type}"
    if col.default is not None:
        sql += f" DEFAULT {_literal(col.default)}"
    return sql


def _table_ref(database: str, table: str) -> str:
    return f"{quote_identifier(database, 'database name')}.{quote_identifier(table, 'table name')}"


def _validate_dedup_window(dedup_window: int) -> None:
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
    _validate_dedup_window(dedup_window)
    columns = ",\n    ".join(_column_sql(c) for c in schema.all_columns)
    order_by = ", ".join(quote_identifier(n, "source column name") for n in schema.source.order_by)
    return (
        f"CREATE TABLE IF NOT EXISTS {_table_ref(database, table)}\n(\n"
        f"    {columns}\n)\nENGINE = MergeTree\nORDER BY ({order_by})\n"
        f"SETTINGS non_replicated_deduplication_window = {dedup_window}"
    )


# ---- the sink -----------------------------------------------------------------------------------


def _prepare_data_dir(path: str) -> None:
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ClickHouseSinkError(
            f"chDB data path {path} is a file, not a directory: point chdb:// at a directory"
        )
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as ex:
        raise ClickHouseSinkError(
            f"cannot create chDB data directory {path}: {ex.strerror or ex}; "
            "choose a writable directory in the chdb:// URL"
        ) from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise ClickHouseSinkError(
            f"chDB data directory {path} is not writable by this user: fix its permissions "
            "or choose another directory in the chdb:// URL"
        )


def _status_locked_elsewhere(path: str) -> bool:
    """True when another process holds ClickHouse's lock on ``<path>/status``."""
    status = Path(path) / "status"
    if not status.is_file():
        return False
    try:
        with status.open("rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def _engine_open_error(path: str, ex: Exception) -> ClickHouseSinkError:
    text = str(ex)
    if "already initialized with path" in text:
        match = re.search(r"path '([^']*)'", text)
        other = match.group(1) if match else "another path"
        return ClickHouseSinkError(
            f"cannot open chDB at {path}: this process already runs the chDB engine on {other}, "
            "and chDB allows one data path per process. Close every client on that path first, "
            "use the same path, or use a ClickHouse server (http://...) to run in parallel"
        )
    if _status_locked_elsewhere(path):
        return ClickHouseSinkError(
            f"chDB data path {path} is in use by another process (chDB allows one process per "
            "data path): wait for that run to finish, or use a ClickHouse server (http://...) "
            "for parallel runs",
            retryable=True,
        )
    return ClickHouseSinkError(f"cannot open chDB at {path}: {text}")


class ClickHouseSink:
    """Writes chunks into ClickHouse so that sending a chunk twice stores it once.

    One insert statement per chunk, always one block (see the module docstring), tagged with
    the caller's deduplication token. Names are validated and quoted, values bound as query
    parameters. Works the same over chDB and over an HTTP(S) server.
    """

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
            _prepare_data_dir(target.path)
            try:
                client = clickhouse_connect.get_client(interface="chdb", path=target.path)
            except CHError as ex:
                raise _engine_open_error(target.path, ex) from None
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
                raise ClickHouseSinkError(
                    f"cannot reach ClickHouse at {target.display}: {_scrub(ex, target)}. Check "
                    "the host and port, that the server is running and reachable from here",
                    retryable=True,
                ) from None
            except CHError as ex:
                raise ClickHouseSinkError(
                    f"cannot connect to ClickHouse at {target.display}: {_scrub(ex, target)}. "
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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- errors ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(
        self, action: str, database: str | None = None, table: str | None = None
    ) -> Iterator[None]:
        try:
            yield
        except OperationalError as ex:
            raise ClickHouseSinkError(
                f"{action}: cannot reach ClickHouse at {self.target} ({ex}); check that the "
                "server is running and reachable",
                retryable=True,
            ) from ex
        except CHError as ex:
            code = ex.code
            where = f"{database}.{table}" if table else database
            if code == _UNKNOWN_TABLE:
                message = (
                    f"{action}: table {where} does not exist on {self.target}; create it first "
                    "with ensure_table() (the pipeline's setup step) or fix the table name"
                )
            elif code == _UNKNOWN_DATABASE:
                message = (
                    f"{action}: database {database} does not exist on {self.target}; create it "
                    "with ensure_table() or fix the database name"
                )
            elif code == _READONLY:
                message = (
                    f"{action}: ClickHouse at {self.target} is read-only for this user; use a "
                    f"user allowed to write ({ex})"
                )
            else:
                message = f"{action} on {self.target} failed: {ex}"
            raise ClickHouseSinkError(
                message, code=code, retryable=code in _RETRYABLE_CODES
            ) from ex

    # ---- DDL ------------------------------------------------------------------------------------

    def ensure_table(
        self,
        database: str,
        table: str,
        schema: TableSchema,
        *,
        dedup_window: int = DEFAULT_DEDUP_WINDOW,
    ) -> None:
        """Create the database and table if missing; fail if an existing one cannot be used.

        An existing table must have every declared column with the declared type (extra columns
        are allowed: inserts name their columns) and a deduplication window above 0.
        """
        db_sql = create_database_sql(database)
        table_sql = create_table_sql(database, table, schema, dedup_window=dedup_window)
        with self._errors("creating the table", database, table):
            self._client.command(db_sql)
            self._client.command(table_sql)
            self._check_table(database, table, schema)

    def _check_table(self, database: str, table: str, schema: TableSchema) -> None:
        found = self._client.query(
            "SELECT engine, engine_full FROM system.tables "
            "WHERE database = {db:String} AND name = {tb:String}",
            parameters={"db": database, "tb": table},
        ).result_rows
        if not found:
            raise ClickHouseSinkError(f"table {database}.{table} was not created on {self.target}")
        engine, engine_full = found[0]
        if not engine.endswith("MergeTree"):
            raise ClickHouseSinkError(
                f"table {database}.{table} uses engine {engine}, which cannot deduplicate "
                "inserts: use a MergeTree-family table (or drop it and let ensure_table create it)"
            )
        self._check_window(database, table, engine, engine_full)
        existing = dict(
            self._client.query(
                "SELECT name, type FROM system.columns "
                "WHERE database = {db:String} AND table = {tb:String}",
                parameters={"db": database, "tb": table},
            ).result_rows
        )
        missing = [c for c in schema.all_columns if c.name not in existing]
        mismatched = [
            (c, existing[c.name])
            for c in schema.all_columns
            if c.name in existing and not self._same_type(c.sql_type, existing[c.name])
        ]
        if missing or mismatched:
            problems = []
            if missing:
                problems.append(
                    "missing columns: " + ", ".join(f"{c.name} {c.sql_type}" for c in missing)
                )
            if mismatched:
                problems.append(
                    "mismatched types: "
                    + ", ".join(
                        f"{c.name} is {actual} in the table but declared {c.sql_type}"
                        for c, actual in mismatched
                    )
                )
            raise ClickHouseSinkError(
                f"table {database}.{table} exists but does not match the declared schema ("
                + "; ".join(problems)
                + "). Migrate it (ALTER TABLE ... ADD/MODIFY COLUMN), fix the declared schema, "
                "or use another table name"
            )
        extra = sorted(set(existing) - set(schema.column_names))
        if extra:
            logger.info("table %s.%s has undeclared columns %s", database, table, extra)

    def _check_window(self, database: str, table: str, engine: str, engine_full: str) -> None:
        replicated = engine.startswith(("Replicated", "Shared"))
        setting = (
            "replicated_deduplication_window"
            if replicated
            else "non_replicated_deduplication_window"
        )
        match = re.search(rf"\b{setting}\s*=\s*(\d+)", engine_full)
        if match:
            window = int(match.group(1))
        else:
            rows = self._client.query(
                "SELECT value FROM system.merge_tree_settings WHERE name = {n:String}",
                parameters={"n": setting},
            ).result_rows
            window = int(rows[0][0]) if rows else 0
        if window < 1:
            raise ClickHouseSinkError(
                f"table {database}.{table} has {setting} = 0, so ClickHouse would not drop "
                "re-sent chunks and retries would duplicate rows. Run: ALTER TABLE "
                f"{_table_ref(database, table)} MODIFY SETTING {setting} = "
                f"{DEFAULT_DEDUP_WINDOW}"
            )

    def _same_type(self, declared: str, actual: str) -> bool:
        if declared == actual:
            return True
        # The server's spelling decides, e.g. for aliases it resolves differently per version.
        with contextlib.suppress(CHError):
            normalized = self._client.query(
                "SELECT toTypeName(defaultValueOfTypeName({t:String}))",
                parameters={"t": declared},
            ).result_rows[0][0]
            return normalized == actual
        return False

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
        ref = _table_ref(database, table)
        if isinstance(columns, pa.Table):
            validate_identifiers(columns.column_names, "column name")
            settings = self.insert_settings(dedup_token)
            rows = columns.num_rows
            if rows == 0:
                return 0
            with self._errors(f"inserting into {ref}", database, table):
                # One record batch, so the server sees one source block.
                self._insert_arrow(ref, columns.combine_chunks(), settings)
            return rows
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
        with self._errors(f"inserting into {ref}", database, table):
            context = self._client.create_insert_context(
                ref, column_names=names, column_oriented=True, settings=settings
            )
            # clickhouse-connect would cut ~2 MiB Native blocks (sized by sampling the rows);
            # one Native block is one source block on the server.
            context.req_block_size = rows
            context.data = data
            self._client.insert(context=context)
        return rows

    def _insert_arrow(self, ref: str, table: pa.Table, settings: dict[str, Any]) -> None:
        if _ChdbClient is None or not isinstance(self._client, _ChdbClient):
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
        src = source or SourceColumns()
        offset = quote_identifier(src.offset, "offset column")
        where, params = self._source_filter(src, topic, partition, within)
        with self._errors("reading offsets", database, table):
            result = self._client.query(
                f"SELECT {offset}, count() FROM {_table_ref(database, table)} WHERE {where} "
                f"GROUP BY {offset} ORDER BY {offset}",
                parameters=params,
            )
        return [(int(o), int(n)) for o, n in result.result_rows]

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
        src = source or SourceColumns()
        sql = f"SELECT count() FROM {_table_ref(database, table)}"
        params: dict[str, Any] = {}
        if topic is not None:
            where, params = self._source_filter(src, topic, partition, None)
            sql += f" WHERE {where}"
        elif partition is not None:
            raise ValueError("count(): a partition needs its topic")
        with self._errors("counting rows", database, table):
            return int(self._client.query(sql, parameters=params).result_rows[0][0])

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


def _scrub(ex: Exception, target: ClickHouseTarget) -> str:
    text = str(ex)
    if target.password:
        text = text.replace(target.password, "***")
    return text
