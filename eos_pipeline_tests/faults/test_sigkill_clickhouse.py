"""SIGKILL the ClickHouse sink's process at every step boundary, then prove the retry exact.

Each run is a child process; ``EOS_FAULT_STEP`` kills it at the named boundary (a kill, not an
exception: nothing after the boundary runs, no cleanup, chDB's files are left as they are).
"""

from __future__ import annotations

import pytest

from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.faults.harness import FaultRig, run_child
from eos_pipeline_tests.support.faults import CLICKHOUSE_STEPS, MID_INSERT_STEP

pytestmark = pytest.mark.integration

# What the keeper must hold for the killed batch right after the kill at each boundary
# (the run is killed in its second batch, [5, 10), after [0, 5) completed).
STATE_AFTER_KILL = {
    "before_keeper_before": ("AFTER", 0, 5),
    "after_keeper_before": ("BEFORE", 5, 10),
    "after_insert": ("BEFORE", 5, 10),
    "after_keeper_after": ("AFTER", 5, 10),
}


def keeper_state(rig: FaultRig, partition: int) -> tuple[str | None, int | None, int | None]:
    settings = KeeperSettings(hosts=rig.zookeeper, root=rig.keeper_root)
    with KeeperStateStore(settings) as store:
        got = store.read(
            KeeperKey.of(rig.pipeline, "clickhouse", TopicPartition(rig.topic, partition))
        )
    if got is None:
        return (None, None, None)
    return (got.record.phase, got.record.range_start, got.record.range_end)


@pytest.mark.parametrize("step", CLICKHOUSE_STEPS)
def test_sigkill_at_step_then_clean_run_is_exact(rig: FaultRig, step: str) -> None:
    rig.produce(20, bad_every=7)
    killed = run_child("clickhouse", rig.job([0], max_records=5), fault=step, skip=1)
    assert killed.killed, f"expected SIGKILL at {step}, got rc={killed.returncode}\n{killed.tail()}"
    assert f"killing the process (SIGKILL) at step {step}" in killed.stderr
    assert keeper_state(rig, 0) == STATE_AFTER_KILL[step]

    clean = run_child("clickhouse", rig.job(max_records=5))
    assert clean.returncode == 0, clean.tail()
    assert {p: r["end"] for p, r in clean.result.items()} == {"0": 20, "1": 20, "2": 20}
    assert rig.assert_exactly_once() == 60 - len(rig.produced.bad)


def test_sigkill_while_clickhouse_writes_the_part_then_clean_run_is_exact(rig: FaultRig) -> None:
    """Killed inside the INSERT: the part is being written (``tmp_insert_*`` exists on disk).

    No Python boundary reaches this point; a watcher thread in the child kills the process as
    soon as ClickHouse's temporary part folder appears. The retry re-sends the same block under
    the same token; whatever the engine kept of the half-written part, each offset ends up once.
    """
    rig.produce(120_000, partitions=[0])
    killed = run_child(
        "clickhouse",
        rig.job([0], max_records=200_000),
        fault=MID_INSERT_STEP,
    )
    assert killed.killed, f"rc={killed.returncode}\n{killed.tail()}"
    assert "at step mid_insert" in killed.stderr
    assert keeper_state(rig, 0) == ("BEFORE", 0, 120_000)
    assert rig.table_offsets().get(0, {}) == {}  # the half-written part never became visible

    clean = run_child("clickhouse", rig.job([0], max_records=200_000))
    assert clean.returncode == 0, clean.tail()
    assert clean.result["0"]["cases"] == ["SAME"]
    assert rig.assert_exactly_once() == 120_000
