"""``python -m benchmarks.hudi_connect``: one Hudi run as Dagster starts it, three ways (issue 14).

A Dagster run is a fresh process. This tool starts its own stack on free ports (ZooKeeper, Kafka
and the Spark Connect server of ``eos-pipeline stack up``), produces ``--records`` benchmark
records (1.6 KB JSON) once, and then, per round, times each of:

* **server**: a fresh process, a thin client of the Connect server: connect, one
  ``HudiTableSync`` run over all records into a new table, then a run with nothing to do; then
  another fresh process that only connects and finds nothing to do (a Dagster run of a table
  that is caught up);
* **in-process**: the same in a fresh process with Spark inside it (``local[2]``, fast-start
  JIT, as ``EOS_SPARK_REMOTE=local`` runs get): the JVM start is part of the run;
* **HoodieStreamer**: one ``spark-submit`` of Hudi's own streamer into a new table.

Each table is then counted with hudi-rs (every record exactly once, or the tool fails). The runs
with work are split into the plan (table checkpoint, Kafka offsets), the Spark job that reads
Kafka, parses and counts (``count_read``) and the Hudi write with its commit
(``write_transaction``). Prints a table and one JSON line. Run it on an idle machine: the figures
are wall-clock seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
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

    if job["remote"]:
        from eos_pipeline.adapters.spark_remote import connect

        spark = connect(job["remote"])
    else:
        from pyspark.sql import SparkSession

        from eos_pipeline.adapters.spark import spark_conf

        builder = SparkSession.builder
        for key, value in spark_conf("local[2]", quick_start=True).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    ready = time.perf_counter()
    kafka = KafkaSettings(job["bootstrap"])
    spec = HudiTableSpec(
        "bench", TOPIC, job["table"], "bench", SCHEMA, hudi_options=SMALL_TABLE_OPTIONS
    )
    sync = HudiTableSync(spec, kafka, spark, DeadLetterWriter(kafka, f"{TOPIC}.dlq", "bench"))
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
    spark.stop()
    phases = {f"{k}_s": round(v, 2) for k, v in timer.seconds.items()}
    return {
        "spark_ready_s": round(ready - began, 2),
        "run_s": round(first - ready, 2),
        "records": report.total_records_read if report else 0,
        "nothing_to_do_s": round(done - first, 2),
        **phases,
        "plan_s": round(first - ready - sum(timer.seconds.values()), 2) if report else 0.0,
    }


def _run_child(job: dict[str, Any]) -> dict[str, Any]:
    began = time.perf_counter()
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
    return result


def _distinct(table: str, columns: tuple[str, ...]) -> int:
    import pyarrow as pa
    from hudi import HudiTableBuilder

    data = pa.Table.from_batches(HudiTableBuilder.from_base_uri(table).build().read())
    return len(set(zip(*(data[c].to_pylist() for c in columns), strict=True)))


def _streamer(bootstrap: str, work: Path, name: str) -> float:
    from eos_pipeline_tests.support.hoodie_streamer import StreamerTable, run_streamer

    table = StreamerTable(
        topic=TOPIC,
        table_path=str(work / name),
        table_name=name,
        avro_schema=_avro_schema(),
        record_key_fields=("event_id",),
        ordering_field="event_id",
        operation="UPSERT",
    )
    return run_streamer(table, bootstrap, work / f"{name}-work").seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hudi_connect", description=__doc__)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1, help="rounds; the best of each is kept")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    work = Path(tempfile.mkdtemp(prefix="eos-hudi-connect-bench-"))
    rows: dict[str, list[dict[str, Any]]] = {
        "server": [],
        "in-process": [],
        "streamer": [],
        "server, idle": [],
    }
    began = time.perf_counter()
    try:
        with private_stack(work, spark=True) as config:
            server_up = round(time.perf_counter() - began, 1)
            kafka = KafkaSettings(config.kafka_bootstrap)
            create_topic(kafka, TOPIC, args.partitions)
            values = make_values(args.records)
            records = [(i % args.partitions, None, v) for i, v in enumerate(values)]
            produce_all(idempotent_producer(kafka), TOPIC, records)
            for r in range(args.rounds):
                for mode, remote in (("server", config.spark_connect_url), ("in-process", None)):
                    table = str(work / f"{mode}-{r}")
                    job = {"remote": remote, "bootstrap": config.kafka_bootstrap, "table": table}
                    result = _run_child(job)
                    got = _distinct(table, ("_partition", "_offset"))
                    assert got == args.records, (
                        f"{mode}: {got} distinct offsets, not {args.records}"
                    )
                    rows[mode].append(result)
                    if remote:  # a fresh thin client of a caught-up table: nothing to do
                        idle = _run_child({**job, "idle_only": True})
                        rows["server, idle"].append(idle)
                name = f"streamer_{r}"
                seconds = _streamer(config.kafka_bootstrap, work, name)
                got = _distinct(str(work / name), ("event_id",))
                assert got == args.records, f"HoodieStreamer: {got} rows, not {args.records}"
                rows["streamer"].append({"process_s": round(seconds, 2)})
    finally:  # the stack's Kafka log and the tables: hundreds of MB at 100,000 records
        shutil.rmtree(work, ignore_errors=True)
    best = {m: min(rs, key=lambda x: x["process_s"]) for m, rs in rows.items()}
    streamer_s = best["streamer"]["process_s"]
    print(f"stack up with the Connect server: {server_up} s; {args.records} records")
    columns = ("spark_ready_s", "run_s", "plan_s", "count_read_s", "write_transaction_s")
    print(
        f"{'mode':<14}{'process s':>10}{'Spark ready':>12}{'run s':>8}{'plan':>7}"
        f"{'read+parse':>11}{'write':>7}{'nothing s':>10}"
    )
    for mode, b in best.items():
        cells = "".join(
            f"{b.get(c, '-'):>{w}}" for c, w in zip(columns, (12, 8, 7, 11, 7), strict=True)
        )
        print(f"{mode:<14}{b['process_s']:>10}{cells}{b.get('nothing_to_do_s', '-'):>10}")
    ratio = round(streamer_s / best["server"]["process_s"], 2)
    print(f"HoodieStreamer / server per run: {ratio} x")
    print(json.dumps({"records": args.records, "stack_up_s": server_up, "best": best, "all": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
