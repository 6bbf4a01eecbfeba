"""One creator per new Hudi table: a lock held while a new table gets its first commit.

Hudi writes ``hoodie.properties`` inside the first write, before its commit lock; two writers
racing on a new local table interleave it with Hadoop's ``.crc`` file and the table can never be
read again ("Could not load properties"; seen in CI). So the first commit is taken under a lock
every writer of the table shares: a kazoo lock beside Hudi's own when its lock provider is
ZooKeeper's, else a ``flock`` in the table's local directory (dropped by the kernel when its
holder dies); other file systems keep no ``.crc`` and get nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final
from urllib.parse import urlparse

log = logging.getLogger(__name__)

_PROVIDER_OPTION: Final = "hoodie.write.lock.provider"
_ZOOKEEPER_PROVIDER: Final = "ZookeeperBasedLockProvider"
_ZK_URL: Final = "hoodie.write.lock.zookeeper.url"
_ZK_PORT: Final = "hoodie.write.lock.zookeeper.port"
_ZK_BASE: Final = "hoodie.write.lock.zookeeper.base_path"
_ZK_KEY: Final = "hoodie.write.lock.zookeeper.lock_key"
#: The lock file's name inside the table's directory (Hudi ignores hidden files there).
LOCAL_LOCK_NAME: Final = ".eos-create.lock"
#: How long a writer waits for another writer's table creation (a cold Spark may take a while).
DEFAULT_WAIT_S: Final = 300.0


class TableCreationLockError(RuntimeError):
    """The lock that guards a new table's creation could not be taken in time."""


def local_table_dir(table_path: str) -> Path | None:
    """The directory of a table on the local file system, or None for any other file system."""
    parsed = urlparse(table_path)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Path(table_path)
    return None


def zookeeper_lock_node(options: Mapping[str, str] | None) -> tuple[str, str] | None:
    """``(hosts, node)`` of the creation lock when Hudi's commit lock is ZooKeeper's, else None.

    Curator connects to the url alone, so a url without a port gets the configured one.
    """
    options = options or {}
    if not options.get(_PROVIDER_OPTION, "").endswith(_ZOOKEEPER_PROVIDER):
        return None
    url, port = options.get(_ZK_URL, ""), options.get(_ZK_PORT, "2181")
    base, key = options.get(_ZK_BASE, ""), options.get(_ZK_KEY, "")
    if not url or not base or not key:
        raise TableCreationLockError(
            f"{_PROVIDER_OPTION} is ZooKeeper's but {_ZK_URL}, {_ZK_BASE} or {_ZK_KEY} is "
            "missing from the table's Hudi options"
        )
    hosts = ",".join(h if ":" in h else f"{h}:{port}" for h in url.split(","))
    return hosts, f"{base.rstrip('/')}/{key}.eos-create"


@contextlib.contextmanager
def table_creation_lock(
    table_path: str, options: Mapping[str, str] | None = None, *, wait_s: float = DEFAULT_WAIT_S
) -> Iterator[None]:
    """Hold the lock that serializes the creation of ``table_path`` (see the module docstring)."""
    zookeeper = zookeeper_lock_node(options)
    if zookeeper is not None:
        with _zookeeper_lock(*zookeeper, wait_s=wait_s):
            yield
        return
    directory = local_table_dir(table_path)
    if directory is None:
        yield
        return
    with _file_lock(directory / LOCAL_LOCK_NAME, wait_s=wait_s):
        yield


@contextlib.contextmanager
def _file_lock(path: Path, *, wait_s: float) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TableCreationLockError(
                        f"{path}: another writer has been creating this Hudi table for over "
                        f"{wait_s:.0f} s; see which process holds the lock (fuser {path})"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _zookeeper_lock(hosts: str, node: str, *, wait_s: float) -> Iterator[None]:
    from kazoo.client import KazooClient
    from kazoo.exceptions import LockTimeout

    client = KazooClient(hosts=hosts, timeout=min(wait_s, 15.0))
    try:
        client.start(timeout=min(wait_s, 15.0))
    except Exception as exc:
        raise TableCreationLockError(
            f"ZooKeeper at {hosts} (Hudi's lock provider) is not reachable to create the "
            f"table: {exc}"
        ) from exc
    try:
        lock = client.Lock(node, identifier=f"{os.uname().nodename}/{os.getpid()}")
        try:
            lock.acquire(timeout=wait_s)
        except LockTimeout:
            raise TableCreationLockError(
                f"ZooKeeper lock {node} at {hosts}: another writer has been creating this Hudi "
                f"table for over {wait_s:.0f} s (holders: {lock.contenders()})"
            ) from None
        try:
            yield
        finally:
            lock.release()
    finally:
        client.stop()
        client.close()
