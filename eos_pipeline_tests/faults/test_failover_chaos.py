"""Seeded chaos around the cluster switch: SIGKILLs at each step of a failover or failback and
of the first sink run after it, then recovery; every event, from either cluster, lands once.

Its own file (not ``test_chaos.py``) because it needs the two-cluster MirrorMaker 2 stack, whose
tests share one pytest-xdist worker; the other chaos tests run beside them.
Reproduce a failure with the seed the test prints: ``EOS_CHAOS_SEED=<seed> pytest <this file>``.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from eos_dev.stack.mirror import MirrorStack
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.faults.harness import chaos_seed, run_child, unique
from eos_pipeline_tests.mirror_fixtures import produce_events, wait_for_records
from eos_pipeline_tests.support.faults import CLICKHOUSE_STEPS

pytestmark = pytest.mark.integration


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
