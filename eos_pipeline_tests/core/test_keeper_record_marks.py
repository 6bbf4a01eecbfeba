"""Keeper record v3: the cluster a position belongs to and the mark of the last record written."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from eos_pipeline.core.keeper import (
    CorruptRecordError,
    InvalidKeyError,
    KeeperKey,
    KeeperRecord,
    Mark,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
FP = "0123456789abcdef0123456789abcdef"


def _record(**kw: object) -> KeeperRecord:
    base: dict[str, object] = dict(
        epoch=3,
        lease_id="abcdef0123456789",
        writer="w",
        updated_at=NOW,
        range_start=10,
        range_end=20,
        phase="AFTER",
    )
    base.update(kw)
    return KeeperRecord(**base)  # type: ignore[arg-type]


def test_cluster_keys_live_apart_from_single_cluster_keys() -> None:
    plain = KeeperKey("p", "clickhouse", "T", 0)
    on_b = KeeperKey("p", "clickhouse", "A.T", 0, "B")
    assert plain.path("/r") == "/r/p/clickhouse/T/0"
    assert on_b.path("/r") == "/r/p/clickhouse/@B/A.T/0"
    assert KeeperKey("p", "clickhouse", "T", 0, "A").path("/r") != plain.path("/r")
    with pytest.raises(InvalidKeyError):
        KeeperKey("p", "clickhouse", "T", 0, "A.B")


def test_a_record_without_cluster_or_mark_stays_version_2() -> None:
    assert json.loads(_record().encode())["v"] == 2


@pytest.mark.parametrize(
    "mark",
    [Mark(FP, 19), Mark(FP, None, None), Mark(FP, None, 30)],
)
def test_version_3_round_trips(mark: Mark) -> None:
    record = _record(cluster="B", mark=mark)
    raw = record.encode()
    assert json.loads(raw)["v"] == 3
    assert KeeperRecord.decode(raw, "/x") == record


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(mark=Mark(FP, 20)), "not below range_end"),
        (dict(mark=Mark(FP, None, 19)), "below range_end"),
        (dict(cluster="a.b"), "cluster alias"),
    ],
)
def test_inconsistent_marks_are_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises((ValueError, InvalidKeyError), match=message):
        _record(**kw)


def test_bad_marks_are_refused() -> None:
    with pytest.raises(ValueError, match="fingerprint"):
        Mark("xyz", 1)
    with pytest.raises(ValueError, match="no window"):
        Mark(FP, 1, 5)
    raw = json.loads(_record(cluster="B", mark=Mark(FP, 19)).encode())
    raw["mark"] = {"fingerprint": FP}
    with pytest.raises(CorruptRecordError, match="mark must be"):
        KeeperRecord.decode(json.dumps(raw).encode(), "/x")


def test_a_new_state_keeps_the_mark_unless_told() -> None:
    record = _record(cluster="B", mark=Mark(FP, 19))
    kept = record.with_state(20, 25, "BEFORE", NOW)
    assert kept.mark == Mark(FP, 19) and kept.cluster == "B"
    cleared = record.with_state(30, 30, "AFTER", NOW, mark=None, replace_mark=True)
    assert cleared.mark is None
