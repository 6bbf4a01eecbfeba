"""Reaching ClickHouse: the connection URL, chDB's data directory, and every failure explained.

* **One URL, never leaked.** The same ``clickhouse_url`` setting selects the embedded engine or
  a server, so parsing it (:func:`parse_url`) is where a wrong URL is caught, before any
  connection is tried; everything logged or raised shows the URL through :func:`redact_url`.
* **chDB's data directory.** chDB runs one engine per process on one data path per process.
  Measured with chDB 26.9: any number of clients may share the open path; a client on a
  *different* path fails ("EmbeddedServer already initialized") while any client is open, and
  works once all are closed (the engine re-initialises, and re-opening the first path later works
  too). A second *process* on an open path fails to lock ``<path>/status``. The driver reports
  both as bare errors; :func:`open_embedded` turns them, and an unusable directory, into a
  :class:`ClickHouseSinkError` saying what to do.
* **One error type.** Callers (the sinks, the resources, the CLI) catch
  :class:`ClickHouseSinkError` only, and decide from ``retryable`` whether sending the same
  idempotent insert again may help; the driver's own exception classes and numeric codes stay
  inside this package.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import Error as CHError
from clickhouse_connect.driver.exceptions import OperationalError

from eos_pipeline.core.schema import validate_identifier

# ---- errors --------------------------------------------------------------------------------------

UNKNOWN_TABLE = 60
UNKNOWN_DATABASE = 81
READONLY = 164
# Server error codes worth retrying: an idempotent insert can simply be sent again.
RETRYABLE_CODES = frozenset({159, 202, 209, 210, 242, 252, 319, 999})


class ClickHouseSinkError(RuntimeError):
    """A ClickHouse problem, phrased as what to fix; ``retryable`` when sending again may help."""

    def __init__(self, message: str, *, code: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.retryable = retryable


@contextlib.contextmanager
def explained_errors(
    action: str, target: str, database: str | None = None, table: str | None = None
) -> Iterator[None]:
    """Re-raise driver errors met while doing ``action`` on ``target`` as ClickHouseSinkError."""
    try:
        yield
    except OperationalError as ex:
        raise ClickHouseSinkError(
            f"{action}: cannot reach ClickHouse at {target} ({ex}); check that the "
            "server is running and reachable",
            retryable=True,
        ) from ex
    except CHError as ex:
        code = ex.code
        where = f"{database}.{table}" if table else database
        if code == UNKNOWN_TABLE:
            message = (
                f"{action}: table {where} does not exist on {target}; create it first "
                "with ensure_table() (the pipeline's setup step) or fix the table name"
            )
        elif code == UNKNOWN_DATABASE:
            message = (
                f"{action}: database {database} does not exist on {target}; create it "
                "with ensure_table() or fix the database name"
            )
        elif code == READONLY:
            message = (
                f"{action}: ClickHouse at {target} is read-only for this user; use a "
                f"user allowed to write ({ex})"
            )
        else:
            message = f"{action} on {target} failed: {ex}"
        raise ClickHouseSinkError(message, code=code, retryable=code in RETRYABLE_CODES) from ex


# ---- connection URLs -----------------------------------------------------------------------------


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


def scrub_password(ex: Exception, target: ClickHouseTarget) -> str:
    """The error's text with the target's password masked (drivers may echo it back)."""
    text = str(ex)
    if target.password:
        text = text.replace(target.password, "***")
    return text


# ---- chDB's data directory -----------------------------------------------------------------------


def open_embedded(path: str) -> Client:
    """A chDB client on the data directory ``path``, created if missing."""
    _prepare_data_dir(path)
    try:
        return clickhouse_connect.get_client(interface="chdb", path=path)
    except CHError as ex:
        raise _engine_open_error(path, ex) from None


def _prepare_data_dir(path: str) -> None:
    """Create the data directory, or say why it cannot be used."""
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
    try:
        with (Path(path) / "status").open("rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(handle, fcntl.LOCK_UN)
    except BlockingIOError:
        return True
    except OSError:  # no status file (or one that cannot be read)
        return False
    return False


def _engine_open_error(path: str, ex: Exception) -> ClickHouseSinkError:
    """The driver's failure to open ``path``, explained: other path in-process, or other process."""
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
