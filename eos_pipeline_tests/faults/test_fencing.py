"""Zombie fencing end to end: two writers on one topic-partition at the same time.

Dagster never starts two runs for one partition, so this bypasses it: one child process runs two
writers as threads, each with its own ZooKeeper session and writer id, against the same table
(chDB allows one process per data path, so two processes could not share it).
"""

from __future__ import annotations

import pytest

from eos_pipeline_tests.faults.harness import FaultRig, run_child
from eos_pipeline_tests.faults.test_sigkill_clickhouse import keeper_state

pytestmark = pytest.mark.integration


def test_two_writers_at_once_exactly_one_progresses_the_other_is_fenced(rig: FaultRig) -> None:
    rig.produce(40, bad_every=9, partitions=[0])
    child = run_child("zombie", rig.job([0], max_records=10, mode="together"))
    assert child.returncode == 0, child.tail()
    outcome = child.result
    winners = [n for n, o in outcome.items() if o["ok"]]
    losers = [n for n, o in outcome.items() if not o["ok"]]
    assert len(winners) == 1 and len(losers) == 1, outcome
    assert outcome[losers[0]]["error"] == "FencedError", outcome
    assert "fenced" in outcome[losers[0]]["message"]
    assert outcome[winners[0]]["end"] == 40
    assert keeper_state(rig, 0) == ("AFTER", 30, 40)
    rig.partitions = 1
    assert rig.assert_exactly_once() == 40 - len(rig.produced.bad)


def test_stalled_zombie_cannot_move_the_state_after_a_new_writer_finished(rig: FaultRig) -> None:
    """A stalls between its insert and its AFTER write (a GC pause, a frozen VM); B takes over,
    catches up; A wakes up and must be refused, and its late insert must not double anything."""
    rig.produce(30, bad_every=7, partitions=[0])
    child = run_child("zombie", rig.job([0], max_records=10, mode="stalled"))
    assert child.returncode == 0, child.tail()
    outcome = child.result
    assert outcome["B"]["ok"] and outcome["B"]["end"] == 30, outcome
    assert not outcome["A"]["ok"] and outcome["A"]["error"] == "FencedError", outcome
    assert keeper_state(rig, 0) == ("AFTER", 20, 30)
    rig.partitions = 1
    assert rig.assert_exactly_once() == 30 - len(rig.produced.bad)
