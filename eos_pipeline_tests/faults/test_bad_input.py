"""Every kind of bad input goes to the dead-letter topic, with headers, and the partition moves on.

Policies (also in eos_pipeline_tests/faults/README.md):

* not JSON, invalid UTF-8, not an object -> ``DecodeError``;
* a value of the wrong JSON type -> ``TypeMismatch``; a required field missing or null ->
  ``MissingField``;
* a null value (tombstone) -> ``Tombstone``: there is no row to insert, and dropping it silently
  would hide a delete upstream;
* a batch strictly inside a range left ``BEFORE`` by a crash -> ``UnrecoverableReplay``: it
  cannot be re-sent with the token of its first attempt, so it is handed to a human; the range
  itself is recovered by the next run, so those records are in the table too;
* key + value above the pipeline's ``max_record_bytes`` (off by default) -> ``Oversized``, checked
  before decoding, so the limit holds whichever decoder runs;
* a dead letter whose value is too big for the dead-letter topic is sent without its value
  (header ``eos.value.omitted.bytes``); the source coordinates still point at the original.
"""

from __future__ import annotations

import json

import pytest

from eos_pipeline.adapters.dlq import DLQ_MAX_VALUE_BYTES
from eos_pipeline.adapters.kafka import idempotent_producer
from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline_tests.faults.harness import FaultRig
from eos_pipeline_tests.support.sink_runs import run_range

pytestmark = pytest.mark.integration


def good(i: int) -> tuple[None, bytes, None]:
    return (None, json.dumps({"id": i, "name": f"n{i}"}).encode(), None)


BAD = [
    (b"k-undecodable", b"{not json", "DecodeError"),
    (b"k-utf8", b'{"id": 1, "name": "\xff\xfe"}', "DecodeError"),
    (b"k-array", b"[1, 2, 3]", "DecodeError"),
    (b"k-wrong-type", b'{"id": "seven", "name": "x"}', "TypeMismatch"),
    (b"k-float-id", b'{"id": 1.5, "name": "x"}', "TypeMismatch"),
    (b"k-missing", b'{"name": "no id"}', "MissingField"),
    (b"k-null", b'{"id": null, "name": "x"}', "MissingField"),
    (b"k-tombstone", None, "Tombstone"),
]


def test_each_bad_kind_is_dead_lettered_with_headers_and_the_partition_continues(
    inproc_rig: FaultRig,
) -> None:
    rig = inproc_rig
    items = []
    for n, bad in enumerate(BAD):
        items += [good(2 * n), bad]
    items.append(good(99))
    offsets = rig.produce_raw(0, items)
    with rig.keeper() as store:
        report = rig.sync(store, max_records=3).run(TopicPartition(rig.topic, 0))
    assert report.end == len(items) and report.dead_letters == len(BAD)

    letters = rig.dead_letter_records()
    assert set(letters) == {(0, offsets[2 * n + 1]) for n in range(len(BAD))}
    for n, (key, value, cls) in enumerate(BAD):
        letter = letters[(0, offsets[2 * n + 1])]
        h = letter.headers
        assert (h["eos.source.topic"], h["eos.source.partition"]) == (rig.topic, "0")
        assert h["eos.source.offset"] == str(offsets[2 * n + 1])
        assert h["eos.error.class"] == cls and h["eos.error.message"], h
        assert h["eos.pipeline"] == rig.pipeline
        assert (letter.key, letter.value) == (key, value), "a dead letter keeps key and value"
    rig.partitions = 1
    assert rig.assert_exactly_once() == len(BAD) + 1

    # Running again reads nothing and sends no dead letter twice.
    with rig.keeper() as store:
        again = rig.sync(store, max_records=3).run(TopicPartition(rig.topic, 0))
    assert again.batches == [] and len(rig.dead_letter_records()) == len(BAD)


