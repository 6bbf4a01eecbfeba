"""The Hudi side of ``benchmarks.latency_phase --hudi``: pure parts (no table, no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime

from benchmarks.hudi_visible import exactly_once, instant_epoch


def test_instant_epoch_reads_hudi_instants_in_the_timeline_zone() -> None:
    expected = datetime(2026, 11, 25, 10, 32, 44, 655_000, tzinfo=UTC).timestamp()
    assert instant_epoch("20261125103244655", "UTC") == expected
    local = datetime(2026, 11, 25, 10, 32, 44, 655_000).timestamp()  # LOCAL: the machine's zone
    assert instant_epoch("20261125103244655") == local


def test_exactly_once_counts_missing_unexpected_and_duplicate_offsets() -> None:
    ends = {0: 3, 1: 2}
    rows = [(0, 0, "c1"), (0, 2, "c1"), (1, 0, "c1"), (1, 1, "c2"), (1, 1, "c3"), (1, 5, "c3")]
    proof = exactly_once(rows, ends, {0: {1}})  # offset 1 of partition 0 is a dead letter
    assert proof == {"rows": 6, "expected": 4, "missing": 0, "unexpected": 1, "duplicates": 1}
    assert exactly_once(rows[:4], ends, {0: {1}})["missing"] == 0
    assert exactly_once(rows[:3], ends, {0: {1}})["missing"] == 1
