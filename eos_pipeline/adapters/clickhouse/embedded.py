"""chDB, the embedded engine: opening a data directory, and why opening it failed.

chDB runs one engine per process on one data path per process. Measured with chDB 26.9: any
number of clients may share the open path; a client on a *different* path fails ("EmbeddedServer
already initialized") while any client is open, and works once all are closed (the engine
re-initialises, and re-opening the first path later works too). A second *process* on an open
path fails to lock ``<path>/status``. The driver reports both as bare errors; this module turns
them, and an unusable directory, into a :class:`ClickHouseSinkError` saying what to do.
"""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import Error as CHError

from eos_pipeline.adapters.clickhouse.errors import ClickHouseSinkError


def open_embedded(path: str) -> Client:
    """A chDB client on the data directory ``path``, created if missing."""
    prepare_data_dir(path)
    try:
        return clickhouse_connect.get_client(interface="chdb", path=path)
    except CHError as ex:
        raise engine_open_error(path, ex) from None


def prepare_data_dir(path: str) -> None:
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


def status_locked_elsewhere(path: str) -> bool:
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


def engine_open_error(path: str, ex: Exception) -> ClickHouseSinkError:
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
    if status_locked_elsewhere(path):
        return ClickHouseSinkError(
            f"chDB data path {path} is in use by another process (chDB allows one process per "
            "data path): wait for that run to finish, or use a ClickHouse server (http://...) "
            "for parallel runs",
            retryable=True,
        )
    return ClickHouseSinkError(f"cannot open chDB at {path}: {text}")
