"""The scale benchmark runs end to end at 64 partitions and writes every figure it promises.

No timing is asserted (CI machines are noisy). What is checked: each layout's catch-up run left
every Kafka offset in its table exactly once, every sensor was timed, and the request counts
show the batching: one keeper session for all ticks (none opened per tick) and a number of
Kafka requests per tick that does not depend on the partition count; and, where Chromium is
installed, that the UI was timed on the wide layout's asset page and partitions view.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline_tests.support import browser
from eos_pipeline_tests.support.benchmark_child import run_smoke

pytestmark = pytest.mark.integration


def test_scale_smoke_run_at_64_partitions_writes_every_figure(
    kafka_settings: KafkaSettings, zookeeper_hosts: str, tmp_path: Path
) -> None:
    out = tmp_path / "scale.json"
    stdout = run_smoke("benchmarks.scale", kafka_settings, zookeeper_hosts, out, timeout=120)
    doc = json.loads(out.read_text())
    assert doc["checks"] == {"64 wide": True, "64 many": True}
    rows = {r["layout"]: r for r in doc["sizes"]}
    assert set(rows) == {"wide", "many"} and rows["many"]["topics"] == 4
    for row in rows.values():
        for sensor in ("partitions", "clickhouse_lag", "topics"):
            assert row[f"{sensor}_tick_ms"]["p50"] > 0
            assert row[f"{sensor}_requests_per_tick"]["keeper_sessions"] == 0
        lag = row["clickhouse_lag_requests_per_tick"]
        # one description + one ListOffsets for every topic, whatever the partition count
        assert lag["kafka"] == 2, lag
        # one listing per topic plus one get per partition, pipelined
        assert lag["keeper"] == row["topics"] + 64, lag
        run = row["catch_up"]
        assert run["seconds"] > 0 and run["event_log_records"] > 0 and run["rss_peak_mb"] > 0
        assert run["event_log_bytes"] > 0
    if browser.missing_reason() is None:
        ui = rows["wide"]["ui"]
        assert ui["asset_page"]["p50_s"] > 0 and ui["partitions_view"]["p50_s"] > 0
        assert "ui" not in rows["many"]  # the smoke times one layout's UI only
    assert "| partitions | layout |" in stdout
