"""The main job, end to end on the local stack (``eos-pipeline demo`` / ``make demo``).

1. bring the stack up, create the demo topic, produce sample events (a few malformed);
2. start ``dagster dev`` on the project's ``workspace.yaml`` with ``DAGSTER_HOME=.dagster_home``
   (the project's ``dagster.yaml``), and print the UI's URL;
3. let the sensors drive: the partitions sensor adds one partition per Kafka partition, the lag
   sensors request ClickHouse runs (one run over all lagging partitions on the chDB path) and
   one Hudi run over all lagging partitions (one commit);
4. when both tables are caught up with the end offsets fixed after producing (and no run is in
   flight), print per partition: Kafka's end offset, ClickHouse rows and distinct offsets, Hudi
   rows and distinct offsets, and dead letters. Kafka's end equals rows plus dead letters, with
   no duplicate.

Without ``--keep-ui`` the command then stops Dagster and ends; with it the UI stays up until
Ctrl-C. Running it again produces more events and moves only those.

The tables are counted in a child process: chDB allows one process per data path, and the runs
Dagster launches must be able to open it afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eos_dev.stack.services import Stack, StackConfig, free_port
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
)

REPO = Path(__file__).resolve().parents[2]
PIPELINE = "demo"


def _events(count: int, seed: int) -> list[tuple[int | None, bytes | None, bytes | None]]:
    rng = random.Random(seed)
    out: list[tuple[int | None, bytes | None, bytes | None]] = []
    for i in range(count):
        user = f"user-{rng.randrange(50)}"
        if i % 250 == 249:
            value = b'{"event_id": "not-a-number", "user": 1}'  # schema violation -> DLQ
        elif i % 333 == 332:
            value = b"\x00garbage"  # not JSON -> DLQ
        else:
            value = json.dumps(
                {
                    "event_id": seed * 1_000_000 + i,
                    "user": user,
                    "action": rng.choice(["view", "cart", "buy"]),
                    "amount": round(rng.random() * 100, 2),
                }
            ).encode()
        out.append((None, user.encode(), value))
    return out


# ----------------------------------------------------------------------------- counting


def count_tables(request: dict[str, Any]) -> dict[str, Any]:
    """Rows and distinct offsets per partition in ClickHouse and Hudi (run in a child process)."""
    from eos_pipeline.adapters.clickhouse import ClickHouseSink

    topic, partitions = request["topic"], request["partitions"]
    out: dict[str, Any] = {"clickhouse": {}, "hudi": {}}
    if request.get("clickhouse_url"):
        with ClickHouseSink.connect(request["clickhouse_url"]) as sink:
            for p in partitions:
                offsets = sink.offsets_in_table(request["database"], request["table"], topic, p)
                out["clickhouse"][p] = [sum(n for _, n in offsets), len(offsets)]
    if request.get("hudi_path"):
        out["hudi"] = count_hudi(request["hudi_path"])
    return out


def count_hudi(table_path: str) -> dict[int, list[int]]:
    """Rows and distinct offsets per partition of a Hudi table's latest snapshot.

    Read with hudi-rs (no JVM: counting must not cost a Spark start), a reader independent of
    the Spark that wrote the table.
    """
    import pyarrow as pa
    from hudi import HudiTableBuilder

    batches = HudiTableBuilder.from_base_uri(table_path).build().read()
    table = pa.Table.from_batches(batches).select(["_partition", "_offset"])
    grouped = table.group_by("_partition").aggregate(
        [("_offset", "count"), ("_offset", "count_distinct")]
    )
    return {
        int(p): [int(n), int(d)]
        for p, n, d in zip(
            grouped["_partition"].to_pylist(),
            grouped["_offset_count"].to_pylist(),
            grouped["_offset_count_distinct"].to_pylist(),
            strict=True,
        )
    }


def count_in_child(request: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "eos_dev.demo", json.dumps(request)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"counting the tables failed:\n{done.stderr[-3000:]}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: {int(p): v for p, v in d.items()} for k, d in raw.items()}


# ----------------------------------------------------------------------------- dagster


#: Environment variable holding the Postgres URL of a Postgres-backed demo instance: the URL
#: (with its password) stays out of the dagster.yaml written to disk.
POSTGRES_URL_ENV = "EOS_DAGSTER_POSTGRES_URL"


def prepare_dagster_home(home: Path, postgres: bool = False) -> Path:
    """``DAGSTER_HOME`` with the project's ``dagster.yaml`` (concurrency rules included).

    With ``postgres`` the instance keeps runs, events and schedules in PostgreSQL (the URL is
    read from :data:`POSTGRES_URL_ENV` by every Dagster process), as the README advises for
    production; the default is Dagster's SQLite files under ``home``.
    """
    home.mkdir(parents=True, exist_ok=True)
    text = (REPO / "dagster.yaml").read_text()
    if postgres:
        text += (
            "\n# Written by `eos-pipeline demo --postgres-url`: storage in PostgreSQL.\n"
            "storage:\n  postgres:\n    postgres_url:\n"
            f"      env: {POSTGRES_URL_ENV}\n"
        )
    (home / "dagster.yaml").write_text(text)
    return home


def start_dagster(
    env: dict[str, str], port: int, log: Path, workspace: Path | None = None
) -> subprocess.Popen[bytes]:
    """``dagster dev`` in its own process group (so stopping it stops its daemon and runs).

    ``workspace`` defaults to the repository's ``workspace.yaml``.
    """
    exe = Path(sys.executable).with_name("dagster")
    workspace = workspace or REPO / "workspace.yaml"
    command = [str(exe) if exe.exists() else "dagster", "dev", "-w", str(workspace)]
    command += ["-h", "127.0.0.1", "-p", str(port)]
    # Started in DAGSTER_HOME: from anywhere else `dagster dev` warns that the repository's
    # dagster.yaml "will not be used" (it is not: the copy in DAGSTER_HOME is).
    cwd = env.get("DAGSTER_HOME") or REPO
    with log.open("ab") as out:
        return subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _code_location_failed(log: Path) -> bool:
    """Whether ``dagster dev`` logged that loading the code location failed (it keeps running)."""
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return False
    return re.search(r"dagster\.code_server - (\x1b\[[0-9;]*m)?ERROR", text) is not None


def stop_dagster(process: subprocess.Popen[bytes], timeout: float = 20.0) -> bool:
    """SIGTERM to the group dagster dev leads, then SIGKILL to the whole group if it has not
    ended in time; True if it ended by itself.

    Idle, `dagster dev` ends in 5-12 s on a loaded 2-core machine; seen once waiting over a
    minute (a sensor evaluation still talking to the stack). Killing is safe: every sink step
    is exact after a kill, and the demo stops Dagster only once nothing is in flight.
    """
    if process.poll() is not None:
        return True
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        LINGERING.clear()
        LINGERING.extend(_group_processes(process.pid))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        return False


#: The processes of Dagster's group still running when :func:`stop_dagster` had to kill them
#: (``pid command``), so the demo can say what held it.
LINGERING: list[str] = []


def _group_processes(group: int) -> list[str]:
    """``pid command`` of each process in process group ``group`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != group:  # after ")": state, ppid, pgrp
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        words = [a.decode(errors="replace") for a in argv if a][:6]
        found.append(f"{entry.name} {' '.join(w[:60] for w in words)}")
    return sorted(found)


def progress(instance: Any, config: Any, store: Any, ends: dict[int, int]) -> tuple[bool, str]:
    """Whether both sinks reached ``ends`` with no run in flight, and a one-line status."""
    import dagster as dg

    from eos_pipeline.adapters.hudi_timeline import latest_checkpoint
    from eos_pipeline.components.assets import CLICKHOUSE_SINK
    from eos_pipeline.core.dedup import Phase
    from eos_pipeline.core.positions import committed, sink_state

    pipeline = config.pipeline(PIPELINE)
    topic = pipeline.kafka.topics[0]
    done = True
    parts = []
    if pipeline.clickhouse is not None:
        records = store.read_many(pipeline.name, CLICKHOUSE_SINK, topic)
        at = 0
        for p, end in ends.items():
            state = sink_state(records[p].record) if p in records else None
            position = committed(state)
            if position is not None and state.phase is Phase.AFTER and position >= end:
                at += 1
        done &= at == len(ends)
        parts.append(f"clickhouse {at}/{len(ends)} partitions caught up")
    if pipeline.hudi is not None:
        checkpoint = latest_checkpoint(pipeline.hudi.path) or {}  # the table's, as the sensor
        at = sum(1 for tp, off in checkpoint.items() if off >= ends.get(tp.partition, 0))
        done &= at == len(ends)
        parts.append(f"hudi {at}/{len(ends)}")
    in_flight = instance.get_runs_count(
        dg.RunsFilter(
            statuses=[
                dg.DagsterRunStatus.QUEUED,
                dg.DagsterRunStatus.NOT_STARTED,
                dg.DagsterRunStatus.STARTING,
                dg.DagsterRunStatus.STARTED,
            ]
        )
    )
    failed = instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    parts.append(f"{in_flight} runs in flight, {failed} failed")
    return done and in_flight == 0, ", ".join(parts)


# ----------------------------------------------------------------------------- the job


def run_demo(
    config: StackConfig,
    args: argparse.Namespace,
    on_ready: Callable[[str, Any], None] | None = None,
) -> int:
    """The main job; ``on_ready(ui_url, instance)`` is called once both tables are caught up
    and counted, while the UI still runs (the browser test walks it then)."""
    say: Callable[[str], None] = lambda line: print(line, flush=True)  # noqa: E731
    began = time.monotonic()
    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    postgres_url = getattr(args, "postgres_url", None)
    home = prepare_dagster_home(Path(args.dagster_home).resolve(), postgres=bool(postgres_url))

    stack = Stack(config)
    stack.up()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "EOS_KAFKA_BOOTSTRAP": config.kafka_bootstrap,
        "EOS_ZOOKEEPER_HOSTS": config.zookeeper_hosts,
        "EOS_DEMO_DIR": str(work),
        "EOS_SENSOR_INTERVAL_SECONDS": str(args.sensor_interval),
    }
    if "EOS_SPARK_REMOTE" not in os.environ:
        # With the stack's Connect server runs are thin clients (no JVM each); without it each
        # Hudi run starts Spark in its own process.
        env["EOS_SPARK_REMOTE"] = config.spark_connect_url if config.spark else "local"
    if postgres_url:
        env[POSTGRES_URL_ENV] = postgres_url
        os.environ[POSTGRES_URL_ENV] = postgres_url  # this process reads the instance too
    if args.defs_dir:
        env["EOS_DEFS_DIR"] = str(Path(args.defs_dir).resolve())
    if not getattr(args, "verbose", False):
        logging.getLogger().setLevel(logging.WARNING)

    from eos_pipeline.components.project import load_project

    # what the code location will load, with the same variables
    pipelines = load_project(environ=env).config
    pipeline = pipelines.pipeline(PIPELINE)
    topic = pipeline.kafka.topics[0]
    kafka = KafkaSettings(pipeline.kafka.bootstrap_servers)
    create_topic(kafka, topic, args.partitions)
    seed = int(time.time())
    delivered = produce_all(idempotent_producer(kafka), topic, _events(args.records, seed))
    ends = end_offsets(kafka, topic)
    say(f"produced {len(delivered)} events to {topic} ({len(ends)} partitions); ends {ends}")

    import dagster as dg

    port = args.port or free_port()
    log = work / "dagster.log"
    # Create and migrate the instance's storage before `dagster dev` starts: its webserver,
    # daemon and code server would otherwise race to initialize the same fresh SQLite files
    # (seen as alembic "more than one head" in the code server, which then never loads).
    instance = dg.DagsterInstance.from_config(str(home))
    instance.upgrade(print_fn=lambda _msg: None)
    process = start_dagster(env, port, log)
    say(f"dagster dev started (pid {process.pid}, log {log})")
    say(f"Dagster UI: http://127.0.0.1:{port}")
    from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore

    store = KeeperStateStore(KeeperSettings(pipelines.keeper.hosts, pipelines.keeper.root))
    deadline = time.monotonic() + args.timeout
    last = ""
    ok = False
    try:
        store.start()
        while time.monotonic() < deadline:
            if process.poll() is not None:
                say(f"dagster dev exited with code {process.returncode}; see {log}")
                return 1
            if _code_location_failed(log):
                say(f"Dagster could not load the code location; the error is in {log}")
                return 1
            ok, status = progress(instance, pipelines, store, ends)
            if status != last:
                say(f"[{time.monotonic() - began:5.0f}s] {status}")
                last = status
            if ok:
                break
            time.sleep(2)
        if not ok:
            say(f"not caught up within {args.timeout:.0f}s ({last}); see {log} and the UI")
            return 1
        say("both tables caught up; counting rows per partition ...")
        counts = count_in_child(
            {
                "topic": topic,
                "partitions": sorted(ends),
                "clickhouse_url": pipelines.clickhouse.url if pipeline.clickhouse else None,
                "database": pipeline.clickhouse.database if pipeline.clickhouse else None,
                "table": pipeline.clickhouse.table if pipeline.clickhouse else None,
                "hudi_path": pipeline.hudi.path if pipeline.hudi else None,
            }
        )
        print_table(say, kafka, pipeline, ends, counts)
        say(f"done in {time.monotonic() - began:.0f}s.")
        if on_ready is not None:
            on_ready(f"http://127.0.0.1:{port}", instance)
        if args.keep_ui:
            say(f"the UI stays up at http://127.0.0.1:{port}; Ctrl-C stops it")
            with contextlib.suppress(KeyboardInterrupt):
                process.wait()
    finally:
        store.close()
        instance.dispose()
        stopping = time.monotonic()
        how = "" if stop_dagster(process) else " (killed: it did not end on SIGTERM)"
        if LINGERING:
            say("still running when killed: " + "; ".join(LINGERING))
        say(f"dagster stopped in {time.monotonic() - stopping:.1f}s{how}")
        if args.down:
            stack.down()
        else:
            say("the stack is still running; stop it with: eos-pipeline stack down")
    return 0


def print_table(
    say: Callable[[str], None],
    kafka: KafkaSettings,
    pipeline: Any,
    ends: dict[int, int],
    counts: dict[str, dict[int, list[int]]],
) -> None:
    from eos_pipeline.adapters.dlq import dead_letter_offsets
    from eos_pipeline.core.offsets import TopicPartition

    topic = pipeline.kafka.topics[0]
    dead = dead_letter_offsets(kafka, pipeline.dead_letter_topic, pipeline.name)
    say("")
    say(
        f"{'partition':>9} {'kafka end':>10} {'ch rows':>8} {'ch distinct':>12} "
        f"{'hudi rows':>10} {'hudi distinct':>14} {'dlq':>5}"
    )
    for p in sorted(ends):
        ch = counts["clickhouse"].get(p, [0, 0])
        hu = counts["hudi"].get(p, [0, 0])
        dlq = len(dead.get(TopicPartition(topic, p), set()))
        say(f"{p:>9} {ends[p]:>10} {ch[0]:>8} {ch[1]:>12} {hu[0]:>10} {hu[1]:>14} {dlq:>5}")
    total = sum(len(v) for v in dead.values())
    say(f"dead-letter topic {pipeline.dead_letter_topic}: {total} distinct source records")


if __name__ == "__main__":
    # Child process of the demo: count the tables, print one JSON line.
    print(json.dumps(count_tables(json.loads(sys.argv[1]))))
