"""One verdict per record, end to end (SPEC §9): both sinks on one topic of every bad kind.

The ClickHouse sink (chDB, keeper) and the Hudi sink (Spark) each catch up with the same topic.
Both tables must hold exactly the same source offsets, and both dead-letter topics exactly the
others, with the same error class and message for each record. Among the bad records is the
one an independent chaos run found in the lake although ClickHouse had refused it: a JSON number
in a ``String`` field.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from eos_pipeline.core.contract import ErrorClass
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.faults.harness import FaultRig
from eos_pipeline_tests.faults.test_hudi_faults import hudi_sync, table_offsets

pytestmark = [pytest.mark.integration, pytest.mark.spark]

LIMIT = 300

#: (key, value, class): every error class of the contract, several ways each.
BAD: list[tuple[bytes | None, bytes | None, str]] = [
    (b"k", b"{not json", ErrorClass.DECODE_ERROR),
    (b"k", b'{"id": 1, "name": "\xff"}', ErrorClass.DECODE_ERROR),  # invalid UTF-8
    (b"k", b"[1, 2]", ErrorClass.DECODE_ERROR),
    (b"k", b'{"id": 1, "name": "a"} trailing', ErrorClass.DECODE_ERROR),
    (b"k", b'{"id": 1, "name": "a"} {"id": 2}', ErrorClass.DECODE_ERROR),
    (b"k", b'\xef\xbb\xbf{"id": 1, "name": "bom"}', ErrorClass.DECODE_ERROR),
    (b"k", b'{"id": 1, "name": "\\ud800"}', ErrorClass.DECODE_ERROR),  # an unpaired surrogate
    (b"k", b"", ErrorClass.DECODE_ERROR),
    (b"k", b'{"id": 1, "name": 42}', ErrorClass.TYPE_MISMATCH),  # the chaos run's record
    (b"k", b'{"id": 1, "name": true}', ErrorClass.TYPE_MISMATCH),
    (b"k", b'{"id": 1, "name": {"nested": 1}}', ErrorClass.TYPE_MISMATCH),
    (b"k", b'{"id": 1, "name": ["a"]}', ErrorClass.TYPE_MISMATCH),
    (b"k", b'{"id": "7", "name": "a"}', ErrorClass.TYPE_MISMATCH),
    (b"k", b'{"id": 1.0, "name": "a"}', ErrorClass.TYPE_MISMATCH),
    (b"k", b'{"id": 9223372036854775808, "name": "a"}', ErrorClass.TYPE_MISMATCH),
    (b"k", b'{"name": "no id"}', ErrorClass.MISSING_FIELD),
    (b"k", b'{"id": null, "name": "a"}', ErrorClass.MISSING_FIELD),
    (b"k", None, ErrorClass.TOMBSTONE),
    (b"k", json.dumps({"id": 1, "name": "x" * LIMIT}).encode(), ErrorClass.OVERSIZED),
]


def good(i: int) -> tuple[None, bytes, None]:
    return (None, json.dumps({"id": i, "name": f"n{i}", "extra": {"ignored": [i]}}).encode(), None)


def test_both_sinks_store_the_same_records_and_dead_letter_the_same_others(
    inproc_rig: FaultRig, spark: SparkSession
) -> None:
    rig = inproc_rig
    items: list[tuple[bytes | None, bytes | None, str | None]] = []
    for n, (key, value, cls) in enumerate(BAD):
        items += [good(n), (key, value, str(cls))]
    items.append(good(len(BAD)))
    offsets = rig.produce_raw(0, items)  # every other partition stays empty

    with rig.keeper() as store:
        sync = rig.sync(store, max_records=5, max_record_bytes=LIMIT)
        for p in range(rig.partitions):
            sync.run(TopicPartition(rig.topic, p))
    report = hudi_sync(rig, spark, max_record_bytes=LIMIT).run()
    assert report.total_records_read == len(items)

    clickhouse_rows = rig.assert_exactly_once()
    hudi_rows = rig.assert_exactly_once(table_offsets(rig, spark), dlq_topic=rig.hudi_dlq_topic)
    assert clickhouse_rows == hudi_rows == len(BAD) + 1
    assert rig.table_offsets() == table_offsets(rig, spark) | {
        p: {} for p in range(1, rig.partitions)
    }

    from_clickhouse = rig.dead_letters()
    from_hudi = rig.dead_letters(rig.hudi_dlq_topic)
    assert (
        set(from_clickhouse) == set(from_hudi) == {(0, offsets[2 * n + 1]) for n in range(len(BAD))}
    )
    for where, headers in from_clickhouse.items():
        other = from_hudi[where]
        assert headers["eos.error.class"] == other["eos.error.class"], where
        assert headers["eos.error.message"] == other["eos.error.message"], where
