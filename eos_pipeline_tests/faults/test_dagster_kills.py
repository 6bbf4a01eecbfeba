"""SIGKILL through real Dagster materializations, then recovery by the sensors alone.

``dagster dev`` runs over a temporary ``DAGSTER_HOME`` (the repository's ``dagster.yaml``) and a
pipelines file with one pipeline writing ClickHouse (embedded chDB) and Hudi. Its workspace loads
the test code location ``eos_pipeline_tests/support/fault_definitions.py``: the product's
definitions with the fault suite's hooks. The sensors launch every run; each run is a process of
its own, spawned by the code server. The run processes inherit the code server's environment,
so the fault is armed per run with files: ``EOS_FAULT_STEP=@<folder>`` and one file per armed
fault; the run that reaches the step renames the file (``.fired-<pid>``) and kills itself (see
``eos_pipeline_tests/support/faults.py``).

The Hudi runs are thin clients of the test session's Spark Connect server (``spark.remote``),
as the stack's default makes them: no run pays a JVM, and a run killed while its write executes
keeps that write going on the server (a zombie write). The next run starts at once; either the
zombie's commit lands first and the next plan starts after it, or the later committer is fenced
(``HudiFencedError``) and the sensors ask again. Killing the driver itself inside a write (an
in-process Spark) is proven by ``sinks/test_hudi_sink.py`` and the Hudi chaos test.

Per round: arm one ClickHouse step and one Hudi step, produce records (some bad), wait for both
runs to die at their step, check where each died (keeper record, Hudi timeline), check Dagster
marked each run failed (the code server's orphan check reports the SIGKILL), then wait for the
sensors to launch runs that succeed and catch both tables up. No run is launched by the test.

At the end, on the data read back from the tables (never what runs reported): per partition,
the ClickHouse offsets and the Hudi offsets are Kafka's offsets minus the dead-lettered ones,
each exactly once; the dead letters are exactly the bad records produced; and every
``exactly_once`` asset check that the runs evaluated passed.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import zip_longest
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType

from eos_dev.demo import (
    REPO,
    _code_location_failed,
    prepare_dagster_home,
    start_dagster,
    stop_dagster,
)
from eos_dev.stack.services import StackConfig, free_port
from eos_pipeline.adapters.hudi_timeline import checkpoint_history, latest_checkpoint
from eos_pipeline.adapters.kafka import KafkaSettings, end_offsets
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.components.assets import CLICKHOUSE_SINK
from eos_pipeline.components.sensors import SINK_TAG, START_STATE_TAG
from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.positions import sink_state
from eos_pipeline_tests.faults.harness import FaultRig, chaos_seed
from eos_pipeline_tests.support.defs_folder import write_defs
from eos_pipeline_tests.support.faults import (
    BEFORE_MATERIALIZATION_STEP,
    CLICKHOUSE_STEPS,
    FAULT_ENV,
    FILE_PREFIX,
    HUDI_STEPS,
    MID_INSERT_STEP,
)
from eos_pipeline_tests.support.hudi_rows import hudi_offsets

pytestmark = [pytest.mark.integration, pytest.mark.spark]

#: Steps after which the partition still lags come first: the sensor's retry is the next run.
#: The last two leave ClickHouse caught up, so those rounds produce again for the next run.
CLICKHOUSE_KILLS = [
    *(s for s in CLICKHOUSE_STEPS if s != "after_keeper_after"),
    MID_INSERT_STEP,
    "after_keeper_after",
    f"{CLICKHOUSE_SINK}:{BEFORE_MATERIALIZATION_STEP}",
]
HUDI_KILLS = [*HUDI_STEPS, f"hudi:{BEFORE_MATERIALIZATION_STEP}"]
#: One ClickHouse and one Hudi kill per round (the two sinks' runs are different processes).
#: Rounds without a Hudi kill do not wait for Hudi: its runs overlap the next rounds.
ROUNDS = list(zip_longest(CLICKHOUSE_KILLS, HUDI_KILLS))
assert sorted(CLICKHOUSE_KILLS) == sorted(
    [*CLICKHOUSE_STEPS, MID_INSERT_STEP, f"{CLICKHOUSE_SINK}:{BEFORE_MATERIALIZATION_STEP}"]
)
#: Records of the mid-insert round (and the batch limit, so they are one insert).
BIG_ROUND = 50_000
WAIT = float(os.environ.get("EOS_DAGSTER_KILLS_TIMEOUT", "420"))
#: The code location ``dagster dev`` loads: the product's definitions with the fault hooks.
CODE_LOCATION = "eos_pipeline_tests.support.fault_definitions"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def _pipelines_yaml(rig: FaultRig, max_attempts: int, remote: str) -> str:
    return f"""
