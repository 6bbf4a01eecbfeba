"""The floor benchmark's arithmetic (the measurement itself needs a stack: ``python -m
benchmarks.floor``)."""

from __future__ import annotations

from benchmarks.floor import summarize


def _round(raw_wall: float, raw_cpu: float, wall: float, cpu: float, insert_cpu: float) -> dict:
    return {
        "raw": {"bytes": 160e6, "wall": raw_wall, "cpu": raw_cpu},
        "direct": {"wall": wall, "cpu": cpu, "insert_wall": 0.0, "insert_cpu": insert_cpu},
        "load_avg_1m": [1.0, 2.0],
    }


def test_the_floor_is_the_best_raw_read_plus_the_best_checked_insert() -> None:
    summary = summarize([_round(0.5, 0.25, 2.0, 1.0, 0.5), _round(0.4, 0.3, 1.6, 0.9, 0.55)])

    assert summary["floor_with_checks_mb_per_cpu_s"] == round(160 / (0.25 + 0.5), 1)
    assert summary["direct_vs_floor_by_cpu"] == round((0.25 + 0.5) / 0.9, 3)
    assert summary["direct_vs_raw_read_by_clock"] == round(0.4 / 1.6, 3)
    assert summary["raw_read_mb_per_s"] == 400.0
    assert summary["load_avg_1m"] == [1.0, 2.0, 1.0, 2.0]
