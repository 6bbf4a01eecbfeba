"""Offset syncs, translation and exact resume on the real two-cluster MirrorMaker 2 stack.

Records are followed across clusters by their event id (offsets differ: MM2's exactly-once
transactions leave commit markers in the replica). Translations are checked against the truth
computed from those ids, and the records re-read after each one are measured and printed.
"""

from __future__ import annotations

import time

import pytest

from eos_dev.stack.mirror import MirrorStack
from eos_pipeline.adapters.failover import MirrorReadError, read_offset_syncs
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic
from eos_pipeline.core.failover import (
    FingerprintNotFound,
    Flow,
    MirroredRecord,
    SyncHistory,
    physical_topics,
    record_fingerprint,
    route,
)
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.mirror_fixtures import event_id, produce_events, wait_for_records
from eos_pipeline_tests.support.mirror_reads import find_resume_point

pytestmark = pytest.mark.integration

AB = ("A", "B")
PARTITIONS = 2
RECORDS = 1000


def _synced_to(
    settings: KafkaSettings, flow: Flow, topic: str, last: dict[int, int], timeout: float = 30.0
) -> SyncHistory:
    """The flow's syncs, once MM2 has synced the last record of each partition.

    MM2 syncs the last record of each of its transactions when it commits, so with no more
    traffic the history ends exactly on the last record copied.
    """
    history = read_offset_syncs(settings, flow)
    deadline = time.monotonic() + timeout
    while True:
        tops = {
            p: max((s.upstream for s in history.syncs(TopicPartition(topic, p))), default=-1)
            for p in last
        }
        if all(tops[p] >= last[p] for p in last) or time.monotonic() > deadline:
            return history
        time.sleep(0.3)
        read_offset_syncs(settings, flow, history)


def _pairs(
    upstream: list[MirroredRecord], downstream: list[MirroredRecord]
) -> list[tuple[int, int]]:
    """(upstream offset, downstream offset) of each record, matched by event id."""
    where = {event_id(r): r.offset for r in downstream}
    return [(r.offset, where[event_id(r)]) for r in upstream]


@pytest.fixture(scope="module")
def replicated(
    mirror_stack: MirrorStack, cluster_settings: dict[str, KafkaSettings]
) -> dict[str, object]:
    """1,000 events on A's ``T`` and 300 on B's ``T``, copied both ways, with their syncs."""
    topic = "t-failover-translation"
    a, b = cluster_settings["A"], cluster_settings["B"]
    for settings in (a, b):
        create_topic(settings, topic, partitions=PARTITIONS)
    on_a = produce_events(a, topic, PARTITIONS, RECORDS, prefix="a")
    on_b = produce_events(b, topic, PARTITIONS, 300, prefix="b")
    data: dict[str, object] = {"topic": topic}
    for p in range(PARTITIONS):
        data[f"A:T:{p}"] = wait_for_records(a, TopicPartition(topic, p), len(on_a[p]))
        data[f"B:A.T:{p}"] = wait_for_records(b, TopicPartition(f"A.{topic}", p), len(on_a[p]))
        data[f"B:T:{p}"] = wait_for_records(b, TopicPartition(topic, p), len(on_b[p]))
        data[f"A:B.T:{p}"] = wait_for_records(a, TopicPartition(f"B.{topic}", p), len(on_b[p]))
    data["A->B"] = _synced_to(a, Flow("A", "B"), topic, {p: on_a[p][-1][0] for p in on_a})
    data["B->A"] = _synced_to(b, Flow("B", "A"), topic, {p: on_b[p][-1][0] for p in on_b})
    return data


def test_replicas_keep_every_field_the_fingerprint_covers(replicated: dict) -> None:
    for p in range(PARTITIONS):
        for here, there in ((f"A:T:{p}", f"B:A.T:{p}"), (f"B:T:{p}", f"A:B.T:{p}")):
            originals, copies = replicated[here], replicated[there]
            assert [r.fingerprint for r in originals] == [r.fingerprint for r in copies]
            assert copies[0].headers == (("event-id", copies[0].headers[0][1]), ("no-value", None))


def test_offset_syncs_are_read_incrementally(
    replicated: dict, cluster_settings: dict[str, KafkaSettings]
) -> None:
    topic = replicated["topic"]
    history: SyncHistory = replicated["A->B"]
    assert {tp.partition for tp in history.partitions() if tp.topic == topic} == {0, 1}
    for p in range(PARTITIONS):
        # Each sync pairs the two offsets of one and the same record.
        pairs = dict(_pairs(replicated[f"A:T:{p}"], replicated[f"B:A.T:{p}"]))
        for sync in history.syncs(TopicPartition(topic, p)):
            assert pairs[sync.upstream] == sync.downstream
    before = len(history)
    # MM2 keeps writing syncs (its timer flushes the last ones), so a fresh read and the
    # incremental one are compared at the same end of the syncs topic: read until they meet.
    for _ in range(10):
        fresh = read_offset_syncs(cluster_settings["A"], Flow("A", "B"))
        again = read_offset_syncs(cluster_settings["A"], Flow("A", "B"), history)
        assert again is history and len(history) >= before
        if fresh.source_position == history.source_position:
            break
    assert fresh.source_position == history.source_position
    # Compaction may have dropped old syncs from a fresh read, never the newest of a partition.
    assert set(fresh) <= set(history)
    assert {tp: fresh.syncs(tp)[-1] for tp in fresh.partitions()} == {
        tp: history.syncs(tp)[-1] for tp in history.partitions()
    }
    with pytest.raises(MirrorReadError, match=r"mm2-offset-syncs\.A\.internal.*not found"):
        read_offset_syncs(cluster_settings["A"], Flow("A", "B"), location="target")