keeper: {{hosts: '{rig.zookeeper}', root: '{rig.keeper_root}'}}
clickhouse: {{url: 'chdb://{rig.chdb_path}'}}
spark: {{remote: '{remote}'}}
sensor_interval_seconds: 1
pipelines:
  - name: {rig.pipeline}
    kafka:
      bootstrap_servers: '{rig.kafka.bootstrap_servers}'
      topics: [{rig.topic}]
      dead_letter_topic: {rig.dlq_topic}
    schema: {{id: Int64, name: String}}
    batch: {{max_records: {BIG_ROUND}}}
    retry: {{max_attempts: {max_attempts}}}
    clickhouse: {{database: {rig.database}, table: {rig.table}}}
    hudi: {{path: '{rig.hudi_path}', table: {rig.pipeline}_events}}
"""


def _workspace(tmp_path: Path) -> Path:
    """A workspace loading the test code location (the product's definitions, fault hooks)."""
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "load_from:\n"
        "  - python_module:\n"
        f"      module_name: {CODE_LOCATION}\n"
        f"      working_directory: '{REPO}'\n"
    )
    return workspace


def _message(event: Any) -> str:
    """An event's text (engine events keep theirs on the Dagster event, not the log entry)."""
    return (event.dagster_event.message if event.dagster_event else None) or event.user_message


@dataclass
class Kill:
    """One armed fault and, once it fired, the run it killed."""

    sink: str
    step: str
    file: Path
    pid: int | None = None
    run_id: str | None = None
    created: datetime | None = None
    seconds_to_fail: float = 0.0


