"""MM2's offset-sync record bytes, written by tests to feed the product's decoder, and a history
filled from a list of syncs."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from eos_pipeline.core.failover import OffsetSync, SyncHistory


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """The (key, value) bytes MM2 writes for ``sync``: the inverse of the decoder."""
    name = sync.topic.encode("utf-8")
    key = struct.pack(">h", len(name)) + name + struct.pack(">i", sync.partition)
    return key, struct.pack(">qq", sync.upstream, sync.downstream)


def add_syncs(history: SyncHistory, syncs: Iterable[OffsetSync]) -> None:
    """Each of ``syncs`` folded into ``history`` in order, as the adapter adds them one by one."""
    for sync in syncs:
        history.add(sync)
