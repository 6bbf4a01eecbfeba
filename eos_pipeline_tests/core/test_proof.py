"""The exactly-once comparison, branch by branch, without a stack."""

from __future__ import annotations

from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.proof import EXAMPLES, compare

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