@dataclass
class Session:
    """``dagster dev`` on a temporary instance, and the test's view of it."""

    rig: FaultRig
    instance: dg.DagsterInstance
    process: Any
    log: Path
    faults: Path
    store: KeeperStateStore
    began: float = field(default_factory=time.monotonic)

    @property
    def ch_sink(self) -> str:
        return f"{self.rig.pipeline}.{CLICKHOUSE_SINK}"

    @property
    def hudi_sink(self) -> str:
        return f"{self.rig.pipeline}.hudi"

    def say(self, line: str) -> None:
        print(f"[{time.monotonic() - self.began:6.1f}s] {line}", flush=True)

    def wait(
        self, what: str, done: Callable[[], Any], timeout: float = WAIT, every: float = 1.0
    ) -> Any:
        """Poll ``done`` every ``every`` seconds (a status reads Kafka, the keeper, the Hudi
        timeline and the instance: polled faster, it took CPU from the runs it waits for)."""
        deadline = time.monotonic() + timeout
        while True:
            result = done()
            if result:
                return result
            if self.process.poll() is not None:
                raise AssertionError(f"dagster dev exited ({self.process.returncode}): {what}")
            if _code_location_failed(self.log):
                raise AssertionError(f"the code location failed to load; see {self.log}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for {what}; {self.status()[1]}\n"
                    + "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
                )
            time.sleep(every)

    # ------------------------------------------------------------------ arming and killing
    def arm(self, sink: str, step: str) -> Kill:
        name = re.sub(r"\W", "_", f"{sink}_{step}")
        tmp = self.faults / f".{name}"
        tmp.write_text(f"{step}\n")
        tmp.rename(self.faults / name)  # atomic: a run never reads half a fault file
        return Kill(sink, step, self.faults / name)

    def fired(self, kill: Kill) -> bool:
        found = list(self.faults.glob(f"{kill.file.name}.fired-*"))
        if found:
            kill.pid = int(found[0].name.rsplit("-", 1)[1])
        return bool(found)

    def run_of(self, kill: Kill) -> dg.DagsterRun | None:
        """The run whose process was ``kill.pid`` (its "Started process" engine event)."""
        for run in self.instance.get_runs(filters=dg.RunsFilter(tags={SINK_TAG: kill.sink})):
            for event in self.instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT):
                if f"Started process for run (pid: {kill.pid})." in _message(event):
                    return run
        return None

    def marked_failed(self, kill: Kill) -> bool:
        run = self.run_of(kill)
        if run is None or run.status != dg.DagsterRunStatus.FAILURE:
            return False
        kill.run_id = run.run_id
        record = self.instance.get_run_record_by_id(run.run_id)
        assert record is not None
        kill.created = record.create_timestamp
        return True

    def crash_report(self, kill: Kill) -> str:
        assert kill.run_id is not None
        messages = [
            _message(e)
            for e in self.instance.all_logs(kill.run_id, of_type=DagsterEventType.ENGINE_EVENT)
        ]
        return next((m for m in messages if "terminated by signal" in m), "")

    def succeeded_after(self, kill: Kill) -> list[dg.DagsterRun]:
        return list(
            self.instance.get_runs(
                filters=dg.RunsFilter(
                    statuses=[dg.DagsterRunStatus.SUCCESS],
                    tags={SINK_TAG: kill.sink},
                    created_after=kill.created,
                )
            )
        )

    # ------------------------------------------------------------------ where the sinks are
    def clickhouse_states(self) -> dict[int, Any]:
        records = self.store.read_many(self.rig.pipeline, CLICKHOUSE_SINK, self.rig.topic)
        return {p: sink_state(r.record) for p, r in records.items()}

    def hudi_commits(self) -> int:
        """Completed commits carrying a checkpoint (not the empty one that starts a table)."""
        return len(checkpoint_history(self.rig.hudi_path))

    def status(self, hudi_too: bool = True) -> tuple[bool, str]:
        """Whether the sinks reached Kafka's ends with no run in flight; a one-line status."""
        ends = end_offsets(self.rig.kafka, self.rig.topic)
        states = self.clickhouse_states()
        ch = sum(
            1
            for p, end in ends.items()
            if (s := states.get(p)) is not None and s.phase is Phase.AFTER and s.range.end >= end
        )
        # The table's own checkpoint, as the Hudi sensor reads it: a run killed after its commit
        # but before its materialization leaves nothing for the sensor to ask for.
        checkpoint = latest_checkpoint(self.rig.hudi_path) or {}
        hudi = sum(1 for tp, off in checkpoint.items() if off >= ends.get(tp.partition, 0))
        flying = self.instance.get_runs_count(dg.RunsFilter(statuses=IN_FLIGHT))
        failed = self.instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        if hudi_too:
            done = ch == hudi == len(ends) and flying == 0
        else:
            ch_flying = self.instance.get_runs_count(
                dg.RunsFilter(statuses=IN_FLIGHT, tags={SINK_TAG: self.ch_sink})
            )
            done = ch == len(ends) and ch_flying == 0
        return done, (
            f"clickhouse {ch}/{len(ends)}, hudi {hudi}/{len(ends)} caught up, "
            f"{flying} runs in flight, {failed} failed"
        )


@contextlib.contextmanager
def dagster_session(
    rig: FaultRig, tmp_path: Path, max_attempts: int, remote: str
) -> Iterator[Session]:
    home = prepare_dagster_home(tmp_path / "home")
    faults = tmp_path / "faults"
    faults.mkdir()
    pipelines = write_defs(_pipelines_yaml(rig, max_attempts, remote), tmp_path / "defs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOS_FAULT")}
    env |= {
        "DAGSTER_HOME": str(home),
        "EOS_DEFS_DIR": str(pipelines),
        "EOS_SENSOR_INTERVAL_SECONDS": "1",
        FAULT_ENV: f"{FILE_PREFIX}{faults}",
    }
    # Migrate the fresh SQLite storage first: dagster dev's processes would race on it.
    instance = dg.DagsterInstance.from_config(str(home))
    instance.upgrade(print_fn=lambda _msg: None)
    log = tmp_path / "dagster.log"
    process = start_dagster(env, free_port(), log, _workspace(tmp_path))
    store = KeeperStateStore(KeeperSettings(hosts=rig.zookeeper, root=rig.keeper_root))
    store.start()
    try:
        yield Session(rig, instance, process, log, faults, store)
    finally:
        store.close()
        stop_dagster(process)
        instance.dispose()


