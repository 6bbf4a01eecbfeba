"""The seed's story on the real two-cluster stack: fail over to B and back, exactly once.

Records are identified by the event id the test puts in each payload (offsets differ per
cluster); the table must hold each id exactly once, and the records re-read after each switch
must stay within MirrorMaker 2's ``offset.lag.max`` + 1 per partition.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from clickhouse_connect.driver.client import Client

from eos_dev.stack.mirror import MirrorStack
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.failover import (
    FailoverPipeline,
    FailoverStates,
    SwitchInProgress,
    switch,
)
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.cli import main as cli_main
from eos_pipeline.components.project import load_project
from eos_pipeline.components.resources import KeeperResource
from eos_pipeline.components.source import failover_job
from eos_pipeline.core.failover import (
    ActiveState,
    ClusterSet,
    FingerprintNotFound,
    ResumeError,
    SwitchRefused,
)
from eos_pipeline.core.keeper import KeeperKey, Mark
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline_tests.mirror_fixtures import produce_events, wait_for_records
from eos_pipeline_tests.support.defs_folder import write_defs
from eos_pipeline_tests.support.sink_runs import run_active_clickhouse, run_range

pytestmark = pytest.mark.integration

SCHEMA = TableSchema.from_mapping({"id": "String"})


@pytest.fixture
def setup(
    request: pytest.FixtureRequest,
    mirror_stack: MirrorStack,
    cluster_settings: dict[str, KafkaSettings],
    zookeeper_hosts: str,
    chdb_client: Client,
) -> Iterator[
    tuple[FailoverPipeline, ClickHouseTableSpec, KeeperStateStore, ClickHouseSink, Client]
]:
    suffix = uuid.uuid4().hex[:8]
    topic = f"t-story-{suffix}"
    for settings in cluster_settings.values():
        create_topic(settings, topic, partitions=getattr(request, "param", 1))
    database = re.sub(r"[^A-Za-z0-9_]", "_", f"db_{suffix}")
    sink = ClickHouseSink(chdb_client)
    sink.ensure_table(database, "events", SCHEMA)
    store = KeeperStateStore(KeeperSettings(hosts=zookeeper_hosts, root=f"/eos_fo_{suffix}"))
    store.start()
    fp = FailoverPipeline(
        name=f"p_{suffix}",
        topics=(topic,),
        sinks=("clickhouse",),
        clusters=ClusterSet.both_ways(mirror_stack.config.aliases),
        settings=cluster_settings,
        initial="A",
        offset_syncs_location=mirror_stack.config.offset_syncs_location,
    )
    spec = ClickHouseTableSpec(pipeline=fp.name, database=database, table="events", schema=SCHEMA)
    try:
        yield fp, spec, store, sink, chdb_client
    finally:
        store.close()


def _pipelines_file(
    tmp_path: Path, fp: FailoverPipeline, spec: ClickHouseTableSpec, store: KeeperStateStore
) -> Path:
    a, b = fp.settings["A"], fp.settings["B"]
    pipeline = {
        "name": fp.name,
        "kafka": {
            "bootstrap_servers": a.bootstrap_servers,
            "topics": list(fp.topics),
            "clusters": {"A": a.bootstrap_servers, "B": b.bootstrap_servers},
            "offset_syncs_location": fp.offset_syncs_location,
        },
        "schema": {"id": "String"},
        "clickhouse": {"database": spec.database, "table": spec.table},
    }
    keeper = {"hosts": store.settings.hosts, "root": store.settings.root}
    return write_defs(
        yaml.safe_dump({"keeper": keeper, "pipelines": [pipeline]}), tmp_path / "defs"
    )


def _ids(client: Client, spec: ClickHouseTableSpec) -> dict[str, int]:
    rows = client.query(
        f"SELECT id, count() FROM {spec.database}.{spec.table} GROUP BY id"
    ).result_rows
    return {str(i): int(n) for i, n in rows}


def test_failover_and_failback_write_every_record_once(
    setup, mirror_stack: MirrorStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fp, spec, store, sink, client = setup
    a, b = fp.settings["A"], fp.settings["B"]
    topic = fp.topics[0]
    lag_max = mirror_stack.config.offset_lag_max
    dlq = f"{topic}.dlq"

    # 1,000 records on A; the sink writes the first 500 there.
    placed = produce_events(a, topic, 1, 1000, prefix="a")
    ClickHousePartitionSync(
        spec, a, store, sink, DeadLetterWriter(a, dlq, fp.name), cluster="A"
    ).run(TopicPartition(topic, 0), until=placed[0][499][0] + 1)
    assert len(_ids(client, spec)) == 500
    wait_for_records(b, TopicPartition(f"A.{topic}", 0), 1000)

    # Bad cases change nothing.
    states = FailoverStates(store)
    with pytest.raises(SwitchRefused, match="unknown cluster 'C'"):
        switch(store, fp, "C")
    assert states.read(fp.name, "A") == (ActiveState("A"), None)
    key = KeeperKey(fp.name, "clickhouse", topic, 0, "A")
    good = store.read(key)
    assert good is not None and good.record.mark is not None
    lease = store.acquire(key)
    wrong = Mark("f" * 32, good.record.mark.last_offset)
    store.write(lease, 500, 500, "AFTER", mark=wrong)
    with pytest.raises(FingerprintNotFound, match=f"A.{topic}"):
        switch(store, fp, "B")
    assert states.read(fp.name, "A") == (ActiveState("A"), None)
    assert store.read_many(fp.name, "clickhouse", f"A.{topic}", "B") == {}
    store.write(lease, 500, 500, "AFTER", mark=good.record.mark)

    # A switch in flight (as a crash after its first step leaves it) blocks other switches and
    # the sinks, and a rerun finishes it.
    states.write(fp.name, ActiveState("A").begun("B"), None)
    with pytest.raises(SwitchRefused, match="in flight"):
        switch(store, fp, "A")
    with pytest.raises(SwitchInProgress):
        run_active_clickhouse(fp, spec, store, sink, dlq)

    # Failover to B through the Dagster job: the other 500 come from A.T, and 200 new records
    # are produced on B.
    config = _pipelines_file(tmp_path, fp, spec, store)
    job = failover_job(load_project(config).config)
    result = job.execute_in_process(
        run_config={"ops": {"switch_cluster": {"config": {"pipeline": fp.name, "to": "B"}}}},
        resources={"keeper": KeeperResource(hosts=store.settings.hosts, root=store.settings.root)},
    )
    assert result.success and result.output_for_node("switch_cluster") == "B"
    [output] = [e for e in result.all_node_events if e.is_successful_output]
    metadata = output.step_output_data.metadata
    assert metadata["steps run"].value == "fence, positions, activate"
    assert metadata["positions moved"].value == 1
    assert FailoverStates(store).active(fp.name, "A") == "B"
    assert switch(store, fp, "B").steps == ()  # idempotent
    produce_events(b, topic, 1, 200, prefix="b")
    reports = run_active_clickhouse(fp, spec, store, sink, dlq)
    by_topic = {r.tp.topic: r for r in reports}
    moved = by_topic[f"A.{topic}"]
    print(f"[failover] A.T on B: re-read {moved.reread}, skipped {moved.skipped}")
    assert moved.reread <= lag_max + 1
    ids = _ids(client, spec)
    assert len(ids) == 1200 and set(ids.values()) == {1}, "duplicates or gaps after failover"

    # Failback to A once B's records are on A, through the command line; then more on A.
    wait_for_records(a, TopicPartition(f"B.{topic}", 0), 200)
    assert cli_main(["failover", "--pipeline", fp.name, "--to", "A", "--defs", str(config)]) == 0
    assert "positions moved: 2" in capsys.readouterr().out
    assert states.active(fp.name, "A") == "A"
    produce_events(a, topic, 1, 300, prefix="c")
    reports = run_active_clickhouse(fp, spec, store, sink, dlq)
    for r in reports:
        print(f"[failback] {r.tp}: re-read {r.reread}, skipped {r.skipped}, rows {r.rows_sent}")
        assert r.reread <= lag_max + 1
    ids = _ids(client, spec)
    expected = (
        {f"a-{n}" for n in range(1000)}
        | {f"b-{n}" for n in range(200)}
        | {f"c-{n}" for n in range(300)}
    )
    dupes = {k: n for k, n in ids.items() if n != 1}
    assert not dupes, f"written more than once: {sorted(dupes)[:10]}"
    assert set(ids) == expected, (
        f"missing {sorted(expected - set(ids))[:10]}, extra {sorted(set(ids) - expected)[:10]}"
    )


def _assert_once(ids: dict[str, int], expected: set[str]) -> None:
    dupes = {k: n for k, n in ids.items() if n != 1}
    assert not dupes, f"written more than once: {sorted(dupes)[:10]}"
    assert set(ids) == expected, (
        f"missing {sorted(expected - set(ids))[:10]}, extra {sorted(set(ids) - expected)[:10]}"
    )


def _ids_of(prefix: str, count: int) -> set[str]:
    return {f"{prefix}-{n}" for n in range(count)}


@pytest.mark.parametrize("setup", [2], indirect=True)
def test_failover_while_mirrormaker_is_behind_the_sink(setup, mirror_stack: MirrorStack) -> None:
    """The sink wrote records MM2 had not copied yet: on B their copies are skipped when they
    arrive (the mark stays pending until then), and after failback nothing is written twice."""
    fp, spec, store, sink, client = setup
    a, b = fp.settings["A"], fp.settings["B"]
    topic = fp.topics[0]
    dlq = f"{topic}.dlq"
    replica = [TopicPartition(f"A.{topic}", p) for p in (0, 1)]
    produce_events(a, topic, 2, 200, prefix="a")
    for tp in replica:
        wait_for_records(b, tp, 100)
    mirror_stack.stop_mirror()
    try:
        produce_events(a, topic, 2, 100, prefix="m")  # on A only, for now
        run_active_clickhouse(fp, spec, store, sink, dlq)
        _assert_once(_ids(client, spec), _ids_of("a", 200) | _ids_of("m", 100))

        switch(store, fp, "B")
        pending = store.read(KeeperKey(fp.name, "clickhouse", replica[0].topic, 0, "B"))
        assert pending is not None and pending.record.mark is not None
        assert pending.record.mark.pending and pending.record.mark.window_end is None
        on_b = ClickHousePartitionSync(
            spec, b, store, sink, DeadLetterWriter(b, dlq, fp.name), cluster="B"
        )
        with pytest.raises(ResumeError, match="run the partition"):
            run_range(on_b, replica[0], OffsetRange(0, 10))  # a backfill would write copies
        produce_events(b, topic, 2, 50, prefix="b")
        reports = run_active_clickhouse(fp, spec, store, sink, dlq)
        for r in reports:
            print(f"[behind, on B] {r.tp}: re-read {r.reread}, skipped {r.skipped}")
        _assert_once(_ids(client, spec), _ids_of("a", 200) | _ids_of("m", 100) | _ids_of("b", 50))
    finally:
        mirror_stack.up()
    for tp in replica:
        wait_for_records(b, tp, 150)
    for p in (0, 1):
        wait_for_records(a, TopicPartition(f"B.{topic}", p), 25)
    # The late copies arrive on B: the sink recognises the last one it wrote and skips to it.
    reports = {str(r.tp): r for r in run_active_clickhouse(fp, spec, store, sink, dlq)}
    for tp in replica:
        assert reports[str(tp)].rows_sent == 0 and reports[str(tp)].skipped > 0
    located = store.read(KeeperKey(fp.name, "clickhouse", replica[0].topic, 0, "B"))
    assert located is not None and located.record.mark is not None
    assert not located.record.mark.pending

    switch(store, fp, "A")
    produce_events(a, topic, 2, 40, prefix="c")
    for r in run_active_clickhouse(fp, spec, store, sink, dlq):
        print(f"[behind, back on A] {r.tp}: re-read {r.reread}, skipped {r.skipped}")
        assert r.reread <= mirror_stack.config.offset_lag_max + 1
    _assert_once(
        _ids(client, spec),
        _ids_of("a", 200) | _ids_of("m", 100) | _ids_of("b", 50) | _ids_of("c", 40),
    )


SWITCH_STEPS = (
    "switch_after_begin",
    "switch_after_fence",
    "switch_after_positions",
    "switch_after_activate",
)


def test_sigkill_at_each_step_of_the_switch_then_rerun(setup) -> None:
    """Each switch is killed at one step boundary, then rerun: the pipeline ends on the target
    cluster and every record produced through it all is in the table once."""
    fp, spec, store, sink, client = setup
    topic = fp.topics[0]
    dlq = f"{topic}.dlq"
    states = FailoverStates(store)
    produce_events(fp.settings["A"], topic, 1, 60, prefix="r0")
    run_active_clickhouse(fp, spec, store, sink, dlq)
    expected = _ids_of("r0", 60)
    produced = {"A": 60, "B": 0}
    for n, step in enumerate(SWITCH_STEPS, start=1):
        target = "B" if n % 2 else "A"
        # What was produced so far must be on the target before the switch looks for it.
        for origin, count in produced.items():
            if count:
                where = topic if origin == target else f"{origin}.{topic}"
                wait_for_records(fp.settings[target], TopicPartition(where, 0), count)
        job = {
            "name": fp.name,
            "topics": list(fp.topics),
            "clusters": {a: s.bootstrap_servers for a, s in fp.settings.items()},
            "initial": fp.initial,
            "location": fp.offset_syncs_location,
            "keeper": store.settings.hosts,
            "root": store.settings.root,
            "to": target,
            "kill_at": step,
        }
        child = subprocess.run(
            [sys.executable, "-m", "eos_pipeline_tests.support.switch_child", json.dumps(job)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
        state, _ = states.read(fp.name, "A")
        in_flight = step != "switch_after_activate"
        assert (state.switch is not None) == in_flight, (step, state)
        assert switch(store, fp, target).target == target
        assert states.active(fp.name, "A") == target
        prefix = f"r{n}"
        produce_events(fp.settings[target], topic, 1, 30, prefix=prefix)
        produced[target] += 30
        expected |= _ids_of(prefix, 30)
        for r in run_active_clickhouse(fp, spec, store, sink, dlq):
            print(f"[kill at {step}] {r.tp}@{target}: re-read {r.reread}, skipped {r.skipped}")
        _assert_once(_ids(client, spec), expected)


def _producing(settings: KafkaSettings, topic: str, prefix: str, count: int) -> threading.Thread:
    """Produce ``count`` events over 3 partitions in the background (live traffic)."""
    thread = threading.Thread(
        target=produce_events, args=(settings, topic, 3, count), kwargs={"prefix": prefix}
    )
    thread.start()
    return thread


@pytest.mark.parametrize("setup", [3], indirect=True)
def test_live_traffic_through_failover_and_failback(setup) -> None:
    """Producers write during every phase, the sink runs while they do, and the switches
    happen mid-traffic (some records not yet copied by MM2): every record lands once."""
    fp, spec, store, sink, client = setup
    a, b = fp.settings["A"], fp.settings["B"]
    topic = fp.topics[0]
    dlq = f"{topic}.dlq"
    expected: set[str] = set()

    def phase(settings: KafkaSettings, prefix: str, count: int) -> threading.Thread:
        expected.update(_ids_of(prefix, count))
        return _producing(settings, topic, prefix, count)

    before = phase(a, "pre", 600)
    run_active_clickhouse(fp, spec, store, sink, dlq)
    before.join()
    on_a_late = phase(a, "late", 150)  # still being written to A while the switch runs
    time.sleep(0.5)
    switch(store, fp, "B")
    during = phase(b, "dur", 450)
    for _ in range(3):
        run_active_clickhouse(fp, spec, store, sink, dlq)
    on_a_late.join()
    during.join()
    run_active_clickhouse(fp, spec, store, sink, dlq)
    after = phase(b, "tail", 150)  # still being written to B while failing back
    time.sleep(0.5)
    switch(store, fp, "A")
    back = phase(a, "post", 300)
    run_active_clickhouse(fp, spec, store, sink, dlq)
    after.join()
    back.join()
    # Let MM2 copy B's records to A, then catch up.
    for p in range(3):
        wait_for_records(a, TopicPartition(f"B.{topic}", p), 200)
    run_active_clickhouse(fp, spec, store, sink, dlq)
    _assert_once(_ids(client, spec), expected)


class InjectedCrash(Exception):
    """Stands in for the process dying at a sink step boundary (no code after it runs)."""


@pytest.mark.parametrize(
    "step", ["before_keeper_before", "after_keeper_before", "after_insert", "after_keeper_after"]
)
def test_a_crash_at_each_sink_step_right_after_a_switch(
    setup, step: str, mirror_stack: MirrorStack
) -> None:
    """The first sink run after a failover dies at a step boundary of the moved replica's
    partition; the rerun converges."""
    fp, spec, store, sink, client = setup
    a, b = fp.settings["A"], fp.settings["B"]
    topic = fp.topics[0]
    dlq = f"{topic}.dlq"
    produce_events(a, topic, 1, 80, prefix="a")
    run_active_clickhouse(fp, spec, store, sink, dlq)
    produce_events(a, topic, 1, 40, prefix="late")  # written on A after the sink ran there
    wait_for_records(b, TopicPartition(f"A.{topic}", 0), 120)
    switch(store, fp, "B")
    produce_events(b, topic, 1, 30, prefix="b")

    passes: list[str] = []

    def crash(at: str) -> None:
        # The second pass is in A.T, the replica whose position the switch moved (T on B,
        # read first, has one step of its own).
        passes.append(at)
        if passes.count(step) == 2:
            raise InjectedCrash(at)

    with pytest.raises(InjectedCrash):
        run_active_clickhouse(fp, spec, store, sink, dlq, fault=crash)
    run_active_clickhouse(fp, spec, store, sink, dlq)
    _assert_once(_ids(client, spec), _ids_of("a", 80) | _ids_of("late", 40) | _ids_of("b", 30))
