"""One keeper session per process for readers that come back often (sensor ticks).

A sensor evaluated every few seconds used to open a new ZooKeeper session per tick (and the
topics sensor one per topic): a TCP connect, a session handshake and a close each time, and a
session the ensemble must track and expire. Reads need none of that: they are idempotent, kazoo's
client is safe to share between threads, and it reconnects (with a new session if the old one
expired) by itself. So readers take the process's store for their settings; nothing here holds
a lease or relies on the session (all znodes are persistent, leases are epochs, not sessions).

The store is rebuilt when it was closed, after a fork (the process id is part of the key: a
client's threads do not survive a fork), and after a reader's block raised a keeper error (so a
broken client is not kept).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from eos_pipeline.adapters.keeper.settings import KeeperSettings
from eos_pipeline.adapters.keeper.store import KeeperStateStore
from eos_pipeline.core.keeper import KeeperError

_STORES: dict[tuple[int, KeeperSettings], KeeperStateStore] = {}
_LOCK = threading.Lock()
#: Settings seen by one process are few (one keeper per code location); more is a test session.
_MAX_STORES = 8


def _take(settings: KeeperSettings) -> KeeperStateStore:
    key = (os.getpid(), settings)
    with _LOCK:
        store = _STORES.get(key)
        if store is not None and not store.closed:
            return store
        store = KeeperStateStore(settings).start()
        _STORES[key] = store
        while len(_STORES) > _MAX_STORES:
            _STORES.pop(next(iter(_STORES))).close()
        return store


def _drop(settings: KeeperSettings, store: KeeperStateStore) -> None:
    key = (os.getpid(), settings)
    with _LOCK:
        if _STORES.get(key) is store:
            del _STORES[key]
    store.close()


@contextmanager
def shared_store(settings: KeeperSettings) -> Iterator[KeeperStateStore]:
    """The process's started store for ``settings``, left open for the next reader."""
    store = _take(settings)
    try:
        yield store
    except KeeperError:
        _drop(settings, store)
        raise


def close_shared_stores() -> None:
    """Close every shared store of this process (tests, shutdown)."""
    with _LOCK:
        stores = list(_STORES.values())
        _STORES.clear()
    for store in stores:
        store.close()


__all__ = ["close_shared_stores", "shared_store"]
