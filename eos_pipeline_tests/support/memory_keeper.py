"""A dict-backed keeper store for unit tests of code around the keeper.

It shares the ZooKeeper store's rules through the same pure helpers
(:mod:`eos_pipeline.core.keeper`): same record format, version CAS, epoch fencing, same
errors.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from eos_pipeline.adapters import keeper
from eos_pipeline.adapters.keeper import WriteFields, default_writer_id
from eos_pipeline.core.keeper import (
    DEFAULT_ROOT,
    KeeperKey,
    KeeperRecord,
    Lease,
    VersionedRecord,
    new_lease_id,
    refusal,
    topic_path,
    utc_now,
    validate_root,
    write_outcome,
)

if TYPE_CHECKING:  # typing.Unpack for **kwargs needs Python 3.12
    from typing_extensions import Unpack


class UnsafeInMemoryStateStore:
    """A dict-backed :class:`StateStore` for unit tests of code *around* the keeper.

    It gives NO exactly-once guarantee: nothing survives the process, and nothing is shared
    between processes, so it cannot fence a zombie anywhere but inside one test. It mirrors the
    ZooKeeper store's rules (same record format, version CAS, epoch fencing, same errors) so that
    a sink loop tested against it behaves the same against the real keeper.
    """

    def __init__(self, root: str = DEFAULT_ROOT, clock: Callable[[], datetime] = utc_now) -> None:
        self.root = validate_root(root)
        self._clock = clock
        self._nodes: dict[str, tuple[bytes, int]] = {}

    def _get(self, path: str) -> VersionedRecord | None:
        node = self._nodes.get(path)
        return (
            None if node is None else VersionedRecord(KeeperRecord.decode(node[0], path), node[1])
        )

    def put_raw(self, key: KeeperKey, data: bytes) -> None:
        """Overwrite a node's bytes (to test handling of corrupt records)."""
        path = key.path(self.root)
        old = self._nodes.get(path)
        self._nodes[path] = (data, 0 if old is None else old[1] + 1)

    def read(self, key: KeeperKey) -> VersionedRecord | None:
        return self._get(key.path(self.root))

    def list_partitions(
        self, pipeline: str, sink: str, topic: str, cluster: str | None = None
    ) -> list[int]:
        parent = topic_path(self.root, pipeline, sink, topic, cluster) + "/"
        return sorted(int(p[len(parent) :]) for p in self._nodes if p.startswith(parent))

    def read_many(
        self, pipeline: str, sink: str, topic: str, cluster: str | None = None
    ) -> dict[int, VersionedRecord]:
        parent = topic_path(self.root, pipeline, sink, topic, cluster)
        found = {}
        for p in self.list_partitions(pipeline, sink, topic, cluster):
            record = self._get(f"{parent}/{p}")
            if record is not None:
                found[p] = record
        return found

    def acquire(self, key: KeeperKey, *, writer: str | None = None) -> Lease:
        writer = writer or default_writer_id()
        lease_id = new_lease_id()
        path = key.path(self.root)
        current = self._get(path)
        if current is None:
            record = KeeperRecord(
                epoch=1, lease_id=lease_id, writer=writer, updated_at=self._clock()
            )
            version = 0
        else:
            record = current.record.taken_over(lease_id, writer, self._clock())
            version = current.version + 1
        self._nodes[path] = (record.encode(), version)
        return Lease(key, record.epoch, writer, version, record)

    def write(
        self,
        lease: Lease,
        range_start: int,
        range_end: int,
        phase: str,
        **fields: Unpack[WriteFields],
    ) -> VersionedRecord:
        path = lease.key.path(self.root)
        intended = lease.next_record(range_start, range_end, phase, self._clock(), **fields)
        current = self._get(path)
        if current is not None and current.version == lease.version:
            stored = VersionedRecord(intended, current.version + 1)
            self._nodes[path] = (intended.encode(), stored.version)
        elif write_outcome(intended, lease.version, current) == "landed":
            assert current is not None
            stored = current
        else:
            raise refusal(lease, current, path)
        lease.version, lease.record = stored.version, stored.record
        return stored


__all__ = ["UnsafeInMemoryStateStore"]


def close_shared_stores() -> None:
    """Close every shared ZooKeeper store of this process (``adapters.keeper.shared_store``)."""
    with keeper._LOCK:
        stores = list(keeper._STORES.values())
        keeper._STORES.clear()
    for store in stores:
        store.close()
