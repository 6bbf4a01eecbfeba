"""The main job, end to end on the local stack (``eos-pipeline demo`` / ``make demo``).

1. bring the stack up (its schema registry included), create the demo's two topics and produce
   sample events to each: JSON to ``demo-events`` (a few malformed), Avro in Confluent's wire
   format to ``demo-avro`` (written by confluent-kafka's ``AvroSerializer`` against the stack's
   registry; a few with a bad magic byte or a schema id the registry does not know);
2. start ``dagster dev`` on the project's ``workspace.yaml`` with ``DAGSTER_HOME=.dagster_home``
   (the project's ``dagster.yaml``), and print the UI's URL;
3. let the sensors drive: the partitions sensor adds one partition per Kafka partition, the lag
   sensors request ClickHouse runs (one run over all lagging partitions on the chDB path) and
   one Hudi run over all lagging partitions (one commit), for each pipeline;
4. when every table is caught up with the end offsets fixed after producing (and no run is in
   flight), print per topic and partition: Kafka's end offset, ClickHouse rows and distinct
   offsets, Hudi rows and distinct offsets, and dead letters, then check it: both tables hold
   the same offsets, each once, none of them dead-lettered, and rows plus dead letters equal
   Kafka's end (:mod:`eos_dev.demo_exact`). A topic that is not exact fails the command.

Without ``--keep-ui`` the command then stops Dagster and ends; with it the UI stays up until
Ctrl-C. Running it again produces more events and moves only those.

The registry is the stack's unless ``EOS_REGISTRY_ADDRESS`` (``host:port``) names another one
serving the Confluent-compatible API at ``/apis/ccompat/v7``.

The tables are counted in a child process: chDB allows one process per data path, and the runs
Dagster launches must be able to open it afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import random
import re
import signal
import struct
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
#: The JSON pipeline (eos_pipeline/defs/demo) and the Avro one (eos_pipeline/defs/demo_avro).
PIPELINE = "demo"
ACTIONS = ["view", "cart", "buy"]
AVRO_PIPELINE = "demo_avro"
PIPELINES = (PIPELINE, AVRO_PIPELINE)
#: ``host:port`` of the registry the Avro pipeline reads (its defs.yaml renders the URL).
REGISTRY_ADDRESS_ENV = "EOS_REGISTRY_ADDRESS"

#: The Avro events' writer schema: the JSON events' fields, the action an enum.
AVRO_EVENT = json.dumps(
    {
        "type": "record",
        "name": "DemoEvent",
        "namespace": "eos.demo",
        "fields": [
            {"name": "event_id", "type": "long"},
            {"name": "user", "type": "string"},
            {"name": "action", "type": {"type": "enum", "name": "Action", "symbols": ACTIONS}},
            {"name": "amount", "type": "double"},
        ],
    }
)
#: A schema id no registry of the demo hands out (ids count up from 1).
UNKNOWN_SCHEMA_ID = 2**31 - 7

Produced = list[tuple[int | None, bytes | None, bytes | None]]


def _event(rng: random.Random, seed: int, i: int) -> dict[str, Any]:
    return {
        "event_id": seed * 1_000_000 + i,
        "user": f"user-{rng.randrange(50)}",
        "action": rng.choice(ACTIONS),
        "amount": round(rng.random() * 100, 2),
    }


def _events(count: int, seed: int) -> Produced:
    rng = random.Random(seed)
    out: Produced = []
    for i in range(count):
        event = _event(rng, seed, i)
        if i % 250 == 249:
            value = b'{"event_id": "not-a-number", "user": 1}'  # schema violation -> DLQ
        elif i % 333 == 332:
            value = b"\x00garbage"  # not JSON -> DLQ
        else:
            value = json.dumps(event).encode()
        out.append((None, event["user"].encode(), value))
    return out


def _avro_events(count: int, seed: int, registry_url: str, topic: str) -> Produced:
    """Avro events framed by confluent-kafka's serializer (it registers the schema), a few
    of them damaged in the framing: a bad magic byte (``BadFraming``) or a schema id the
    registry does not know (``UnknownSchemaId``), both dead letters."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    write = AvroSerializer(SchemaRegistryClient({"url": registry_url}), AVRO_EVENT)
    context = SerializationContext(topic, MessageField.VALUE)
    rng = random.Random(seed + 1)
    out: Produced = []
    for i in range(count):
        event = _event(rng, seed, i)
        value = write(event, context)
        if i % 50 == 7:
            value = b"\x01" + value[1:]
        elif i % 50 == 19:
            value = value[:1] + struct.pack(">I", UNKNOWN_SCHEMA_ID) + value[5:]
        out.append((None, event["user"].encode(), value))
    return out


# ----------------------------------------------------------------------------- counting


