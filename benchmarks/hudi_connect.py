"""``python -m benchmarks.hudi_connect``: one Hudi run as Dagster starts it, many ways (issue 14).

A Dagster run is a fresh process. This tool starts its own stack on free ports (ZooKeeper, Kafka
and the Spark Connect server of ``eos-pipeline stack up``). Per round it creates a topic,
produces ``--records`` benchmark records (1.6 KB JSON), and times, each in a fresh process:

* **new table**: the table's first run (once per table): a new table gets an empty commit that
  starts its timeline, then the data commit;
* **existing table**: after ``--records`` more are produced, the next run into that table (the
  typical run: a table's first run happens once);

each in these modes:

* **server**: a thin client of the Connect server: connect, one ``HudiTableSync`` run, then a
  run with nothing to do; for the existing table also another fresh process that only connects
  and finds nothing to do (a Dagster run of a table that is caught up: "server, idle");
* **server, table's session**: the same, but every run of the table joins one server session
  (a ``session_id`` in the URL, as ``connect(session_id=...)`` adds), so the server's Python
  workers of the earlier run are reused (a new session starts its own);
* **in-process**: the same with Spark inside the process (``local[2]``, fast-start JIT, as
  ``EOS_SPARK_REMOTE=local`` runs get): the JVM start is part of every run;
* **server, table's session, auto**: the same with the pipeline setting ``operation: auto``
  (``bulk_insert`` from ``--bulk-insert-min-records`` planned records on, ``upsert`` below);
* **HoodieStreamer**: one ``spark-submit`` of Hudi's own streamer (a new table, then a second
  sync into it, which resumes from its checkpoint), with each of ``--streamer-operations``; the
  first (by default upsert, its default) is the ratio's base.

``--modes`` picks the project's modes, ``--operation`` their operation (auto's excepted).

Every table is then read with hudi-rs: each record exactly once, or the tool fails. Runs with
work are split into the plan (table checkpoint, Kafka offsets), the Spark job that reads Kafka,
parses and counts (``count_read``) and the Hudi write with its commit (``write_transaction``).
CPU seconds: the run's process and its children (an in-process JVM and its Python workers),
plus, for server runs, what the Connect server's JVM and its Python workers used meanwhile;
HoodieStreamer's: its ``spark-submit`` JVM. The 1-minute load average is taken at each start.
"x HS": HoodieStreamer's best wall seconds for the same kind of run (new or existing table) over
the row's best. Prints a table of the best round per row and one JSON line. Figures are
wall-clock: run it idle.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.data import SCHEMA, make_values
from benchmarks.local_stack import private_stack
from benchmarks.spark_phase import _avro_schema
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.core.planning import DEFAULT_BULK_INSERT_MIN_RECORDS

TOPIC = "bench"


def child(job: dict[str, Any]) -> dict[str, Any]:
    """One run and one nothing-to-do run in this (fresh) process; seconds of each phase.

    ``idle_only``: only the nothing-to-do run (the table is caught up already).
    """
    began = time.perf_counter()
    from unittest import mock

    from benchmarks.hudi_profile import PhaseTimer
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
    from eos_pipeline.sinks import hudi as hudi_sink
    from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
    from eos_pipeline.sinks.source import OneCluster

    if job["remote"]:
        from eos_pipeline.adapters.spark_remote import connect

        url = job["remote"]
        if job.get("session"):  # as connect(session_id=stable_session_id(table)) would
            url += f"/;session_id={uuid.uuid5(uuid.NAMESPACE_URL, job['table'])}"
        spark = connect(url)
    else:
        from pyspark.sql import SparkSession

        from eos_pipeline.adapters.spark import spark_conf

        builder = SparkSession.builder
        for key, value in spark_conf("local[2]", quick_start=True).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    ready = time.perf_counter()
    kafka = KafkaSettings(job["bootstrap"])
    topic = job["topic"]
    spec = HudiTableSpec(
        "bench",
        topic,
        job["table"],
        "bench",
        SCHEMA,
        hudi_options=SMALL_TABLE_OPTIONS,
        operation=job.get("operation", "upsert"),
        bulk_insert_min_records=job.get("bulk_insert_min_records", DEFAULT_BULK_INSERT_MIN_RECORDS),
    )
    sync = HudiTableSync(
        spec, OneCluster(kafka), spark, DeadLetterWriter(kafka, f"{topic}.dlq", "bench")
    )
    timer = PhaseTimer()
    timed = ("count_read", "write_transaction")
    with contextlib.ExitStack() as stack:
        for name in timed:
            wrapped = timer.wrap(name, getattr(hudi_sink, name))
            stack.enter_context(mock.patch.object(hudi_sink, name, wrapped))
        report = sync.run() if not job.get("idle_only") else None
    first = time.perf_counter()
    empty = sync.run()
    done = time.perf_counter()
    assert empty.instant_time is None, "a second run right after must find nothing to do"
    cpu = _tree_cpu(os.getpid())  # with an in-process JVM and its Python workers
    spark.stop()
    phases = {f"{k}_s": round(v, 2) for k, v in timer.seconds.items()}
    return {
        "spark_ready_s": round(ready - began, 2),
        "run_s": round(first - ready, 2),
        "records": report.total_records_read if report else 0,
        "operation": report.operation if report else None,
        "nothing_to_do_s": round(done - first, 2),
        "tree_cpu_s": round(cpu, 2),
        **phases,
        "plan_s": round(first - ready - sum(timer.seconds.values()), 2) if report else 0.0,
    }


def _tree_cpu(pid: int | None) -> float:
    """CPU seconds of ``pid`` and its live descendants, with their reaped children (Linux)."""
    if pid is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        if current in stats:  # utime, stime, cutime, cstime
            total += sum(int(v) for v in stats[current][11:15])
        todo.extend(children.get(current, []))
    return total / tick


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_child(job: dict[str, Any], server_pid: int | None) -> dict[str, Any]:
    load = round(os.getloadavg()[0], 1)
    began, server = time.perf_counter(), _tree_cpu(server_pid)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.hudi_connect", "--child", json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"child failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = round(time.perf_counter() - began, 2)
    used = result.pop("tree_cpu_s") + (_tree_cpu(server_pid) - server if job["remote"] else 0.0)
    result.update(cpu_s=round(used, 2), load_1m=load)
    return result


def _rows(table: str, columns: tuple[str, ...]) -> tuple[int, int]:
    """Rows of the table's snapshot, and distinct values of ``columns`` among them (hudi-rs)."""
    import pyarrow as pa
    from hudi import HudiTableBuilder

    data = pa.Table.from_batches(HudiTableBuilder.from_base_uri(table).build().read())
    return data.num_rows, len(set(zip(*(data[c].to_pylist() for c in columns), strict=True)))


