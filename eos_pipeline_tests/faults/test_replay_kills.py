"""SIGKILL a ClickHouse replay mid-way (a real kill, in a child process), run it again, and
prove the table exact on the data: every offset once, minus the dead letters."""

from __future__ import annotations

import pytest

from eos_pipeline_tests.faults.harness import FaultRig, run_child

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("step", "skip"),
    [
        ("replay_after_delete", 0),  # the range's rows are gone, none re-inserted yet
        ("replay_after_insert", 1),  # killed after the second of four chunks
        ("mid_insert", 0),  # inside a chunk's INSERT, while ClickHouse writes the part
    ],
)
def test_replay_killed_midway_then_run_again_is_exact(rig: FaultRig, step: str, skip: int) -> None:
    rig.produce(40, bad_every=7, partitions=[0])
    first = run_child("clickhouse", rig.job([0], max_records=10))
    assert first.returncode == 0, first.tail()
    replay = rig.job([0], max_records=8, replay_partition=0, replay_start=4, replay_end=36)

    killed = run_child("replay", replay, fault=step, skip=skip)
    assert killed.killed, f"expected SIGKILL at {step}, got rc={killed.returncode}\n{killed.tail()}"
    assert f"at step {step}" in killed.stderr
    assert len(rig.table_offsets().get(0, {})) < 40 - len(rig.produced.bad)  # rows are missing

    again = run_child("replay", replay)
    assert again.returncode == 0, again.tail()
    assert again.result["resumes"] is True
    assert rig.assert_exactly_once() == 40 - len(rig.produced.bad)
