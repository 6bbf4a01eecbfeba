"""Failover rules by example: naming, topic mapping, routes, sync bytes, epochs, identity."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eos_pipeline.core.failover import (
    DEFAULT_POLICY,
    FailoverError,
    Flow,
    MirroredRecord,
    OffsetSync,
    OffsetSyncDecodeError,
    PhysicalTopic,
    SyncHistory,
    Window,
    decode_offset_sync,
    physical_topics,
    record_fingerprint,
    route,
)
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.support.decisions import upstream_topic
from eos_pipeline_tests.support.offset_syncs import add_syncs, encode_offset_sync

AB = ("A", "B")


# --------------------------------------------------------------------------------------- naming


def test_default_policy_names_replicas_and_their_source() -> None:
    assert DEFAULT_POLICY.remote_topic("A", "orders") == "A.orders"
    assert DEFAULT_POLICY.source_alias("A.orders") == "A"
    assert upstream_topic(DEFAULT_POLICY, "A.orders") == "orders"
    assert DEFAULT_POLICY.source_alias("orders") is None
    # A local topic with a dot is not a replica of a cluster that does not exist.
    assert DEFAULT_POLICY.source_alias("orders.v1", AB) is None
    assert DEFAULT_POLICY.source_alias("B.orders.v1", AB) == "B"
    assert DEFAULT_POLICY.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"


def test_flow_names_its_syncs_topic_after_the_other_cluster() -> None:
    flow = Flow("A", "B")
    assert flow.offset_syncs_cluster() == "A"
    assert flow.offset_syncs_topic() == "mm2-offset-syncs.B.internal"
    assert flow.offset_syncs_cluster("target") == "B"
    assert flow.offset_syncs_topic("target") == "mm2-offset-syncs.A.internal"
    with pytest.raises(FailoverError, match="'source' or 'target'"):
        flow.offset_syncs_cluster("middle")
    with pytest.raises(FailoverError, match="two clusters"):
        Flow("A", "A")


def test_physical_topics_on_each_cluster() -> None:
    on_a = physical_topics("T", AB, "A")
    assert [(p.cluster, p.topic, p.origin) for p in on_a] == [("A", "T", "A"), ("A", "B.T", "B")]
    on_b = physical_topics("T", ["X", "B"], "B")
    assert [(p.topic, p.origin) for p in on_b] == [("T", "B"), ("X.T", "X")]
    assert all(p.pipeline_topic == "T" for p in on_a + on_b)


@pytest.mark.parametrize(
    ("topic", "clusters", "active", "message"),
    [
        ("T", AB, "C", "unknown cluster 'C'"),
        ("T", ("A",), "A", "two or more distinct clusters"),
        ("T", ("A", "A"), "A", "two or more distinct clusters"),
        ("T", ("A", "B.x"), "A", "free of '.'"),
        ("A.T", AB, "B", "starts with a cluster alias"),
        ("bad topic", AB, "A", "invalid Kafka topic name"),
    ],
)
def test_physical_topics_refuses_bad_topologies(
    topic: str, clusters: tuple[str, ...], active: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        physical_topics(topic, clusters, active)


def test_routes_forward_to_the_replica_and_inverse_to_the_origin() -> None:
    local_a, remote_b_on_a = physical_topics("T", AB, "A")
    there = route(local_a, "B", AB)
    assert there.direction == "forward" and there.flow == Flow("A", "B")
    assert there.target == PhysicalTopic("B", "A.T", "A", "T")
    back = route(there.target, "A", AB)
    assert back.direction == "inverse" and back.flow == Flow("A", "B")
    assert back.target == local_a
    written_on_b = route(remote_b_on_a, "B", AB)
    assert written_on_b.direction == "inverse" and written_on_b.flow == Flow("B", "A")
    assert written_on_b.target == PhysicalTopic("B", "T", "B", "T")


def test_route_refusals() -> None:
    local_a, _ = physical_topics("T", AB, "A")
    with pytest.raises(FailoverError, match="already on cluster 'A'"):
        route(local_a, "A", AB)
    with pytest.raises(FailoverError, match="unknown cluster 'Z'"):
        route(local_a, "Z", AB)
    third = PhysicalTopic("A", "C.T", "C", "T")
    with pytest.raises(FailoverError, match="does not copy"):
        route(third, "B", ("A", "B", "C"))


def test_route_translates_only_with_its_own_flow() -> None:
    local_a, _ = physical_topics("T", AB, "A")
    history = SyncHistory(Flow("B", "A"))
    with pytest.raises(FailoverError, match="flow A->B, got a history of flow B->A"):
        route(local_a, "B", AB).translate(history, 0, 5)


def test_route_uses_the_pipeline_topic_as_the_sync_key() -> None:
    local_a, _ = physical_topics("T", AB, "A")
    history = SyncHistory(Flow("A", "B"))
    history.add(OffsetSync("T", 2, 100, 130))
    there = route(local_a, "B", AB)
    assert there.translate(history, 2, 100).position == 130
    assert route(there.target, "A", AB).translate(history, 2, 131).position == 101
    assert there.window(history, 2, 100) == Window(130, 131)


# --------------------------------------------------------------------------------------- sync bytes


def test_decodes_the_bytes_mm2_writes() -> None:
    key = struct.pack(">h", 6) + b"orders" + struct.pack(">i", 3)
    value = struct.pack(">qq", 1234, 1500)
    assert decode_offset_sync(key, value) == OffsetSync("orders", 3, 1234, 1500)


@given(
    st.text(alphabet="abcXYZ._-é", min_size=1, max_size=40),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
)
def test_encode_and_decode_round_trip(topic: str, partition: int, up: int, down: int) -> None:
    sync = OffsetSync(topic, partition, up, down)
    assert decode_offset_sync(*encode_offset_sync(sync)) == sync


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"\0" * 16, "without key or value"),
        (b"\0", b"\0" * 16, "key too short"),
        (struct.pack(">h", 9) + b"abc" + struct.pack(">i", 0), b"\0" * 16, "topic of 9 bytes"),
        (struct.pack(">h", 1) + b"\xff" + struct.pack(">i", 0), b"\0" * 16, "not UTF-8"),
        (struct.pack(">h", 1) + b"t" + struct.pack(">i", 0), b"\0" * 15, "expected 16"),
        (struct.pack(">h", 1) + b"t" + struct.pack(">i", 0), struct.pack(">qq", -1, 0), "negative"),
    ],
)
def test_malformed_sync_records_are_refused(key: bytes | None, value: bytes, message: str) -> None:
    with pytest.raises(OffsetSyncDecodeError, match=message):
        decode_offset_sync(key, value)


# --------------------------------------------------------------------------------------- history


def test_history_keeps_every_sync_and_translates_both_ways() -> None:
    history = SyncHistory(Flow("A", "B"))
    tp = TopicPartition("T", 0)
    add_syncs(
        history, [OffsetSync("T", 0, 0, 0), OffsetSync("T", 0, 10, 13), OffsetSync("T", 0, 20, 26)]
    )
    history.add(OffsetSync("T", 0, 20, 26))  # the same sync again changes nothing
    assert [s.upstream for s in history.syncs(tp)] == [0, 10, 20] and len(history) == 3
    assert history.forward(tp, 10).position == 13 and history.forward(tp, 10).exact
    assert history.forward(tp, 15).position == 14 and not history.forward(tp, 15).exact
    assert history.forward(tp, 15).basis == OffsetSync("T", 0, 10, 13)
    assert history.inverse(tp, 26).position == 20
    assert history.inverse(tp, 20).position == 11
    assert history.replica_window(tp, 15) == Window(14, 26)
    assert history.replica_window(tp, 25) == Window(27, None)
    assert history.origin_window(tp, 15) == Window(11, 20)
    unknown = TopicPartition("T", 1)
    assert history.forward(unknown, 50, floor=7).position == 7
    assert history.forward(unknown, 50).basis is None


def test_a_sync_going_back_starts_a_new_epoch() -> None:
    """A recreated upstream topic (or truncated replica): older pairs no longer correspond."""
    history = SyncHistory(Flow("A", "B"))
    tp = TopicPartition("T", 0)
    add_syncs(history, [OffsetSync("T", 0, 0, 0), OffsetSync("T", 0, 500, 620)])
    history.add(OffsetSync("T", 0, 3, 640))
    assert history.syncs(tp) == [OffsetSync("T", 0, 3, 640)] and history.resets == 1
    assert history.forward(tp, 600).position == 641
    history.add(OffsetSync("T", 0, 10, 5))  # the replica went back: again a new epoch
    assert history.syncs(tp) == [OffsetSync("T", 0, 10, 5)] and history.resets == 2


def test_history_survives_a_json_round_trip() -> None:
    import json

    history = SyncHistory(Flow("A", "B"))
    add_syncs(
        history, [OffsetSync("T", 0, 0, 0), OffsetSync("T", 0, 9, 12), OffsetSync("T", 3, 4, 4)]
    )
    history.source_position = 57
    again = SyncHistory.from_dict(json.loads(json.dumps(history.to_dict())))
    assert again.flow == history.flow and again.source_position == 57
    assert list(again) == list(history)
    with pytest.raises(FailoverError, match="not a stored sync history"):
        SyncHistory.from_dict({"flow": ["A", "B"]})


# --------------------------------------------------------------------------------------- identity


def test_fingerprint_covers_what_mm2_copies_and_nothing_else() -> None:
    base = record_fingerprint(b"k", b"v", 1000, [("h", b"1")])
    assert base == record_fingerprint(b"k", b"v", 1000, [(b"h", b"1")])
    assert MirroredRecord(7, b"k", b"v", 1000, (("h", b"1"),)).fingerprint == base
    assert MirroredRecord(99, b"k", b"v", 1000, (("h", b"1"),)).fingerprint == base  # offset
    others = {
        record_fingerprint(None, b"v", 1000, [("h", b"1")]),
        record_fingerprint(b"", b"v", 1000, [("h", b"1")]),
        record_fingerprint(b"k", None, 1000, [("h", b"1")]),
        record_fingerprint(b"k", b"v", 1001, [("h", b"1")]),
        record_fingerprint(b"k", b"v", 1000, []),
        record_fingerprint(b"k", b"v", 1000, [("h", None)]),
        record_fingerprint(b"k", b"v", 1000, [("h", b"")]),
        record_fingerprint(b"k", b"v", 1000, [("h", b"1"), ("h", b"1")]),
        record_fingerprint(b"kv", b"", 1000, [("h", b"1")]),
    }
    assert base not in others and len(others) == 9
    assert len(base) == 32 and int(base, 16) >= 0


def test_fingerprint_is_stable_across_releases() -> None:
    """Stored next to positions: a changed encoding would strand every stored fingerprint."""
    assert record_fingerprint(b"k", b"v", 1000, [("h", b"1")]) == "7517a9a4632063bac8e73c59c68dcc50"
    assert record_fingerprint(None, None, 0) == "cad3dc1c1d8739cb46b6896b2e62e780"


def test_header_order_matters() -> None:
    a = record_fingerprint(b"k", b"v", 1, [("x", b"1"), ("y", b"2")])
    b = record_fingerprint(b"k", b"v", 1, [("y", b"2"), ("x", b"1")])
    assert a != b