def _streamer(
    bootstrap: str, topic: str, work: Path, name: str, operation: str = "upsert"
) -> dict[str, Any]:
    from eos_pipeline_tests.support.hoodie_streamer import StreamerTable, run_streamer

    table = StreamerTable(
        topic=topic,
        table_path=str(work / name),
        table_name=name,
        avro_schema=_avro_schema(),
        record_key_fields=("event_id",),
        ordering_field="event_id",
        operation=operation.upper(),
    )
    load, cpu = round(os.getloadavg()[0], 1), _children_cpu()
    seconds = run_streamer(table, bootstrap, work / f"{name}-work").seconds
    return {
        "process_s": round(seconds, 2),
        "cpu_s": round(_children_cpu() - cpu, 2),
        "load_1m": load,
    }


#: --modes key: (row name, through the Connect server, in the table's own server session, the
#: project's operation: None for --operation)
MODES: dict[str, tuple[str, bool, bool, str | None]] = {
    "server": ("server", True, False, None),
    "session": ("server, table's session", True, True, None),
    "in-process": ("in-process", False, False, None),
    "auto": ("server, table's session, auto", True, True, "auto"),
}
KINDS = ("new table", "existing table")


def _rows_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The table's rows in print order, for the modes and streamer operations asked for."""
    rows: list[str] = []
    for kind in KINDS:
        rows += [f"{MODES[m][0]}, {kind}" for m in args.modes]
        rows += [_streamer_row(op, args, kind) for op in args.streamer_operations]
    if "server" in args.modes:
        rows.append("server, idle")
    return tuple(rows)


def _streamer_row(operation: str, args: argparse.Namespace, kind: str) -> str:
    """``HoodieStreamer, <kind>`` for the ratio's base operation, with the operation otherwise."""
    if operation == args.streamer_operations[0]:
        return f"HoodieStreamer, {kind}"
    return f"HoodieStreamer {operation}, {kind}"


