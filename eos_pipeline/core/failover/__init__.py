"""Failover and failback across MirrorMaker 2: naming, offset syncs, translation, exact resume.

MirrorMaker 2 (MM2) replicates topic ``T`` of cluster A to ``A.T`` on cluster B and records, now
and then, an *offset sync*: "upstream record ``u`` of ``T`` was written downstream at ``d``". Each
sync pairs the two offsets of one and the same record; between two syncs only the order of records
is known, not their offsets (transaction markers, and records MM2 has not copied yet, leave gaps).

From those pairs this module translates a position both ways, as the seed proposes:

* **forward** (A's ``T`` -> B's ``A.T``): take the latest sync whose upstream offset is at or
  before the position; land on its downstream offset if the position is exactly that record, else
  one past it (that record was consumed; how many after it were is unknown).
* **inverse** (B's ``A.T`` -> A's ``T``): the mirror image over the downstream offsets, which is
  what MM2's own proposal for "reverse checkpoints" would do with the same syncs.

Both are conservative by construction: never ahead of the true position, so nothing is skipped;
they may be behind, so records are re-read. The re-read is made exact by record identity: MM2
copies key, value, timestamp and headers unchanged, so a fingerprint of the last record a sink
wrote finds that record's copy on the other cluster, and the sink resumes right after it. When the
fingerprint is not where it must be, :func:`resume_after` stops with an error: it never guesses.

The offset-syncs topic is compacted (one sync per partition survives), so :class:`SyncHistory`
keeps every sync it is given; the adapter feeds it and the product decides what to persist.

Pure: no I/O. Reading the syncs topic and the re-read window lives in
``eos_pipeline.adapters.mirror``.
"""

from __future__ import annotations

from eos_pipeline.core.failover.errors import (
    AmbiguousFingerprint,
    FailoverError,
    FingerprintNotFound,
    OffsetSyncDecodeError,
    ReplicaPending,
    ResumeError,
)
from eos_pipeline.core.failover.identity import (
    MirroredRecord,
    ResumePoint,
    record_fingerprint,
    resume_after,
)
from eos_pipeline.core.failover.naming import (
    DEFAULT_POLICY,
    Flow,
    PhysicalTopic,
    ReplicationPolicy,
    physical_topics,
)
from eos_pipeline.core.failover.syncs import (
    OffsetSync,
    Route,
    SyncHistory,
    Translation,
    Window,
    decode_offset_sync,
    encode_offset_sync,
    route,
)

__all__ = [
    "DEFAULT_POLICY",
    "AmbiguousFingerprint",
    "FailoverError",
    "FingerprintNotFound",
    "Flow",
    "MirroredRecord",
    "OffsetSync",
    "OffsetSyncDecodeError",
    "PhysicalTopic",
    "ReplicaPending",
    "ReplicationPolicy",
    "ResumeError",
    "ResumePoint",
    "Route",
    "SyncHistory",
    "Translation",
    "Window",
    "decode_offset_sync",
    "encode_offset_sync",
    "physical_topics",
    "record_fingerprint",
    "resume_after",
    "route",
]
