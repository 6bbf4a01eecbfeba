"""The keeper state store: per topic-partition sink positions in ZooKeeper, fenced by epochs.

``settings`` says how to reach the keeper and what a store offers (:class:`StateStore`);
``store`` is the ZooKeeper store through kazoo. The lease rules it applies are pure, in
:mod:`eos_pipeline.core.keeper`.

Layout
------
One persistent znode per (pipeline, sink, topic, partition)::

    <root>/<pipeline>/<sink>/<topic>/<partition>      root defaults to /eos_pipeline

The hosts string may carry a chroot (``zk1:2181,zk2:2181/team-a``); the store creates the chroot
node when it is missing. The value is the JSON record of :mod:`eos_pipeline.core.keeper`
(position, phase, epoch, writer, timestamp). Parent znodes are empty.

Compare-and-set and fencing
---------------------------
The epoch and the state live in the *same* znode, so one ``set(path, data, version=v)`` checks and
moves both; no multi-op transaction is needed. :meth:`KeeperStateStore.acquire` bumps the epoch
with a CAS and returns a :class:`Lease` holding the new epoch and the znode version it produced.
Every :meth:`KeeperStateStore.write` is a CAS on the lease's last known version. Any other change
to the znode (in particular a newer writer's acquire) changes the version, so a zombie's write
gets ``BadVersion``; the store then re-reads and raises :class:`FencedError` when the stored epoch
is newer than the lease's. The order of events cannot matter: ZooKeeper applies the bump and the
zombie's CAS one after the other, and whichever comes second sees a version it did not expect.

Lost responses
--------------
A write may reach ZooKeeper and the answer be lost (connection loss, session expiry, timeout), or
a caller may retry a write that had in fact succeeded. In both cases the store re-reads the znode:

* stored content (everything but ``updated_at``) equals what this write meant to store, under our
  epoch and lease id -> the write *did* land: success, the lease moves to the stored version;
* the version is still the one we sent with (the write did not land, nothing else changed) ->
  send the same CAS again;
* the stored epoch is newer -> :class:`FencedError`;
* anything else (same epoch, other content: the lease is being used by two callers, or the node
  was reset or deleted) -> :class:`ConflictError`. Nothing is overwritten.

Sessions
--------
All znodes are persistent, never ephemeral, so an expired session loses nothing: kazoo opens a new
session and the next CAS still names the right version. Leases are not tied to sessions; a lease
ends only when someone acquires the partition again. Reads are retried with ``KazooRetry`` across
connection loss and expiry (they are idempotent); writes rely on the CAS and the re-read above.
Every call is bounded by ``operation_timeout_s``, then fails with :class:`KeeperUnavailableError`.

A store and its leases are meant for one thread at a time; readers that come back every few
seconds (sensor ticks) share one started store per process (``shared``), not a session each.
"""

from eos_pipeline.adapters.keeper.settings import (
    KeeperAuthError,
    KeeperSettings,
    KeeperUnavailableError,
    StateStore,
    default_writer_id,
)
from eos_pipeline.adapters.keeper.shared import close_shared_stores, shared_store
from eos_pipeline.adapters.keeper.store import KeeperStateStore
from eos_pipeline.core.keeper import ConflictError, FencedError, Lease

__all__ = [
    "ConflictError",
    "FencedError",
    "KeeperAuthError",
    "KeeperSettings",
    "KeeperStateStore",
    "KeeperUnavailableError",
    "Lease",
    "StateStore",
    "close_shared_stores",
    "default_writer_id",
    "shared_store",
]