def _round(
    config: Any, kafka: KafkaSettings, work: Path, r: int, args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """One round: a new topic, a new table per mode, then a run of each into its table."""
    topic = f"{TOPIC}_{r}"
    create_topic(kafka, topic, args.partitions)
    server_pid = _server_pid(config)
    producer = idempotent_producer(kafka)
    out: dict[str, dict[str, Any]] = {}
    for n, kind in enumerate(KINDS):
        # event_id counts from 0 in make_values: the second batch takes the next ids
        values = make_values(args.records * (n + 1))[args.records * n :]
        produce_all(producer, topic, [(i % args.partitions, None, v) for i, v in enumerate(values)])
        expected = args.records * (n + 1)
        for mode, remote, shared, operation in (MODES[m] for m in args.modes):
            url = config.spark_connect_url if remote else None
            table = str(work / f"{mode}-{r}")
            job = {"remote": url, "bootstrap": config.kafka_bootstrap, "table": table}
            job["session"] = shared
            job["operation"] = operation or args.operation
            job["bulk_insert_min_records"] = args.bulk_insert_min_records
            result = _run_child({**job, "topic": topic}, server_pid if remote else None)
            got = _rows(table, ("_partition", "_offset"))
            assert got == (expected, expected), f"{mode}, {kind}: (rows, offsets) {got}"
            assert result["records"] == args.records, f"{mode}, {kind}: {result}"
            out[f"{mode}, {kind}"] = result
            if remote and not shared and n == 1:  # a fresh client of a caught-up table
                job.update(topic=topic, idle_only=True)
                out["server, idle"] = _run_child(job, server_pid)
        for operation in args.streamer_operations:
            name = f"streamer_{operation}_{r}"
            row = _streamer_row(operation, args, kind)
            out[row] = _streamer(config.kafka_bootstrap, topic, work, name, operation)
            got = _rows(str(work / name), ("event_id",))
            assert got == (expected, expected), f"{row}: (rows, ids) {got}"
    return out


def _server_pid(config: Any) -> int | None:
    try:
        return int((config.state_dir / "spark-connect" / "pid").read_text().strip())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.hudi_connect",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag, default, text in (
        ("--records", 1000, "records per run"),
        ("--partitions", 4, "partitions of each round's topic"),
        ("--rounds", 1, "rounds; the best run of each row is kept"),
    ):
        parser.add_argument(flag, type=int, default=default, help=f"{text} (default {default})")
    parser.add_argument(
        "--operation",
        choices=("upsert", "insert", "bulk_insert"),
        default="upsert",
        help="Hudi write operation of the project's fixed-operation runs (default upsert, "
        "HoodieStreamer's default; insert skips the index lookup; bulk_insert also the "
        "small-file merge). The product's own default, auto, is the 'auto' mode's row",
    )
    parser.add_argument(
        "--bulk-insert-min-records",
        type=int,
        default=DEFAULT_BULK_INSERT_MIN_RECORDS,
        help="the auto mode's threshold: bulk_insert from this many planned records on "
        f"(default {DEFAULT_BULK_INSERT_MIN_RECORDS}, the product's)",
    )
    parser.add_argument(
        "--streamer-operations",
        type=lambda text: text.split(","),
        default=None,
        help="HoodieStreamer's operations, comma-separated, one row each; the first is the "
        "ratio's base (default: --operation where HoodieStreamer has it, else upsert)",
    )
    parser.add_argument(
        "--modes",
        type=lambda text: text.split(","),
        default=list(MODES),
        help=f"the project's modes, comma-separated, of {', '.join(MODES)} (default all)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.streamer_operations is None:
        args.streamer_operations = [args.operation if args.operation == "insert" else "upsert"]
    bad = [m for m in args.modes if m not in MODES] + [
        o for o in args.streamer_operations if o not in ("upsert", "insert", "bulk_insert")
    ]
    if bad:
        parser.error(f"unknown mode or operation: {bad}")
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    work = Path(tempfile.mkdtemp(prefix="eos-hudi-connect-bench-"))
    rows: dict[str, list[dict[str, Any]]] = {row: [] for row in _rows_of(args)}
    began = time.perf_counter()
    try:
        with private_stack(work, spark=True) as config:
            server_up = round(time.perf_counter() - began, 1)
            kafka = KafkaSettings(config.kafka_bootstrap)
            for r in range(args.rounds):
                for row, result in _round(config, kafka, work, r, args).items():
                    rows[row].append(result)
    finally:  # the stack's Kafka log and the tables: hundreds of MB at 100,000 records
        shutil.rmtree(work, ignore_errors=True)
    best = {m: min(rs, key=lambda x: x["process_s"]) for m, rs in rows.items()}
    for row, b in best.items():
        kind = "existing table" if "existing" in row or "idle" in row else "new table"
        b["streamer_ratio"] = round(
            best[f"HoodieStreamer, {kind}"]["process_s"] / b["process_s"], 2
        )
    print(f"stack up with the Connect server: {server_up} s; {args.records} records per run")
    columns = ("spark_ready_s", "plan_s", "count_read_s", "write_transaction_s", "nothing_to_do_s")
    head = ("process s", "CPU s", "Spark ready", "plan", "read+parse", "write", "nothing", "x HS")
    print(f"{'row':<44}" + "".join(f"{h:>12}" for h in head) + "  operation")
    for row, b in best.items():
        cells = [b["process_s"], b["cpu_s"], *(b.get(c, "-") for c in columns)]
        cells.append(b["streamer_ratio"])
        print(
            f"{row:<44}" + "".join(f"{c!s:>12}" for c in cells) + f"  {b.get('operation') or '-'}"
        )
    loads = [r["load_1m"] for rs in rows.values() for r in rs]
    summary = {
        "records": args.records,
        "operation": args.operation,
        "streamer_operations": args.streamer_operations,
        "stack_up_s": server_up,
        "load_1m": [round(min(loads), 1), round(max(loads), 1)],
        "best": best,
        "all": rows,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
