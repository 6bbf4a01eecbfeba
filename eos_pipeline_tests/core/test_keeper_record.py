"""The keeper record: path components are validated, values round-trip, corruption is loud."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from eos_pipeline.core.keeper import (
    CorruptRecordError,
    InvalidKeyError,
    KeeperKey,
    KeeperRecord,
    parse_partition_child,
    topic_path,
    validate_root,
)
from eos_pipeline.core.offsets import TopicPartition

T0 = datetime(2025, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)
LEASE = "0123456789abcdef"
TOPIC_ID = "WrerBLBuR-e7REEFg8SMLg"  # the shape Kafka prints a topic's UUID in
PATH = "/eos_pipeline/p/s/orders/3"


def record(**overrides: object) -> KeeperRecord:
    fields: dict[str, object] = {
        "epoch": 4,
        "lease_id": LEASE,
        "writer": "host-a/123/run-1",
        "updated_at": T0,
        "range_start": 100,
        "range_end": 120,
        "phase": "AFTER",
    }
    fields.update(overrides)
    return KeeperRecord(**fields)  # type: ignore[arg-type]


# --- keys and paths ---------------------------------------------------------------------------


def test_key_builds_the_documented_path() -> None:
    key = KeeperKey("sales", "clickhouse.orders", "orders-v2", 3)
    assert key.path() == "/eos_pipeline/sales/clickhouse.orders/orders-v2/3"
    assert key.path("/team/keeper") == "/team/keeper/sales/clickhouse.orders/orders-v2/3"
    assert str(key) == "sales/clickhouse.orders/orders-v2[3]"
    assert key.tp == TopicPartition("orders-v2", 3)
    assert KeeperKey.of("sales", "ch", TopicPartition("orders", 7)) == KeeperKey(
        "sales", "ch", "orders", 7
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pipeline", "../x"),
        ("pipeline", ".."),
        ("pipeline", "."),
        ("pipeline", "a/b"),
        ("pipeline", ""),
        ("pipeline", "a b"),
        ("pipeline", "ünï"),
        ("pipeline", "x" * 201),
        ("sink", "a..b"),
        ("sink", "/abs"),
        ("sink", "tab\t"),
        ("sink", None),
    ],
)
def test_bad_pipeline_or_sink_names_are_rejected_naming_the_field(field: str, value: str) -> None:
    parts = {"pipeline": "p", "sink": "s", "topic": "t", "partition": 0, field: value}
    with pytest.raises(InvalidKeyError, match=f"^{field}"):
        KeeperKey(**parts)  # type: ignore[arg-type]


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "../x", "with space", "x" * 250, "ä"])
def test_bad_topics_are_rejected_by_kafkas_rule(topic: str) -> None:
    with pytest.raises(InvalidKeyError, match=r"^topic"):
        KeeperKey("p", "s", topic, 0)


@pytest.mark.parametrize("partition", [-1, 2**31, True, "3", 1.0])
def test_bad_partitions_are_rejected(partition: object) -> None:
    with pytest.raises(InvalidKeyError, match=r"^partition"):
        KeeperKey("p", "s", "t", partition)  # type: ignore[arg-type]


def test_names_at_the_limits_are_accepted() -> None:
    KeeperKey("a", "B_9.-x", "t" * 249, 2**31 - 1)
    KeeperKey("x" * 200, ".hidden", "_t", 0)


@pytest.mark.parametrize(
    "root", ["", "/", "relative", "//", "/a/../b", "/a/./b", "/zookeeper", "/zookeeper/x", "/a b"]
)
def test_bad_roots_are_rejected(root: str) -> None:
    with pytest.raises(InvalidKeyError, match="root"):
        validate_root(root)


def test_root_is_normalised_without_trailing_slash() -> None:
    assert validate_root("/eos/") == "/eos"
    assert validate_root("/a/b") == "/a/b"
    assert topic_path("/a/b/", "p", "s", "t") == "/a/b/p/s/t"


def test_partition_children_must_be_canonical_numbers() -> None:
    assert parse_partition_child("0", "/r/p/s/t") == 0
    assert parse_partition_child("12", "/r/p/s/t") == 12
    for bad in ("012", "-1", "x", "", "1.0", "٣"):
        with pytest.raises(CorruptRecordError, match="/r/p/s/t/"):
            parse_partition_child(bad, "/r/p/s/t")


# --- records ----------------------------------------------------------------------------------


def test_record_encodes_to_the_documented_json() -> None:
    data = record().encode()
    assert json.loads(data) == {
        "v": 2,
        "epoch": 4,
        "lease_id": LEASE,
        "writer": "host-a/123/run-1",
        "updated_at": "2025-01-31T12:00:00.123Z",
        "range_start": 100,
        "range_end": 120,
        "phase": "AFTER",
        "topic_id": None,
    }
    assert b" " not in data  # compact, deterministic bytes
    assert data == record().encode()


def test_record_round_trips_with_and_without_state() -> None:
    for original in (
        record(),
        record(phase="BEFORE", range_start=0, range_end=0),
        record(range_start=None, range_end=None, phase=None, epoch=1),
        record(topic_id=TOPIC_ID),
    ):
        back = KeeperRecord.decode(original.encode(), PATH)
        assert back == original
        assert back.updated_at == T0.replace(microsecond=123000)
        assert back.has_state is (original.phase is not None)


def test_timestamps_in_other_zones_are_stored_as_utc() -> None:
    plus_two = T0.astimezone(timezone(timedelta(hours=2)))
    assert json.loads(record(updated_at=plus_two).encode())["updated_at"] == (
        "2025-01-31T12:00:00.123Z"
    )


def test_equality_ignores_only_the_timestamp() -> None:
    assert record() == record(updated_at=T0 + timedelta(days=1))
    assert record() != record(lease_id="f" * 16)
    assert record() != record(epoch=5)
    assert record() != record(writer="other")
    assert record() != record(phase="BEFORE")
    assert record() != record(range_end=121)
    assert record() != record(topic_id=TOPIC_ID)


def test_version_1_records_are_read_without_a_topic_id() -> None:
    """Records written before topic ids were stored stay readable (and get one on next write)."""
    obj = json.loads(record().encode())
    del obj["topic_id"]
    obj["v"] = 1
    old = KeeperRecord.decode(json.dumps(obj).encode(), PATH)
    assert old == record() and old.topic_id is None
    moved = old.with_state(120, 130, "BEFORE", T0, topic_id=TOPIC_ID)
    assert json.loads(moved.encode())["v"] == 2
    assert KeeperRecord.decode(moved.encode(), PATH).topic_id == TOPIC_ID
    # A write that does not name the id keeps the stored one.
    assert moved.with_state(120, 130, "AFTER", T0).topic_id == TOPIC_ID


def test_with_state_and_taken_over() -> None:
    base = record(range_start=None, range_end=None, phase=None)
    moved = base.with_state(5, 9, "BEFORE", T0)
    assert (moved.range_start, moved.range_end, moved.phase, moved.epoch) == (5, 9, "BEFORE", 4)
    taken = moved.taken_over("a" * 16, "host-b/9/run-2", T0)
    assert (taken.epoch, taken.lease_id, taken.writer) == (5, "a" * 16, "host-b/9/run-2")
    assert (taken.range_start, taken.range_end, taken.phase) == (5, 9, "BEFORE")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"epoch": 0}, "epoch"),
        ({"epoch": True}, "epoch"),
        ({"lease_id": "XYZ"}, "lease_id"),
        ({"writer": ""}, "writer"),
        ({"writer": "a\nb"}, "writer"),
        ({"updated_at": datetime(2025, 1, 1)}, "updated_at"),
        ({"range_start": None}, "together"),
        ({"phase": None}, "together"),
        ({"range_start": -1}, "range_start"),
        ({"range_start": 10, "range_end": 9}, "below"),
        ({"phase": "DONE"}, "phase"),
        ({"topic_id": "../../etc"}, "topic_id"),
        ({"topic_id": ""}, "topic_id"),
    ],
)
def test_invalid_records_cannot_be_built(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        record(**overrides)


def _mutated(**changes: object) -> bytes:
    obj = json.loads(record().encode())
    for k, v in changes.items():
        if v is KeyError:
            del obj[k]
        else:
            obj[k] = v
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (None, "empty"),
        (b"{not json", "not UTF-8 JSON"),
        (b"\xff\xfe", "not UTF-8 JSON"),
        (b"[1, 2]", "JSON object"),
        (b'"x"', "JSON object"),
        (_mutated(v=4), "unknown format version v=4"),
        (_mutated(v=True), "unknown format version v=True"),
        (_mutated(topic_id=KeyError), "missing keys \\['topic_id'\\]"),
        (_mutated(v=1), "unexpected keys \\['topic_id'\\]"),
        (_mutated(v=KeyError), "unknown format version v=None"),
        (_mutated(epoch=KeyError), "missing keys \\['epoch'\\]"),
        (_mutated(extra=1), "unexpected keys \\['extra'\\]"),
        (_mutated(epoch="4"), "epoch must be an integer"),
        (_mutated(range_end=50), "below range_start"),
        (_mutated(phase="after"), "phase"),
        (_mutated(phase=None), "together"),
        (_mutated(updated_at="2025-01-31T12:00:00"), "updated_at"),
        (_mutated(updated_at="yesterdayZ"), "Invalid isoformat"),
    ],
)
def test_corrupt_values_raise_naming_the_path(data: bytes | None, reason: str) -> None:
    with pytest.raises(CorruptRecordError, match=f"^corrupt keeper record at {PATH}: .*{reason}"):
        KeeperRecord.decode(data, PATH)