def count_tables(request: dict[str, Any]) -> dict[str, Any]:
    """Rows and distinct offsets per partition in ClickHouse and Hudi (run in a child process);
    with ``offsets`` in the request also the distinct offsets themselves (``*_offsets``)."""
    from eos_pipeline.adapters.clickhouse import ClickHouseSink

    topic, partitions = request["topic"], request["partitions"]
    with_offsets = bool(request.get("offsets"))
    out: dict[str, Any] = {"clickhouse": {}, "hudi": {}}
    if with_offsets:
        out.update(clickhouse_offsets={}, hudi_offsets={})
    if request.get("clickhouse_url"):
        with ClickHouseSink.connect(request["clickhouse_url"]) as sink:
            for p in partitions:
                offsets = sink.offsets_in_table(request["database"], request["table"], topic, p)
                out["clickhouse"][p] = [sum(n for _, n in offsets), len(offsets)]
                if with_offsets:
                    out["clickhouse_offsets"][p] = sorted(o for o, _ in offsets)
    if request.get("hudi_path"):
        out["hudi"], offsets_by = hudi_offsets(request["hudi_path"])
        if with_offsets:
            out["hudi_offsets"] = offsets_by
    return out


def hudi_offsets(table_path: str) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Rows and distinct offsets per partition of a Hudi table's latest snapshot, and the
    distinct offsets of each partition.

    Read with hudi-rs (no JVM: counting must not cost a Spark start), a reader independent of
    the Spark that wrote the table.
    """
    import pyarrow as pa
    from hudi import HudiTableBuilder

    batches = HudiTableBuilder.from_base_uri(table_path).build().read()
    table = pa.Table.from_batches(batches).select(["_partition", "_offset"])
    counts: dict[int, list[int]] = {}
    offsets: dict[int, set[int]] = {}
    for p, o in zip(table["_partition"].to_pylist(), table["_offset"].to_pylist(), strict=True):
        counts.setdefault(int(p), [0, 0])[0] += 1
        offsets.setdefault(int(p), set()).add(int(o))
    for p, seen in offsets.items():
        counts[p][1] = len(seen)
    return counts, {p: sorted(seen) for p, seen in offsets.items()}


def count_in_child(request: dict[str, Any]) -> dict[str, Any]:
    return count_many_in_child([request])[0]


def count_many_in_child(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`count_tables` of each request, in one child process."""
    done = subprocess.run(
        [sys.executable, "-m", "eos_dev.demo", json.dumps(requests)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"counting the tables failed:\n{done.stderr[-3000:]}")
    raws = json.loads(done.stdout.strip().splitlines()[-1])
    return [{k: {int(p): v for p, v in d.items()} for k, d in raw.items()} for raw in raws]


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


def progress(
    instance: Any, config: Any, store: Any, ends: dict[int, int], pipeline: str = PIPELINE
) -> tuple[bool, str]:
    """Whether both sinks of ``pipeline`` reached ``ends`` with no run in flight, and a
    one-line status."""
    return progress_all(instance, config, store, {pipeline: ends})


def progress_all(
    instance: Any, config: Any, store: Any, ends_by: dict[str, dict[int, int]]
) -> tuple[bool, str]:
    """:func:`progress` over several pipelines (each named in the status when more than one)."""
    import dagster as dg

    done = True
    parts = []
    for name, ends in ends_by.items():
        caught_up, said = _sinks_caught_up(config, store, name, ends)
        done &= caught_up
        parts.append(said if len(ends_by) == 1 else f"{name}: {said}")
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
    return done and in_flight == 0, ("; " if len(ends_by) > 1 else ", ").join(parts)


def _sinks_caught_up(config: Any, store: Any, name: str, ends: dict[int, int]) -> tuple[bool, str]:
    from eos_pipeline.adapters.hudi_timeline import latest_checkpoint
    from eos_pipeline.components.assets import CLICKHOUSE_SINK
    from eos_pipeline.core.dedup import Phase
    from eos_pipeline.core.positions import committed, sink_state

    pipeline = config.pipeline(name)
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
    return done, ", ".join(parts)


# ----------------------------------------------------------------------------- the job


def run_demo(
    config: StackConfig,
    args: argparse.Namespace,
    on_ready: Callable[[str, Any], None] | None = None,
) -> int:
    """The main job; ``on_ready(ui_url, instance)`` is called once every table is caught up
    and counted, while the UI still runs (the browser test walks it then)."""
    say: Callable[[str], None] = lambda line: print(line, flush=True)  # noqa: E731
    began = time.monotonic()
    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    postgres_url = getattr(args, "postgres_url", None)
    home = prepare_dagster_home(Path(args.dagster_home).resolve(), postgres=bool(postgres_url))

    registry_address = os.environ.get(REGISTRY_ADDRESS_ENV)
    if not registry_address:  # the stack's registry, started with it
        config = dataclasses.replace(config, registry=True)
        registry_address = f"{config.host}:{config.registry_port}"
    stack = Stack(config)
    stack.up()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "EOS_KAFKA_BOOTSTRAP": config.kafka_bootstrap,
        "EOS_ZOOKEEPER_HOSTS": config.zookeeper_hosts,
        "EOS_DEMO_DIR": str(work),
        "EOS_SENSOR_INTERVAL_SECONDS": str(args.sensor_interval),
        REGISTRY_ADDRESS_ENV: registry_address,
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
    present = {p.name for p in pipelines.pipelines}
    names = [n for n in PIPELINES if n in present]  # a --defs-dir may hold only the first
    kafka = KafkaSettings(pipelines.pipeline(names[0]).kafka.bootstrap_servers)
    seed = int(time.time())
    ends_by: dict[str, dict[int, int]] = {}
    for name in names:
        pipeline = pipelines.pipeline(name)
        topic = pipeline.kafka.topics[0]
        create_topic(kafka, topic, args.partitions)
        if name == AVRO_PIPELINE:
            assert pipeline.registry is not None
            events = _avro_events(args.records, seed, pipeline.registry.url, topic)
        else:
            events = _events(args.records, seed)
        delivered = produce_all(idempotent_producer(kafka), topic, events)
        ends_by[name] = end_offsets(kafka, topic)
        say(
            f"produced {len(delivered)} {pipeline.format} events to {topic} "
            f"({args.partitions} partitions); ends {ends_by[name]}"
        )

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
            ok, status = progress_all(instance, pipelines, store, ends_by)
            if status != last:
                say(f"[{time.monotonic() - began:5.0f}s] {status}")
                last = status
            if ok:
                break
            time.sleep(2)
        if not ok:
            say(f"not caught up within {args.timeout:.0f}s ({last}); see {log} and the UI")
            return 1
        say("every table caught up; counting rows per partition ...")
        counted = count_many_in_child(
            [_count_request(pipelines, n, ends_by[n], offsets=True) for n in names]
        )
        exact = True
        for name, counts in zip(names, counted, strict=True):
            exact &= print_table(say, kafka, pipelines.pipeline(name), ends_by[name], counts)
        say(f"done in {time.monotonic() - began:.0f}s.")
        if not exact:
            return 1
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


def _count_request(
    config: Any, name: str, ends: dict[int, int], offsets: bool = False
) -> dict[str, Any]:
    """What :func:`count_tables` needs to count pipeline ``name``'s tables."""
    pipeline = config.pipeline(name)
    clickhouse, hudi = pipeline.clickhouse, pipeline.hudi
    return {
        "topic": pipeline.kafka.topics[0],
        "partitions": sorted(ends),
        "clickhouse_url": config.clickhouse.url if clickhouse else None,
        "database": clickhouse.database if clickhouse else None,
        "table": clickhouse.table if clickhouse else None,
        "hudi_path": hudi.path if hudi else None,
        "offsets": offsets,
    }


def print_table(
    say: Callable[[str], None],
    kafka: KafkaSettings,
    pipeline: Any,
    ends: dict[int, int],
    counts: dict[str, dict[int, list[int]]],
) -> bool:
    """Print the pipeline's table per partition and whether its topic is exact (returned)."""
    from eos_dev.demo_exact import judge
    from eos_pipeline.adapters.dlq import read_dead_letter_log

    topic = pipeline.kafka.topics[0]
    letters = read_dead_letter_log(kafka, pipeline.dead_letter_topic)
    verdict = judge(pipeline.name, topic, ends, counts, letters)
    say("")
    say(f"pipeline {pipeline.name}: topic {topic} ({pipeline.format})")
    say(
        f"{'partition':>9} {'kafka end':>10} {'ch rows':>8} {'ch distinct':>12} "
        f"{'hudi rows':>10} {'hudi distinct':>14} {'dlq':>5}"
    )
    for p, (end, ch_rows, ch_distinct, hu_rows, hu_distinct, dlq) in verdict.rows.items():
        say(
            f"{p:>9} {end:>10} {ch_rows:>8} {ch_distinct:>12} {hu_rows:>10} {hu_distinct:>14} "
            f"{dlq:>5}"
        )
    total = sum(verdict.classes.values())
    classes = ", ".join(f"{c} {n}" for c, n in sorted(verdict.classes.items())) or "none"
    say(
        f"dead-letter topic {pipeline.dead_letter_topic}: {total} distinct source records "
        f"({classes})"
    )
    if verdict.exact:
        say(
            f"{topic}: exact (both tables hold the same offsets, each once; with the dead "
            "letters they are every record up to Kafka's end)"
        )
    else:
        say(f"{topic}: NOT exact: " + "; ".join(verdict.problems))
    return verdict.exact


if __name__ == "__main__":
    # Child process of the demo: count the tables, print one JSON line (a list for a list).
    asked = json.loads(sys.argv[1])
    if isinstance(asked, list):
        print(json.dumps([count_tables(r) for r in asked]))
    else:
        print(json.dumps(count_tables(asked)))
