"""Seeded chaos: many SIGKILLs at random step boundaries, then one catch-up; the data is exact.

Reproduce a failure with the seed the test prints: ``EOS_CHAOS_SEED=<seed> pytest <this file>``.
``EOS_CHAOS_KILLS`` sets the number of ClickHouse kills (default 24: each of the four step
boundaries about six times; the Dagster kill test and the failover chaos test kill at each one
too) for a longer soak.
"""

from __future__ import annotations

import os
import random

import pytest

from eos_dev.stack.services import StackConfig
from eos_pipeline_tests.faults.harness import FaultRig, chaos_seed, run_child
from eos_pipeline_tests.support.faults import CLICKHOUSE_STEPS, HUDI_STEPS, MID_HUDI_WRITE_STEP

pytestmark = pytest.mark.integration


def test_clickhouse_chaos_kills_then_catch_up_is_exact(rig: FaultRig) -> None:
    seed = chaos_seed()
    kills_wanted = int(os.environ.get("EOS_CHAOS_KILLS", "24"))
    print(f"clickhouse chaos seed {seed} (replay: EOS_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    rig.produce(12, bad_every=5, rng=rng)
    kills = clean = 0
    steps_hit: dict[str, int] = {}
    while kills < kills_wanted:
        if rng.random() < 0.5:
            rig.produce(rng.randint(1, 8), bad_every=5, rng=rng)
        step = rng.choice(CLICKHOUSE_STEPS)
        partitions = rng.sample(range(rig.partitions), rng.randint(1, rig.partitions))
        child = run_child(
            "clickhouse",
            rig.job(partitions, max_records=rng.randint(2, 9)),
            fault=step,
            skip=rng.randint(0, 2),
            timeout=120,
        )
        if child.killed:
            kills += 1
            steps_hit[step] = steps_hit.get(step, 0) + 1
        else:
            assert child.returncode == 0, f"seed {seed}: run failed\n{child.tail()}"
            clean += 1  # the armed step was never reached: nothing left to do there
    final = run_child("clickhouse", rig.job(max_records=rng.randint(2, 9)))
    assert final.returncode == 0, f"seed {seed}\n{final.tail()}"
    rows = rig.assert_exactly_once()
    print(
        f"clickhouse chaos seed {seed}: {kills} kills {steps_hit}, {clean} runs that finished, "
        f"{rig.produced.total} records, {rows} rows, {len(rig.produced.bad)} dead letters"
    )


@pytest.mark.spark
def test_hudi_chaos_kills_then_catch_up_is_exact(rig: FaultRig, spark_connect: StackConfig) -> None:
    """Kills before the write, while the commit is inflight, and after it completed.

    A kill inside the write must take the writing driver down with it: those children run Spark
    in their own process (~10 s each). The other kills are client-side, so those children and
    the final catch-up are thin clients of the session's Connect server: one table written by
    both kinds of Spark, which must not matter. CI runs ``EOS_CHAOS_HUDI_KILLS`` (default 5: the
    client-side steps twice, the in-write kill, which costs a JVM, once; with the ClickHouse
    test's 24 that makes 29 kills across both sinks).
    """
    remote = spark_connect.spark_connect_url
    seed = chaos_seed()
    kills_wanted = int(os.environ.get("EOS_CHAOS_HUDI_KILLS", "5"))
    print(f"hudi chaos seed {seed} (replay: EOS_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    rig.produce(10, bad_every=4, rng=rng)
    # Each step once, the client-side ones twice, then random ones; a fresh batch every time so
    # there is work.
    steps = [*HUDI_STEPS, *(s for s in HUDI_STEPS if s != MID_HUDI_WRITE_STEP)]
    steps += [rng.choice(HUDI_STEPS) for _ in range(max(0, kills_wanted - len(steps)))]
    rng.shuffle(steps)
    kills: dict[str, int] = {}
    for step in steps[:kills_wanted]:
        rig.produce(rng.randint(1, 6), bad_every=4, rng=rng)
        partitions = rng.choice([None, rng.sample(range(rig.partitions), 2)])
        job = rig.job(partitions, max_records=rng.randint(5, 20))
        if step != MID_HUDI_WRITE_STEP:
            job["spark_remote"] = remote
        child = run_child("hudi", job, fault=step)
        assert child.killed, (
            f"seed {seed}: no kill at {step}: rc={child.returncode}\n{child.tail()}"
        )
        assert f"at step {step}" in child.stderr
        kills[step] = kills.get(step, 0) + 1
    final = run_child("hudi", rig.job(None, runs=2, verify=True, spark_remote=remote))
    assert final.returncode == 0, f"seed {seed}\n{final.tail()}"
    runs = final.result["runs"]
    assert runs[1]["instant"] is None, "a second run right after catch-up must find nothing to do"
    offsets = {
        int(p): {int(o): n for o, n in r.items()} for p, r in final.result["offsets"].items()
    }
    rows = rig.assert_exactly_once(offsets, dlq_topic=rig.hudi_dlq_topic)
    print(
        f"hudi chaos seed {seed}: {sum(kills.values())} kills {kills}, {rig.produced.total} "
        f"records, {rows} rows, {len(rig.produced.bad)} dead letters"
    )
