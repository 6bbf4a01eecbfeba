"""The Hudi sink through failover and failback on the real two-cluster stack, exactly once.

Records are identified by the event id each payload carries (offsets differ per cluster): the
table must hold every id produced exactly once, minus the records sent to the dead-letter topic,
and the records re-read after each switch must stay within MirrorMaker 2's ``offset.lag.max`` + 1
per partition. The test process writes with the session's in-process Spark; the runs killed with
SIGKILL are children on the session's Spark Connect server (a thin client, no JVM of their own).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from eos_dev.stack.config import StackConfig
from eos_dev.stack.mirror import MirrorStack
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.failover import (
    FailoverPipeline,
    FailoverStates,
    SwitchInProgress,
    switch,
)
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.hudi_timeline import checkpoint_history, latest_commit
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic, idempotent_producer
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.failover import ActiveState, ClusterSet, SwitchRefused, TablePosition
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hooks import FaultHook, no_fault
from eos_pipeline.sinks.hudi import HudiReport, HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import ActiveCluster, OneCluster
from eos_pipeline_tests.mirror_fixtures import mirror_paused, produce_events, wait_for_records

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCHEMA = TableSchema.from_mapping({"id": "String"})


@dataclass
class HudiRig:
    fp: FailoverPipeline
    spec: HudiTableSpec
    store: KeeperStateStore
    spark: SparkSession

    @property
    def topic(self) -> str:
        return self.spec.topic

    def run(self, fault: FaultHook = no_fault, **kw: object) -> HudiReport:
        source = ActiveCluster(self.fp, self.store)
        dead_letters = DeadLetterWriter(source.kafka, f"{self.topic}.dlq", self.spec.pipeline)
        sync = HudiTableSync(self.spec, source, self.spark, dead_letters, fault=fault)
        report = sync.run(**kw)  # type: ignore[arg-type]
        print(
            f"[hudi on {report.cluster}] read {report.total_records_read}, rows "
            f"{report.total_rows_written}, dead {report.total_dead_letters}, re-read "
            f"{report.reread}, skipped {report.skipped}"
        )
        return report

    def ids(self) -> dict[str, int]:
        rows = self.spark.read.format("hudi").load(self.spec.table_path)
        return {r["id"]: r["count"] for r in rows.groupBy("id").count().collect()}

    def position(self) -> TablePosition:
        commit = latest_commit(self.spec.table_path)
        assert commit is not None and commit.cluster_position is not None
        return TablePosition.decode(commit.cluster_position)


@pytest.fixture
def rig(
    request: pytest.FixtureRequest,
    mirror_stack: MirrorStack,
    cluster_settings: dict[str, KafkaSettings],
    zookeeper_hosts: str,
    spark: SparkSession,
    tmp_path: Path,
) -> Iterator[HudiRig]:
    suffix = uuid.uuid4().hex[:8]
    topic = f"t-hudi-{suffix}"
    for settings in cluster_settings.values():
        create_topic(settings, topic, partitions=getattr(request, "param", 1))
    store = KeeperStateStore(KeeperSettings(hosts=zookeeper_hosts, root=f"/eos_hfo_{suffix}"))
    store.start()
    fp = FailoverPipeline(
        name=f"p_{suffix}",
        topics=(topic,),
        sinks=(),
        clusters=ClusterSet.both_ways(mirror_stack.config.aliases),
        settings=cluster_settings,
        initial="A",
        offset_syncs_location=mirror_stack.config.offset_syncs_location,
        hudi_table=str(tmp_path / "events"),
    )
    spec = HudiTableSpec(
        pipeline=fp.name,
        topic=topic,
        table_path=str(tmp_path / "events"),
        table_name="events",
        schema=SCHEMA,
        hudi_options=SMALL_TABLE_OPTIONS,
    )
    try:
        yield HudiRig(fp, spec, store, spark)
    finally:
        store.close()


def _ids_of(prefix: str, count: int) -> set[str]:
    return {f"{prefix}-{n}" for n in range(count)}


def _assert_once(ids: dict[str, int], expected: set[str]) -> None:
    dupes = {k: n for k, n in ids.items() if n != 1}
    assert not dupes, f"written more than once: {sorted(dupes)[:10]}"
    assert set(ids) == expected, (
        f"missing {sorted(expected - set(ids))[:10]}, extra {sorted(set(ids) - expected)[:10]}"
    )


def _produce_bad(settings: KafkaSettings, topic: str, count: int) -> None:
    producer = idempotent_producer(settings)
    for n in range(count):
        producer.produce(topic, key=f"bad-{n}".encode(), value=b"\xffnot json", partition=0)
    assert producer.flush(30.0) == 0


def test_seed_story_failover_and_failback_with_an_unreplicated_tail(
    rig: HudiRig, mirror_stack: MirrorStack
) -> None:
    """1,000 records on A, 500 of them written by the single-cluster sink (an old table); fail
    over to B while MM2 is frozen with 100 more on A not copied; producers move to B; fail back
    to A with more records there: every id once, re-reads bounded, dead letters left out."""
    fp, topic = rig.fp, rig.topic
    a, b = fp.settings["A"], fp.settings["B"]
    lag_max = mirror_stack.config.offset_lag_max
    placed = produce_events(a, topic, 1, 1000, prefix="a")
    half = placed[0][499][0] + 1
    old = HudiTableSync(
        rig.spec, OneCluster(a), rig.spark, DeadLetterWriter(a, f"{topic}.dlq", fp.name)
    )
    old.run(until={0: half})  # an old table: a checkpoint, no cluster position
    assert latest_commit(rig.spec.table_path).cluster_position is None  # type: ignore[union-attr]
    assert len(rig.ids()) == 500
    # The clustered sink adopts it as it stands: no record read, the last one marked.
    rig.run(until={0: half})
    adopted = rig.position()
    assert adopted.cluster == "A" and adopted.positions[TopicPartition(topic, 0)] == half
    assert adopted.marks[TopicPartition(topic, 0)].last_offset == half - 1
    wait_for_records(b, TopicPartition(f"A.{topic}", 0), 1000)
    # The switch checks the table up front: its B.T position cannot go back without flow B->A.
    states = FailoverStates(rig.store)
    one_way = replace(fp, clusters=ClusterSet.parse(["A", "B"], ["A->B"]))
    with pytest.raises(SwitchRefused, match="does not replicate"):
        switch(rig.store, one_way, "B")
    assert states.read(fp.name, "A") == (ActiveState("A"), None)

    with mirror_paused(mirror_stack):
        produce_events(a, topic, 1, 100, prefix="tail")  # on A only: MM2 is frozen
        states.write(fp.name, ActiveState("A").begun("B"), None)  # a switch in flight
        with pytest.raises(SwitchInProgress):
            rig.run()
        checked = switch(rig.store, fp, "B").checked
        assert [k for k in checked if k.startswith("hudi ")], checked  # the mark's copy found
        wait_for_records(b, TopicPartition(f"A.{topic}", 0), 1000)  # the tail is not on B
        produce_events(b, topic, 1, 200, prefix="b")
        _produce_bad(b, topic, 3)
        report = rig.run()
        assert report.cluster == "B" and report.total_dead_letters == 3
        assert 0 < report.reread <= lag_max + 1 and report.skipped <= report.reread
        _assert_once(rig.ids(), _ids_of("a", 1000) | _ids_of("b", 200))
        on_b = rig.position()
        assert on_b.cluster == "B" and not on_b.pending
    wait_for_records(a, TopicPartition(f"B.{topic}", 0), 203)

    switch(rig.store, fp, "A")
    produce_events(a, topic, 1, 300, prefix="c")
    report = rig.run()
    assert report.cluster == "A" and report.reread <= 2 * (lag_max + 1)  # two topics moved
    assert report.total_dead_letters == 0  # B's bad records were dead-lettered once, on B
    _assert_once(
        rig.ids(), _ids_of("a", 1000) | _ids_of("tail", 100) | _ids_of("b", 200) | _ids_of("c", 300)
    )
    assert rig.run().instant_time is None  # caught up: nothing more to commit
    rows = rig.spark.read.format("hudi").load(rig.spec.table_path)
    topics = {r["_topic"] for r in rows.select("_topic").distinct().collect()}
    # The old table's rows keep the plain name; each cluster's rows name their cluster.
    assert topics == {topic, f"B:A.{topic}", f"B:{topic}", f"A:{topic}"}
    back = rig.position()
    assert back.cluster == "A" and set(back.positions) == {
        TopicPartition(topic, 0),
        TopicPartition(f"B.{topic}", 0),
    }


class InjectedCrash(Exception):
    """Stands in for the process dying at a sink step boundary (no sink code after it runs)."""


def _crash_at(step: str) -> Callable[[str], None]:
    def hook(at: str) -> None:
        if at == step:
            raise InjectedCrash(at)

    return hook


def _child(rig: HudiRig, remote: str, kill_at: str) -> subprocess.CompletedProcess[str]:
    fp = rig.fp
    job = {
        "name": fp.name,
        "topic": rig.topic,
        "clusters": {alias: s.bootstrap_servers for alias, s in fp.settings.items()},
        "initial": fp.initial,
        "location": fp.offset_syncs_location,
        "keeper": rig.store.settings.hosts,
        "root": rig.store.settings.root,
        "table": rig.spec.table_path,
        "remote": remote,
        "kill_at": kill_at,
    }
    return subprocess.run(
        [sys.executable, "-m", "eos_pipeline_tests.support.hudi_failover_child", json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize("rig", [2], indirect=True)
def test_sigkill_of_the_hudi_run_around_a_switch_then_rerun(
    rig: HudiRig, spark_connect: StackConfig, mirror_stack: MirrorStack
) -> None:
    """The first Hudi run after a failover is SIGKILLed before its commit, the next one crashes
    right after it, and the failback's switch is SIGKILLed after its first step: each rerun
    converges to every id once."""
    fp, topic = rig.fp, rig.topic
    a, b = fp.settings["A"], fp.settings["B"]
    remote = spark_connect.spark_connect_url
    produce_events(a, topic, 2, 120, prefix="a")
    rig.run()
    produce_events(a, topic, 2, 40, prefix="late")  # on A after the sink ran there
    for p in (0, 1):
        wait_for_records(b, TopicPartition(f"A.{topic}", p), 80)
    switch(rig.store, fp, "B")
    produce_events(b, topic, 2, 60, prefix="b")
    expected = _ids_of("a", 120) | _ids_of("late", 40) | _ids_of("b", 60)
    commits = len(checkpoint_history(rig.spec.table_path))

    killed = _child(rig, remote, "before_hudi_write")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert len(checkpoint_history(rig.spec.table_path)) == commits  # nothing committed
    assert rig.position().cluster == "A"
    # The rerun dies right after its commit (in this process: a second child would pay a cold
    # Hudi write on the server for the same proof); the next run finds everything done.
    with pytest.raises(InjectedCrash):
        rig.run(fault=_crash_at("after_hudi_commit"))
    assert rig.position().cluster == "B"
    _assert_once(rig.ids(), expected)
    assert rig.run().instant_time is None

    for p in (0, 1):
        wait_for_records(a, TopicPartition(f"B.{topic}", p), 30)
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "eos_pipeline_tests.support.switch_child",
            json.dumps(
                {
                    "name": fp.name,
                    "topics": [topic],
                    "clusters": {x: s.bootstrap_servers for x, s in fp.settings.items()},
                    "initial": fp.initial,
                    "location": fp.offset_syncs_location,
                    "keeper": rig.store.settings.hosts,
                    "root": rig.store.settings.root,
                    "to": "A",
                    "kill_at": "switch_after_begin",
                }
            ),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    with pytest.raises(SwitchInProgress):
        rig.run()
    switch(rig.store, fp, "A")
    produce_events(a, topic, 2, 40, prefix="c")
    rig.run()
    _assert_once(rig.ids(), expected | _ids_of("c", 40))