def _check_where_it_died(session: Session, kill: Kill, before: dict[str, Any]) -> None:
    """The kill landed at its step: the sink's own state right after it says so."""
    step = kill.step.split(":")[-1]
    if kill.sink == session.ch_sink:
        old, now, ends = before["ch"], session.clickhouse_states(), before["ends"]
        changed = {p: s for p, s in now.items() if old.get(p) != s}
        if step == "before_keeper_before":
            assert not changed, f"{step}: keeper moved: {old} -> {now}"
            return
        assert len(changed) == 1, f"{step}: one partition's run died: {old} -> {now}"
        ((p, state),) = changed.items()
        want = (
            Phase.BEFORE
            if step in ("after_keeper_before", "after_insert", MID_INSERT_STEP)
            else Phase.AFTER
        )
        assert state is not None and state.phase is want, f"{step}: keeper {state}"
        assert state.range.end == ends[p], f"{step}: keeper {state}, Kafka end {ends[p]}"
    else:
        commits = session.hudi_commits()
        if step == "before_hudi_write":
            assert commits == before["commits"], f"{step}: a commit completed"
        elif step == "mid_hudi_write":
            # The watcher fired on the write's inflight instant; the server goes on writing
            # after the client died, so the zombie's commit may already have completed.
            assert commits in (before["commits"], before["commits"] + 1), f"{step}: {commits}"
        else:  # after_hudi_commit, before_materialization_event
            assert commits == before["commits"] + 1, f"{step}: {commits} commits"


def _until_an_insert_is_caught(
    session: Session, kill: Kill, before: dict[str, Any], rng: random.Random, partition: int
) -> None:
    """Wait for the ``mid_insert`` kill; produce another big block while the watcher missed.

    The watcher polls for the INSERT's temporary part folder, which a fast insert on a quiet
    machine holds for a few milliseconds: a run may insert and commit between two polls. Then
    ClickHouse is caught up with the fault still armed, and the round produces another big
    block for the next run (at most three blocks; the kill itself is never skipped)."""
    rig = session.rig
    for attempt in range(1, 4):
        session.wait(
            f"a run to die at {kill.step} (block {attempt})",
            lambda: session.fired(kill) or session.status(hudi_too=False)[0],
        )
        if session.fired(kill):
            return
        session.say(f"{kill.step}: block {attempt} was inserted between two polls; another one")
        before["ch"] = session.clickhouse_states()
        rig.produce(BIG_ROUND, bad_every=0, rng=rng, partitions=[partition])
        before["ends"] = end_offsets(rig.kafka, rig.topic)
    raise AssertionError(f"{kill.step}: no insert of three big blocks was caught")


