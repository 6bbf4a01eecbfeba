"""MM2's offset-sync record bytes, written by tests to feed the product's decoder."""

from __future__ import annotations

import struct

from eos_pipeline.core.failover import OffsetSync


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """The (key, value) bytes MM2 writes for ``sync``: the inverse of the decoder."""
    name = sync.topic.encode("utf-8")
    key = struct.pack(">h", len(name)) + name + struct.pack(">i", sync.partition)
    return key, struct.pack(">qq", sync.upstream, sync.downstream)
