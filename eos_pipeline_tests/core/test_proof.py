"""The exactly-once comparison, branch by branch, without a stack."""

from __future__ import annotations

import dagster as dg

from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.proof import (
    EXAMPLES,
    ProvenPrefix,
    TableAggregate,
    compare,
    detail_range,
    extend,
    prefix_unchanged,
)

TP = TopicPartition("t", 3)


def test_each_good_offset_once_and_the_dead_letters_absent_pass() -> None:
    proof = compare(
        TP,
        OffsetRange(10, 20),
        range(10, 20),
        {12, 15},
        {o: 1 for o in range(10, 20) if o not in (12, 15)},
    )
    assert proof.passed
    assert (proof.kafka_records, proof.dead_letters, proof.expected) == (10, 2, 8)
    assert (proof.table_rows, proof.distinct_offsets) == (8, 8)
    assert "8 offsets expected (10 in Kafka - 2 dead letters), each once" in proof.summary()


def test_duplicates_gaps_and_unexpected_offsets_are_counted_with_examples() -> None:
    rows = {10: 2, 11: 1, 13: 1, 14: 1}  # 10 twice, 12 missing, 14 was dead-lettered
    proof = compare(TP, OffsetRange(10, 15), range(10, 15), {14}, rows)
    assert not proof.passed
    assert proof.duplicates == {10: 2}
    assert proof.gaps == [12]
    assert proof.unexpected == [14]
    assert proof.summary().endswith("1 duplicated offsets, 1 missing offsets, 1 unexpected offsets")
    meta = proof.metadata()
    assert (meta["duplicates"], meta["gaps"], meta["unexpected"]) == (1, 1, 1)


def test_only_the_committed_range_is_compared() -> None:
    # rows beyond the range belong to a step in flight; Kafka offsets outside it are not expected
    proof = compare(TP, OffsetRange(5, 8), range(0, 12), {1, 9}, {5: 1, 6: 1, 7: 1, 8: 3, 2: 1})
    assert proof.passed and proof.kafka_records == 3 and proof.dead_letters == 0


def test_offsets_missing_from_kafka_are_not_expected() -> None:
    # transaction markers and aborted records leave holes in the offsets Kafka returns
    proof = compare(TP, OffsetRange(0, 6), [0, 1, 3, 4], set(), {0: 1, 1: 1, 3: 1, 4: 1})
    assert proof.passed
    assert compare(TP, OffsetRange(0, 6), [0, 1, 3, 4], set(), {0: 1, 2: 1}).unexpected == [2]


def test_examples_are_capped() -> None:
    proof = compare(TP, OffsetRange(0, 100), range(100), set(), {})
    assert len(proof.gaps) == 100
    assert len(eval(proof.metadata()["gap_examples"])) == EXAMPLES


# ----------------------------------------------------------------------------- incremental
def _table(offsets: range, dead: set[int]) -> dict[int, int]:
    return {o: 1 for o in offsets if o not in dead}


def test_a_passing_proof_leaves_a_prefix_the_next_check_extends_to_the_same_verdict() -> None:
    first = compare(TP, OffsetRange(0, 100), range(100), {7}, _table(range(100), {7}))
    prefix = ProvenPrefix.from_metadata(first.metadata())
    assert prefix == ProvenPrefix(0, 100, 100, 1, sum(range(100)) - 7)
    # Dagster stores the values as metadata values: they read back the same.
    stored = {k: dg.MetadataValue.int(v) for k, v in prefix.to_metadata().items()}
    assert ProvenPrefix.from_metadata(stored) == prefix

    committed = OffsetRange(0, 150)
    assert detail_range(prefix, committed) == OffsetRange(100, 150)
    table = _table(range(150), {7, 120})
    aggregate = TableAggregate(99, 99, sum(o for o in table if o < 100))
    assert prefix_unchanged(prefix, aggregate)
    newer = compare(TP, OffsetRange(100, 150), range(100, 150), {7, 120}, table)
    both = extend(prefix, newer)
    full = compare(TP, committed, range(150), {7, 120}, table)
    assert both.passed and full.passed
    for name in ("committed", "kafka_records", "dead_letters", "table_rows", "distinct_offsets"):
        assert getattr(both, name) == getattr(full, name), name
    assert both.offset_sum == full.offset_sum
    assert both.metadata()["compared_offset_by_offset"] == "[100, 150)"
    assert full.metadata()["compared_offset_by_offset"] == "[0, 150)"


def test_a_change_in_the_proven_prefix_shows_in_its_aggregate() -> None:
    prefix = ProvenPrefix(0, 10, 10, 0, sum(range(10)))
    assert prefix_unchanged(prefix, TableAggregate(10, 10, 45))
    assert not prefix_unchanged(prefix, TableAggregate(11, 10, 45 + 3))  # 3 written twice
    assert not prefix_unchanged(prefix, TableAggregate(9, 9, 45 - 4))  # 4 deleted
    assert not prefix_unchanged(prefix, TableAggregate(10, 10, 45 - 4 + 12))  # 4 swapped for 12


def test_the_prefix_is_reused_only_where_it_still_starts_the_committed_range() -> None:
    prefix = ProvenPrefix(10, 50, 40, 0, 0)
    assert detail_range(None, OffsetRange(10, 60)) == OffsetRange(10, 60)
    assert detail_range(prefix, OffsetRange(20, 60)) == OffsetRange(20, 60)  # retention moved
    assert detail_range(prefix, OffsetRange(10, 40)) == OffsetRange(10, 40)  # position went back
    assert detail_range(prefix, OffsetRange(10, 50)) == OffsetRange(50, 50)  # nothing new
    assert ProvenPrefix.from_metadata({"proven_start": 1}) is None
    failed = compare(TP, OffsetRange(0, 3), range(3), set(), {0: 1, 1: 2, 2: 1})
    assert "proven_through" not in failed.metadata()
