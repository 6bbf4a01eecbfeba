"""The main job's path end to end: `dagster dev` with its daemon, sensors driving every run.

Few records and 2 partitions keep it short; the proof is on the data that the demo prints:
per partition, Kafka's end offset equals the distinct offsets in each table plus the dead
letters, and rows equal distinct offsets (no duplicate). The instance then shows that every
run succeeded and every exactly-once check passed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType

from eos_pipeline.demo import run_demo
from eos_pipeline.stack.services import StackConfig

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_demo_sensors_drive_both_tables_to_the_kafka_end(
    local_stack: StackConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(
        work_dir=tmp_path / "work",
        dagster_home=tmp_path / "home",
        records=60,
        partitions=2,
        keep_ui=False,
        port=None,
        pipelines_file=None,
        sensor_interval=1,
        timeout=600.0,
        down=False,
        verbose=False,
    )
    assert run_demo(local_stack, args) == 0
    out = capsys.readouterr().out
    assert "Dagster UI: http://127.0.0.1:" in out
    header = next(
        i for i, line in enumerate(out.splitlines()) if line.split()[:2] == ["partition", "kafka"]
    )
    rows = [line.split() for line in out.splitlines()[header + 1 : header + 3]]
    assert [int(r[0]) for r in rows] == [0, 1]
    for _, end, ch_rows, ch_distinct, hudi_rows, hudi_distinct, dlq in (map(int, r) for r in rows):
        assert end > 0
        assert ch_rows == ch_distinct == end - dlq
        assert hudi_rows == hudi_distinct == end - dlq

    instance = dg.DagsterInstance.from_config(str(tmp_path / "home"))
    try:
        runs = instance.get_runs()
        assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        # ClickHouse on chDB and Hudi: each caught up by runs covering both partitions
        jobs = sorted(r.job_name for r in runs)
        assert any("clickhouse_lag" in j for j in jobs) and any("hudi_lag" in j for j in jobs)
        checks = [
            e.dagster_event.event_specific_data
            for r in runs
            for e in instance.all_logs(r.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
        ]
        assert checks and all(c.passed for c in checks)
    finally:
        instance.dispose()