def test_contained_batch_while_before_goes_to_dlq_and_the_range_is_recovered(
    inproc_rig: FaultRig,
) -> None:
    """A crash left BEFORE [0, 20); someone replays [5, 10) before the recovery run."""
    rig = inproc_rig
    rig.produce_raw(0, [good(i) for i in range(20)])
    tp = TopicPartition(rig.topic, 0)
    with rig.keeper() as store:
        lease = store.acquire(KeeperKey.of(rig.pipeline, "clickhouse", tp), writer="crashed")
        store.write(lease, 0, 20, Phase.BEFORE.value)  # what a kill at after_keeper_before leaves
        replay = run_range(rig.sync(store), tp, OffsetRange(5, 10))
        assert replay.case == "CONTAINED" and replay.dead_letters == 5 and replay.rows_sent == 0
        letters = rig.dead_letter_records()
        assert sorted(letters) == [(0, o) for o in range(5, 10)]
        assert {x.headers["eos.error.class"] for x in letters.values()} == {"UnrecoverableReplay"}
        recovery = rig.sync(store).run(tp)
    assert recovery.cases == ["SAME"] and recovery.end == 20
    # The replayed records were handed to a human AND are in the table once: nothing lost,
    # nothing doubled; the dead letters here are a replay request, not bad data.
    assert rig.table_offsets()[0] == {o: 1 for o in range(20)}


def test_dead_letter_too_big_for_the_dlq_topic_is_sent_without_its_value(
    inproc_rig: FaultRig,
) -> None:
    """A 1.5 MB undecodable value, legal in its source topic, must not wedge the partition."""
    rig = FaultRig(
        inproc_rig.kafka,
        inproc_rig.zookeeper,
        inproc_rig.workdir,
        partitions=1,
        sink=inproc_rig.sink,
        topic_config={"max.message.bytes": str(4 << 20)},
    )
    huge = b"{" + b"x" * (1_500_000) + b"}"
    producer = idempotent_producer(rig.kafka, **{"message.max.bytes": 4 << 20})
    offsets = rig.produce_raw(0, [good(0), (b"big", huge, "DecodeError"), good(2)], producer)
    with rig.keeper() as store:
        report = rig.sync(store).run(TopicPartition(rig.topic, 0))
    assert report.end == 3 and report.dead_letters == 1
    letter = rig.dead_letter_records()[(0, offsets[1])]
    assert letter.value is None and letter.key == b"big"
    assert int(letter.headers["eos.value.omitted.bytes"]) == len(huge) > DLQ_MAX_VALUE_BYTES
    assert rig.assert_exactly_once() == 2


@pytest.mark.parametrize("with_bad_neighbour", [False, True], ids=["bulk-decoder", "per-record"])
def test_records_above_max_record_bytes_are_dead_lettered_as_oversized(
    inproc_rig: FaultRig, with_bad_neighbour: bool
) -> None:
    """The limit counts key + value; exactly at the limit is stored, one byte more is not.

    With a bad record in the same step the per-record decoder runs instead of Arrow's: both
    paths must leave out the same oversized records.
    """
    rig = inproc_rig
    limit = 200

    def sized(key: bytes, total: int) -> tuple[bytes, bytes, None]:
        head = json.dumps({"id": total, "name": ""}).encode()
        pad = total - len(key) - len(head)
        return (key, json.dumps({"id": total, "name": "x" * pad}).encode(), None)

    at_limit, over = sized(b"k1", limit), sized(b"k2", limit + 1)
    assert len(at_limit[0]) + len(at_limit[1]) == limit
    items = [good(0), at_limit, (over[0], over[1], "Oversized"), good(3)]
    if with_bad_neighbour:
        items.append((b"k-bad", b"{not json", "DecodeError"))
    items.append((b"k-huge", b'{"id": 9, "name": "' + b"y" * 5000 + b'"}', "Oversized"))
    offsets = rig.produce_raw(0, items)
    with rig.keeper() as store:
        report = rig.sync(store, max_records=100, max_record_bytes=limit).run(
            TopicPartition(rig.topic, 0)
        )
    assert report.end == len(items)
    letters = rig.dead_letter_records()
    oversized = {
        o for (_, o), dl in letters.items() if dl.headers["eos.error.class"] == "Oversized"
    }
    assert oversized == {offsets[2], offsets[-1]}
    message = letters[(0, offsets[2])].headers["eos.error.message"]
    assert f"{limit + 1} bytes" in message and f"max_record_bytes of {limit}" in message
    assert letters[(0, offsets[2])].value == over[1], "a dead letter keeps its value"
    rig.partitions = 1
    assert rig.assert_exactly_once() == 3  # good(0), the record at the limit, good(3)
