"""The benchmark harness runs end to end on a few records and writes what it promises.

No timing is asserted (CI machines are noisy); what is checked is that every measurement ran,
that each exactly-once run left every Kafka offset in its table exactly once, and that the JSON
and the SVG were written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline_tests.support.benchmark_child import run_smoke

pytestmark = pytest.mark.integration


def test_smoke_run_measures_everything_and_writes_json_and_svg(
    kafka_settings: KafkaSettings, zookeeper_hosts: str, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    stdout = run_smoke("benchmarks", kafka_settings, zookeeper_hosts, out, timeout=600)
    doc = json.loads((out / "latest.json").read_text())
    figures = {f["name"]: f for f in doc["figures"]}
    for name in (
        "raw Kafka read, 2 partitions",
        "project range reader only",
        "raw chDB insert (pre-built Arrow)",
        "naive at-least-once",
        "exactly-once ClickHouse, batch 100",
        "exactly-once, per-record decoder (before)",
        "exactly-once, new Kafka clients per call (before)",
        "exactly-once via dg.materialize",
        "exactly-once, batch 50",
        "exactly-once, 1 partitions",
    ):
        assert name in figures, f"missing {name!r} in {sorted(figures)}"
        assert figures[name]["records"] == 400 and figures[name]["seconds"] > 0
    assert figures["exactly-once ClickHouse, batch 100"]["ratio"] is not None
    # Every exactly-once run was checked on the data, and every check passed.
    assert {
        "naive at-least-once",
        "exactly-once ClickHouse, batch 100",
        "exactly-once, per-record decoder (before)",
        "exactly-once via Dagster",
        "memory probe batch 100",
    } <= set(doc["checks"])
    assert all(doc["checks"].values()), doc["checks"]
    overheads = doc["overheads"]
    assert overheads["batches"] == 4 and overheads["keeper_write_ms_p50"] > 0
    assert overheads["empty_run_ms_p50"] > 0 and "dagster_empty_materialization_ms" in overheads
    assert doc["memory"]["100"]["rss_peak_mb"] > 0
    assert {"eos_vs_raw_kafka_read", "eos_vs_naive", "speedup_vs_per_record_decoder"} <= set(
        doc["ratios"]
    )
    # Latency through real Dagster is opt-in (--latency): said so, not silently missing.
    assert (
        doc["latency_via_sensor"] == {} and "end_to_end_latency_via_sensor" in doc["not_measured"]
    )
    assert (out / "latest.svg").read_text().startswith("<svg")
    assert len(list(out.glob("bench-*.json"))) == 1
    assert "| measurement |" in stdout and "exactly-once checks: all passed" in stdout
