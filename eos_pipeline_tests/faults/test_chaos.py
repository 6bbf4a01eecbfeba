"""Seeded chaos: many SIGKILLs at random step boundaries, then one catch-up; the data is exact.

Reproduce a failure with the seed the test prints: ``EOS_CHAOS_SEED=<seed> pytest <this file>``.
``EOS_CHAOS_KILLS`` sets the number of ClickHouse kills (default 44) for a longer soak.
"""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path

import pytest

from eos_pipeline.adapters.kafka import KafkaSettings, create_topic
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.stack.mirror import MirrorStack
from eos_pipeline.stack.services import StackConfig
from eos_pipeline_tests.faults.harness import FaultRig, chaos_seed, run_child, unique
from eos_pipeline_tests.mirror_fixtures import produce_events, wait_for_records
from eos_pipeline_tests.support.faults import CLICKHOUSE_STEPS, HUDI_STEPS, MID_HUDI_WRITE_STEP

pytestmark = pytest.mark.integration


def test_clickhouse_chaos_kills_then_catch_up_is_exact(rig: FaultRig) -> None:
    seed = chaos_seed()
    kills_wanted = int(os.environ.get("EOS_CHAOS_KILLS", "44"))
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
    both kinds of Spark, which must not matter. CI runs ``EOS_CHAOS_HUDI_KILLS`` (default 6; with
    the ClickHouse test's 44 that makes 50 kills across both sinks).
    """
    remote = spark_connect.spark_connect_url
    seed = chaos_seed()
    kills_wanted = int(os.environ.get("EOS_CHAOS_HUDI_KILLS", "6"))
    print(f"hudi chaos seed {seed} (replay: EOS_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    rig.produce(10, bad_every=4, rng=rng)
    # Each step at least twice, then random ones; a fresh batch every time so there is work.
    steps = [*HUDI_STEPS, *HUDI_STEPS]
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


#: Step boundaries of the cluster switch (``eos_pipeline.adapters.failover.switch``).
SWITCH_STEPS = (
    "switch_after_begin",
    "switch_after_fence",
    "switch_after_positions",
    "switch_after_activate",
)


def test_failover_chaos_kills_around_each_switch_then_catch_up_is_exact(
    mirror_stack: MirrorStack,
    cluster_settings: dict[str, KafkaSettings],
    zookeeper_hosts: str,
    tmp_path: Path,
) -> None:
    """Four switches A->B->A->B->A, each SIGKILLed at one of its steps, and the first sink run
    after each killed at one of the sink's steps (each step once, in a seeded order); the next
    switch and sink runs recover. Every event produced, on either cluster, lands once."""
    seed = chaos_seed()
    print(f"failover chaos seed {seed} (replay: EOS_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    switch_steps, sink_steps = list(SWITCH_STEPS), list(CLICKHOUSE_STEPS)
    rng.shuffle(switch_steps)
    rng.shuffle(sink_steps)
    topic = unique("fo-chaos").replace("_", "-")
    for settings in cluster_settings.values():
        create_topic(settings, topic, partitions=2)
    job = {
        "name": unique("p_fo"),
        "topic": topic,
        "clusters": {a: s.bootstrap_servers for a, s in cluster_settings.items()},
        "initial": "A",
        "location": mirror_stack.config.offset_syncs_location,
        "keeper": zookeeper_hosts,
        "root": f"/eos_fo_chaos_{uuid.uuid4().hex[:8]}",
        "chdb_path": str(tmp_path / "chdb"),
        "database": unique("db"),
        "table": "events",
        "dlq_topic": f"{topic}.dlq",
    }
    produced = {"A": 0, "B": 0}  # per partition (2 partitions, round-robin)
    expected: set[str] = set()

    def produce(alias: str, prefix: str, count: int) -> None:
        produce_events(cluster_settings[alias], topic, 2, count, prefix=prefix, pause=0)
        produced[alias] += count // 2
        expected.update(f"{prefix}-{n}" for n in range(count))

    def replicated_to(target: str) -> None:
        for origin, count in produced.items():
            if origin != target and count:
                for p in (0, 1):
                    wait_for_records(
                        cluster_settings[target], TopicPartition(f"{origin}.{topic}", p), count
                    )

    def sink(step: str | None = None) -> None:
        child = run_child("cluster-clickhouse", {**job, "max_records": 7}, fault=step)
        if step is None:
            assert child.returncode == 0, f"seed {seed}\n{child.tail()}"
        else:
            assert child.killed, f"seed {seed}: no kill at {step}\n{child.tail()}"

    produce("A", "r0", 30)
    sink()
    active = "A"
    for n, (switch_step, sink_step) in enumerate(zip(switch_steps, sink_steps, strict=True)):
        target = "B" if active == "A" else "A"
        produce(active, f"late{n}", 10)  # written on the old cluster after its last sink run
        replicated_to(target)
        killed = run_child("switch", {**job, "to": target}, fault=switch_step)
        assert killed.killed, f"seed {seed}: no kill at {switch_step}\n{killed.tail()}"
        rerun = run_child("switch", {**job, "to": target})
        assert rerun.returncode == 0, f"seed {seed}\n{rerun.tail()}"
        active = target
        produce(active, f"r{n + 1}", 20)
        sink(sink_step)
        sink()  # recovery: a switch refuses to move a position left in BEFORE
    ids = run_child("cluster-ids", job).result
    doubled = {k: v for k, v in ids.items() if v != 1}
    assert not doubled, f"seed {seed}: written more than once: {sorted(doubled)[:10]}"
    assert set(ids) == expected, (
        f"seed {seed}: missing {sorted(expected - set(ids))[:10]}, "
        f"extra {sorted(set(ids) - expected)[:10]}"
    )
    print(
        f"failover chaos seed {seed}: switch kills {switch_steps}, sink kills {sink_steps}, "
        f"{len(expected)} events once each"
    )
