"""Record identity across clusters: a fingerprint MM2 preserves, and the exact resume point.

MM2 copies key, value, timestamp and headers unchanged; the fingerprint of the last record a
sink wrote finds its copy in a re-read window, and the sink resumes right after it. Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from eos_pipeline.core.failover.errors import (
    AmbiguousFingerprint,
    FingerprintNotFound,
    ReplicaPending,
    ResumeError,
)
from eos_pipeline.core.failover.syncs import Window
from eos_pipeline.core.offsets import TopicPartition

# --------------------------------------------------------------------------------------- identity

_FINGERPRINT_PERSON = b"eos-mm2-fp-v1"


def _feed(digest: hashlib.blake2b, data: bytes | None) -> None:
    # None and b"" differ (a null key is not an empty key); lengths keep fields from running into
    # each other, so (b"ab", b"c") and (b"a", b"bc") never collide.
    if data is None:
        digest.update(b"\x00")
    else:
        digest.update(b"\x01" + len(data).to_bytes(4, "big") + data)


def record_fingerprint(
    key: bytes | None,
    value: bytes | None,
    timestamp_ms: int,
    headers: Sequence[tuple[str | bytes, bytes | None]] | None = None,
) -> str:
    """A stable identity of a record across clusters: BLAKE2b-128 of what MM2 copies unchanged.

    Key, value, timestamp (ms) and headers (in order; a header without value differs from an
    empty one). Offsets are left out on purpose: they differ between a record and its copy.
    """
    digest = hashlib.blake2b(digest_size=16, person=_FINGERPRINT_PERSON)
    _feed(digest, key)
    _feed(digest, value)
    digest.update(int(timestamp_ms).to_bytes(8, "big", signed=True))
    items = list(headers or ())
    digest.update(len(items).to_bytes(4, "big"))
    for name, header_value in items:
        _feed(digest, name.encode("utf-8") if isinstance(name, str) else bytes(name))
        _feed(digest, header_value)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class MirroredRecord:
    """One record as read from either cluster: its offset there and what MM2 preserves."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def fingerprint(self) -> str:
        return record_fingerprint(self.key, self.value, self.timestamp_ms, self.headers)


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where to continue on the new cluster, found by record identity.

    ``position`` is the next offset to read (the match + 1); ``skipped`` counts the records of the
    window up to and including the match, all already written before the switch; ``bounded`` is
    False when the window had no upper sync (see :func:`resume_after`).
    """

    position: int
    matched_offset: int
    skipped: int
    bounded: bool


def resume_after(
    partition: TopicPartition | str,
    fingerprint: str,
    records: Iterable[MirroredRecord],
    window: Window,
) -> ResumePoint:
    """The exact next position after the record whose identity is ``fingerprint``.

    ``records`` are the records read from ``window`` on the new cluster (in offset order; for an
    open window, up to the end of what is readable now). The match must be unique: no match in a
    closed window means the record is not where the syncs say it must be (FingerprintNotFound);
    none in an open window means it may not be copied yet (ReplicaPending); two or more means the
    partition holds identical records (same key, value, timestamp and headers) and the written
    one cannot be told apart (AmbiguousFingerprint).

    A unique match in an open window is returned with ``bounded=False``: it is exact unless an
    identical record was written shortly before the last one and only that earlier one is copied
    yet. With an up-to-date history that cannot happen (MM2 syncs the last record of each of its
    transactions, which closes the window); a caller working from an older history and unable to
    rule out identical records re-reads the syncs until the window closes.
    """
    matches: list[tuple[int, int]] = []
    count = 0
    last = None
    for record in records:
        if record.offset not in window or (last is not None and record.offset <= last):
            raise ResumeError(
                f"{partition}: record at offset {record.offset} is outside the re-read window "
                f"{window} or out of order; read exactly the window's records"
            )
        last = record.offset
        count += 1
        if record.fingerprint == fingerprint:
            matches.append((record.offset, count))
    if len(matches) == 1:
        offset, seen = matches[0]
        return ResumePoint(offset + 1, offset, seen, window.closed)
    if matches:
        raise AmbiguousFingerprint(
            f"{partition}: the last written record (fingerprint {fingerprint}) matches "
            f"{len(matches)} records at offsets {[m[0] for m in matches][:10]} of window {window}; "
            "the partition holds identical records and the resume point cannot be told. Resume "
            "this partition by hand (set its position) after checking the tables."
        )
    if window.closed:
        raise FingerprintNotFound(
            f"{partition}: the last written record (fingerprint {fingerprint}) is not among the "
            f"{count} records of window {window}, where MM2's offset syncs place its copy. The "
            "replica was changed in flight (a transform, a LogAppendTime topic) or the syncs "
            "belong to another topic incarnation; nothing was written. Check the replica topic "
            "and the MM2 configuration, then resume this partition by hand."
        )
    raise ReplicaPending(
        f"{partition}: the last written record (fingerprint {fingerprint}) is not among the "
        f"{count} records read from {window}: MirrorMaker 2 has probably not copied it yet. "
        "Nothing was written; wait for replication to catch up (or for the old cluster to come "
        "back) and retry."
    )
