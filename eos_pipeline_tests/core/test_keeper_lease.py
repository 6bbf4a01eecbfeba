"""The lease rules every keeper store applies: the record a write means, and what a refused or
unanswered write turned out to be."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from eos_pipeline.core.keeper import (
    ConflictError,
    FencedError,
    KeeperKey,
    KeeperRecord,
    Lease,
    VersionedRecord,
    refusal,
    write_outcome,
)

NOW = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
KEY = KeeperKey("orders", "clickhouse", "events", 3)


def lease(epoch: int = 2, version: int = 7) -> Lease:
    record = KeeperRecord(epoch=epoch, lease_id="a1a1a1a1", writer="host/1/run", updated_at=NOW)
    return Lease(KEY, epoch, "host/1/run", version, record)


def test_next_record_moves_the_state_under_the_lease_epoch() -> None:
    record = lease().next_record(10, 25, "BEFORE", NOW, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
    assert (record.range_start, record.range_end, record.phase) == (10, 25, "BEFORE")
    assert (record.epoch, record.lease_id, record.writer) == (2, "a1a1a1a1", "host/1/run")
    assert record.topic_id == "AAAAAAAAAAAAAAAAAAAAAA"


def test_next_record_refuses_an_unknown_phase_and_a_lease_that_is_not_its_record() -> None:
    with pytest.raises(ValueError, match="phase must be one of"):
        lease().next_record(0, 1, "DURING", NOW)
    broken = lease()
    broken.epoch = 3  # the record says epoch 2
    with pytest.raises(ValueError, match="does not match its own record"):
        broken.next_record(0, 1, "AFTER", NOW)


def test_write_outcome_tells_landed_from_resend_from_lost() -> None:
    intended = lease().next_record(0, 5, "AFTER", NOW)
    other = lease().next_record(0, 9, "AFTER", NOW)
    assert write_outcome(intended, 7, VersionedRecord(intended, 8)) == "landed"
    assert write_outcome(intended, 7, VersionedRecord(other, 7)) == "resend"
    assert write_outcome(intended, 7, VersionedRecord(other, 8)) == "lost"
    assert write_outcome(intended, None, None) == "resend"  # a create that did not land
    assert write_outcome(intended, 7, None) == "lost"  # deleted meanwhile


def test_refusal_names_the_newer_writer_or_the_conflict() -> None:
    mine = lease(epoch=2)
    newer = KeeperRecord(epoch=3, lease_id="b2b2b2b2", writer="host/2/run", updated_at=NOW)
    fenced = refusal(mine, VersionedRecord(newer, 9), "/p")
    assert isinstance(fenced, FencedError) and "'host/2/run'" in str(fenced)
    same_epoch = refusal(mine, VersionedRecord(mine.next_record(0, 1, "AFTER", NOW), 9), "/p")
    assert isinstance(same_epoch, ConflictError) and "same lease used twice" in str(same_epoch)
    assert isinstance(refusal(mine, None, "/p"), ConflictError)
