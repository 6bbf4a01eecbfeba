"""Leases on keeper records, and what a refused or uncertain write means: pure rules.

A lease is the right to move one partition's record until someone acquires it again. Every store
(ZooKeeper through :mod:`eos_pipeline.adapters.keeper`, or the dict-backed store of the unit
tests) builds the record it means to write with :meth:`Lease.next_record`, compare-and-sets it
on the lease's znode version, and, when the answer is lost or the CAS refused, re-reads the
record and asks :func:`write_outcome` whether the write landed, may be sent again, or lost to
another writer (:func:`refusal` says which error that is).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from eos_pipeline.core.errors import NeedsPerson
from eos_pipeline.core.keeper_record import (
    PHASES,
    KeeperError,
    KeeperKey,
    KeeperRecord,
    Mark,
    VersionedRecord,
)

WriteOutcome = Literal["landed", "resend", "lost"]


class FencedError(NeedsPerson, KeeperError):
    """A newer writer took the partition: this lease may never move the state again."""

    code = "fenced"


class ConflictError(NeedsPerson, KeeperError):
    """The znode changed in a way this writer did not expect, so nothing was written."""

    code = "keeper-conflict"


@dataclass
class Lease:
    """The right to move one partition's state, valid until someone acquires it again.

    ``version`` is the znode version of the last write made through this lease (or of the acquire)
    and advances with each write; ``record`` is what that write stored. Read the state taken over
    from ``record`` right after :meth:`StateStore.acquire`.
    """

    key: KeeperKey
    epoch: int
    writer: str
    version: int
    record: KeeperRecord

    def next_record(
        self,
        range_start: int,
        range_end: int,
        phase: str,
        now: datetime,
        *,
        topic_id: str | None = None,
        mark: Mark | None = None,
        replace_mark: bool = False,
    ) -> KeeperRecord:
        """The record a write of ``[range_start, range_end)`` in ``phase`` through this lease
        means to store; every store (ZooKeeper or the unit tests' dict) CASes exactly this."""
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        intended = self.record.with_state(
            range_start,
            range_end,
            phase,
            now,
            topic_id,
            cluster=self.key.cluster,
            mark=mark,
            replace_mark=replace_mark,
        )
        if intended.epoch != self.epoch or intended.writer != self.writer:
            raise ValueError(f"lease for {self.key} does not match its own record")
        return intended


def write_outcome(
    intended: KeeperRecord, expected_version: int | None, current: VersionedRecord | None
) -> WriteOutcome:
    """After an uncertain or refused write: ``"landed"``, ``"resend"`` or ``"lost"``."""
    if current is not None and current.record == intended:
        return "landed"
    unchanged = (
        current is None
        if expected_version is None
        else (current is not None and current.version == expected_version)
    )
    return "resend" if unchanged else "lost"


def refusal(lease: Lease, current: VersionedRecord | None, path: str) -> KeeperError:
    """Why a write through ``lease`` did not land, given what the znode holds now."""
    if current is None:
        return ConflictError(
            f"conflict: the record of {lease.key} at {path} was deleted while epoch "
            f"{lease.epoch} held it; nothing written"
        )
    stored = current.record
    if stored.epoch > lease.epoch:
        return FencedError(
            f"fenced: writer epoch {lease.epoch} < current epoch {stored.epoch} for {lease.key} "
            f"(taken over by {stored.writer!r})"
        )
    return ConflictError(
        f"conflict: the record of {lease.key} at {path} changed under epoch {lease.epoch} "
        f"(expected version {lease.version}, found version {current.version} with epoch "
        f"{stored.epoch} by {stored.writer!r}); is the same lease used twice? nothing written"
    )


__all__ = [
    "ConflictError",
    "FencedError",
    "Lease",
    "WriteOutcome",
    "refusal",
    "write_outcome",
]