@pytest.mark.timeout(1800)
def test_sigkill_each_step_of_a_dagster_run_then_sensors_recover(
    kafka_settings: KafkaSettings,
    zookeeper_hosts: str,
    spark_connect: StackConfig,
    tmp_path: Path,
) -> None:
    seed = chaos_seed()
    rng = random.Random(seed)
    print(f"dagster kills seed {seed} (replay: EOS_CHAOS_SEED={seed})")
    rig = FaultRig(kafka_settings, zookeeper_hosts, tmp_path / "rig", partitions=2)
    kills: list[Kill] = []
    remote = spark_connect.spark_connect_url
    with dagster_session(rig, tmp_path, max_attempts=3, remote=remote) as session:
        session.say(f"dagster dev started; {len(ROUNDS)} rounds {ROUNDS}")
        for i, (ch_step, hudi_step) in enumerate(ROUNDS):
            partition = i % rig.partitions
            armed = [
                session.arm(s, step)
                for s, step in ((session.ch_sink, ch_step), (session.hudi_sink, hudi_step))
                if step
            ]
            before = {"ch": session.clickhouse_states(), "commits": session.hudi_commits()}
            # The first round starts from empty tables and fills every partition. The mid-insert
            # round writes one big block: the watcher polls for ClickHouse's temporary part
            # folder, which a block of a few rows holds for well under a millisecond.
            big = ch_step == MID_INSERT_STEP
            rig.produce(
                BIG_ROUND if big else rng.randint(4, 12),
                bad_every=0 if big else 4,
                rng=rng,
                partitions=None if i == 0 else [partition],
            )
            before["ends"] = end_offsets(rig.kafka, rig.topic)
            for kill in armed:
                if kill.step == MID_INSERT_STEP:
                    _until_an_insert_is_caught(session, kill, before, rng, partition)
                else:
                    session.wait(
                        f"a run to die at {kill.step}", lambda k=kill: session.fired(k), every=0.25
                    )
                _check_where_it_died(session, kill, before)
                began = time.monotonic()
                session.wait(
                    f"Dagster to mark pid {kill.pid} failed",
                    lambda k=kill: session.marked_failed(k),
                )
                kill.seconds_to_fail = time.monotonic() - began
                report = session.crash_report(kill)
                assert f"{kill.run_id} was terminated by signal 9 (SIGKILL)" in report, report
                session.say(
                    f"{kill.step}: run {kill.run_id} (pid {kill.pid}) killed, marked failed "
                    f"{kill.seconds_to_fail:.1f}s later: {report.split(' This usually')[0]}"
                )
                kills.append(kill)
            # Every round ends with new records, so the sensor must ask for a run after each kill
            # and that run must complete. Without them a kill after the keeper's AFTER write or
            # after the Hudi commit leaves nothing to do, and so may a kill inside the Hudi
            # write: on the Connect server the killed run's write goes on and commits by itself
            # (a zombie), possibly only after this line has looked at the table.
            rig.produce(rng.randint(1, 4), bad_every=3, rng=rng, partitions=[partition])
            hudi_too = hudi_step is not None
            session.wait("the tables caught up", lambda h=hudi_too: session.status(h)[0])
            for kill in armed:
                after = session.succeeded_after(kill)
                assert after, f"{kill.step}: no run of {kill.sink} succeeded after {kill.run_id}"
            session.say(f"round {i} recovered: {session.status()[1]}")
        session.wait("both tables caught up", lambda: session.status()[0])
        instance = session.instance
        runs = instance.get_runs()
        failed = [r for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
        killed = {k.run_id for k in kills}
        # The killed runs failed; besides them only a Hudi run that lost the race against the
        # zombie write may have (fenced, never a commit of its own); all launched by a sensor.
        fenced = [r for r in failed if r.run_id not in killed]
        assert killed <= {r.run_id for r in failed}
        for run in fenced:
            assert run.tags.get(SINK_TAG) == session.hudi_sink, run.tags
            text = " ".join(
                str(e.dagster_event.event_specific_data)
                for e in instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)
                if e.dagster_event
            ) + " ".join(_message(e) or "" for e in instance.all_logs(run.run_id))
            assert "HudiFencedError" in text or "fenced" in text, (run.run_id, text[-2000:])
        assert all(START_STATE_TAG in r.tags for r in runs)
        checks = [
            (r.run_id, e.dagster_event.event_specific_data)
            for r in runs
            for e in instance.all_logs(r.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
        ]
        assert all(c.passed for _, c in checks), [c for _, c in checks if not c.passed]
        checked = {c.asset_key.path[0] for _, c in checks}
        assert checked == {"clickhouse", "hudi"}, checked
        pools = {
            p: instance.event_log_storage.get_concurrency_info(p)
            for p in ("chdb", f"hudi_{rig.pipeline}_events")
        }
        held = {p: info.claimed_slots for p, info in pools.items() if info.claimed_slots}
        assert not held, f"pool slots still held after the runs ended: {held}"
        session.say(
            f"{len(runs)} runs, {len(failed)} failed ({len(fenced)} fenced), "
            f"{len(checks)} checks passed"
        )
    # The proof, on the data read back from both tables (dagster dev is stopped: no writer).
    ch = rig.table_offsets()
    rows = rig.assert_exactly_once(ch)
    hudi_rows = rig.assert_exactly_once(hudi_offsets(rig.hudi_path))  # hudi-rs: no Spark
    assert rows == hudi_rows == rig.produced.total - len(rig.produced.bad)
    print(
        f"dagster kills seed {seed}: {len(kills)} kills "
        f"{[(k.step, round(k.seconds_to_fail, 1)) for k in kills]}, {rig.produced.total} records, "
        f"{rows} rows in each table, {len(rig.produced.bad)} dead letters"
    )