def _check_translation(
    name: str, pairs: list[tuple[int, int]], translate, lag_max: int, end: int
) -> list[int]:
    """Translate every position 0..end of the origin side; return the records re-read."""
    rereads = []
    for position in range(end + 1):
        # The truth: the first copy of a record at or after the position.
        truth = next((there for here, there in pairs if here >= position), None)
        got = translate(position).position
        if truth is not None:
            assert got <= truth, f"{name}: position {position} translated to {got} > {truth}"
        reread = sum(1 for here, there in pairs if here < position and there >= got)
        assert reread <= lag_max + 1, f"{name}: position {position} re-reads {reread}"
        rereads.append(reread)
    return rereads


def test_forward_and_inverse_translation_never_overshoot(
    replicated: dict, mirror_stack: MirrorStack
) -> None:
    topic = replicated["topic"]
    lag_max = mirror_stack.config.offset_lag_max
    history: SyncHistory = replicated["A->B"]
    report = []
    for p in range(PARTITIONS):
        tp = TopicPartition(topic, p)
        pairs = _pairs(replicated[f"A:T:{p}"], replicated[f"B:A.T:{p}"])
        up_end, down_end = pairs[-1][0] + 1, pairs[-1][1] + 1
        forward = _check_translation(
            f"A->B {tp}", pairs, lambda u, tp=tp: history.forward(tp, u), lag_max, up_end
        )
        inverse = _check_translation(
            f"B->A {tp}",
            [(d, u) for u, d in pairs],
            lambda d, tp=tp: history.inverse(tp, d),
            lag_max,
            down_end,
        )
        syncs = len(history.syncs(tp))
        report.append(
            f"{tp}: {len(pairs)} records, {syncs} syncs, re-read after forward avg "
            f"{sum(forward) / len(forward):.1f} max {max(forward)}, after inverse avg "
            f"{sum(inverse) / len(inverse):.1f} max {max(inverse)}"
        )
    print("\n[measure] " + "\n[measure] ".join(report))


def test_fingerprint_resume_finds_the_next_record_after_failover_and_failback(
    replicated: dict, cluster_settings: dict[str, KafkaSettings]
) -> None:
    topic = replicated["topic"]
    local_a, remote_b_on_a = physical_topics(topic, AB, "A")
    failover = route(local_a, "B", AB)  # A's T -> B's A.T, forward
    failback = route(failover.target, "A", AB)  # B's A.T -> A's T, inverse
    written_on_b = route(remote_b_on_a, "B", AB)  # A's B.T -> B's T, inverse of B->A
    skipped = []
    for p in range(PARTITIONS):
        originals, copies = replicated[f"A:T:{p}"], replicated[f"B:A.T:{p}"]
        for i in (0, 1, 17, 250, len(originals) // 2, len(originals) - 1):
            last = originals[i]
            point = find_resume_point(
                cluster_settings["B"],
                failover,
                replicated["A->B"],
                p,
                last.offset,
                last.fingerprint,
            )
            assert point.position == copies[i].offset + 1 and point.bounded
            back = find_resume_point(
                cluster_settings["A"],
                failback,
                replicated["A->B"],
                p,
                copies[i].offset,
                copies[i].fingerprint,
            )
            assert back.position == last.offset + 1
            skipped += [point.skipped, back.skipped]
        b_local, b_copies = replicated[f"B:T:{p}"], replicated[f"A:B.T:{p}"]
        last = b_copies[len(b_copies) // 3]
        point = find_resume_point(
            cluster_settings["B"],
            written_on_b,
            replicated["B->A"],
            p,
            last.offset,
            last.fingerprint,
        )
        assert point.position == b_local[len(b_copies) // 3].offset + 1
    print(
        f"\n[measure] records skipped by fingerprint resume: max {max(skipped)}, "
        f"avg {sum(skipped) / len(skipped):.1f} over {len(skipped)} resumes"
    )


def test_a_fingerprint_not_in_the_window_stops_with_the_partition_named(
    replicated: dict, cluster_settings: dict[str, KafkaSettings]
) -> None:
    topic = replicated["topic"]
    failover = route(physical_topics(topic, AB, "A")[0], "B", AB)
    last = replicated["A:T:1"][300]
    stranger = record_fingerprint(b"nobody", b"never produced", last.timestamp_ms)
    with pytest.raises(FingerprintNotFound, match=rf"^A\.{topic}\[1\]: the last written record"):
        find_resume_point(
            cluster_settings["B"], failover, replicated["A->B"], 1, last.offset, stranger
        )
