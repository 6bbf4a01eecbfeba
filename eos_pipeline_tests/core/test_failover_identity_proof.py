"""The identity proof across cluster stretches (pure)."""

from __future__ import annotations

from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.proof import HeldRecord, prove_by_identity

TP = TopicPartition("T", 0)
T_A, AT_B = TopicPartition("T", 0), TopicPartition("A.T", 0)


def _story() -> tuple[list[HeldRecord], dict[tuple[str, int], int]]:
    """Records 0-5 on A's T (copied to B's A.T at 10-15); 0-2 written on A, 3-5 on B."""
    held = [HeldRecord("A", T_A, o, f"{o:032x}") for o in range(6)]
    held += [HeldRecord("B", AT_B, 10 + o, f"{o:032x}") for o in range(6)]
    table = {("A:T", o): 1 for o in range(3)} | {("B:A.T", 10 + o): 1 for o in range(3, 6)}
    return held, table


def test_a_record_and_its_copy_are_one_identity_written_once() -> None:
    held, table = _story()
    result = prove_by_identity(TP, OffsetRange(0, 6), held, table)
    assert result.proof.passed, result.examples
    assert (result.proof.kafka_records, result.proof.table_rows) == (6, 6)


def test_a_deleted_row_is_a_gap_named_by_cluster() -> None:
    held, table = _story()
    del table[("B:A.T", 14)]
    result = prove_by_identity(TP, OffsetRange(0, 6), held, table)
    assert result.proof.gaps == [4] and not result.proof.duplicates
    assert result.examples == ("A:T[0]@4 missing",)


def test_a_record_written_from_both_clusters_is_a_duplicate() -> None:
    held, table = _story()
    table[("B:A.T", 12)] = 1  # the copy of A's record 2, already written from A
    result = prove_by_identity(TP, OffsetRange(0, 6), held, table)
    assert result.proof.duplicates == {2: 2}
    assert result.examples == ("A:T[0]@2 written 2 times",)


def test_rows_outside_what_kafka_holds_are_unexpected() -> None:
    held, table = _story()
    table[("B:T", 3)] = 1
    result = prove_by_identity(TP, OffsetRange(0, 6), held, table)
    assert result.proof.unexpected == [3] and not result.proof.passed
    assert "B:T[0]@3: no such committed record" in result.examples


def test_identical_records_on_one_cluster_count_twice_and_dead_letters_count_as_written() -> None:
    held = [HeldRecord("A", T_A, o, "a" * 32) for o in range(2)]
    held.append(HeldRecord("A", T_A, 2, "b" * 32, dead=True))
    held.append(HeldRecord("B", AT_B, 7, "b" * 32))
    ok = prove_by_identity(TP, OffsetRange(0, 3), held, {("A:T", 0): 1, ("A:T", 1): 1})
    assert ok.proof.passed and ok.proof.dead_letters == 1
    short = prove_by_identity(TP, OffsetRange(0, 3), held, {("A:T", 0): 1})
    assert short.proof.gaps == [0]
    twice = prove_by_identity(
        TP, OffsetRange(0, 3), held, {("A:T", 0): 1, ("A:T", 1): 1, ("B:A.T", 7): 1}
    )
    assert twice.proof.duplicates == {2: 2}
