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


def test_the_warm_up_keeps_following_runs_alive_only_when_two_sinks_warm_up() -> None:
    from argparse import Namespace

    from benchmarks.latency_phase import _keep_alive_period

    def period(follow: float, hudi_follow: float, hudi: bool = True) -> float:
        return _keep_alive_period(Namespace(follow=follow, hudi_follow=hudi_follow, hudi=hudi))

    assert period(10, 10) == period(10, 0) == period(0, 10) == 10 / 3  # within the idle time
    assert period(30, 0.9) == 0.5  # never busier than twice a second
    assert period(0, 0) == 0.0  # runs end caught up: nothing to keep alive
    assert period(10, 10, hudi=False) == 0.0  # one sink: caught up once, then measured
