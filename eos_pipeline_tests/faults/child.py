"""The process the fault tests kill: one sink run, started with ``python -m``.

A fault test must kill a *real* process (SIGKILL: no ``finally``, no flushed buffers, a chDB
engine that never closed its files), so the sink runs here, in a child, and the test only starts
it and reads the data afterwards. Usage::

    python -m eos_pipeline_tests.faults.child <command> '<json job>'

Commands:

* ``clickhouse``: run :class:`ClickHousePartitionSync` over ``partitions`` and print its reports;
* ``rows``: print the values of ``columns`` per ``partition:offset`` (a table that evolved);
* ``offsets``: print ``{partition: {offset: rows}}`` of the table (the proof, read by a process
  of its own because chDB allows one data path per process and the test process may already run
  the engine on another path);
* ``hudi``: run :class:`HudiTableSync` once and print its report;
* ``hudi-offsets``: print the Hudi table's ``_offset`` counts per partition;
* ``replay``: replay ``[replay_start, replay_end)`` of ``replay_partition`` into ClickHouse
  (:class:`ClickHouseReplay`) and print its report.

The armed step comes from ``EOS_FAULT_STEP`` (read by :mod:`eos_pipeline_tests.support.faults`,
whose hooks each command passes to the sink it builds);
``EOS_FAULT_SKIP=n`` lets the first ``n`` passes of that step through, so a kill can land in any
batch of a run, not only the first one. ``EOS_FAULT_PAUSE_STEP`` with ``EOS_FAULT_PAUSE_FILE``
holds the run at the first pass of a step until the test releases it. ``EOS_FAULT_STEP=mid_insert``
arms a watcher that kills the process while ClickHouse writes a part
(:func:`eos_pipeline_tests.support.faults.kill_when_clickhouse_inserts`); ``mid_hudi_write`` and
the Spark task steps work in the ``hudi`` command as in the Hudi fault tests.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from eos_pipeline_tests.support.faults import (
    armed_step,
    fault_point,
    hudi_fault,
    kill_when_clickhouse_inserts,
)

RESULT_PREFIX = "EOS-RESULT "


def _emit(payload: Any) -> None:
    print(RESULT_PREFIX + json.dumps(payload), flush=True)


def _counting_fault() -> Any:
    """``fault_point``, but the armed step fires only after ``EOS_FAULT_SKIP`` passes."""
    skip = int(os.environ.get("EOS_FAULT_SKIP", "0"))
    seen: dict[str, int] = {}

    pause_step = os.environ.get("EOS_FAULT_PAUSE_STEP")
    pause_file = os.environ.get("EOS_FAULT_PAUSE_FILE", "")

    def hook(step: str) -> None:
        seen[step] = seen.get(step, 0) + 1
        if step == pause_step and seen[step] == 1:
            _pause(pause_file)
        if step == armed_step() and seen[step] > skip:
            fault_point(step)

    return hook


def _pause(release_file: str) -> None:
    """Stop at a step until the test creates ``release_file`` (``<file>.reached`` says we wait).

    How a test makes two writers overlap exactly where it wants, e.g. both holding a lease
    before either writes, or a zombie stalled between its insert and its keeper write.
    """
    Path(f"{release_file}.{os.getpid()}.reached").touch()
    logging.getLogger(__name__).info("paused; waiting for %s", release_file)
    deadline = time.monotonic() + 120
    while not Path(release_file).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never released: {release_file}")
        time.sleep(0.01)


def _job_schema(job: dict[str, Any]) -> Any:
    """The job's columns: a JSON mapping, or (``avro_schema``, ``schema_id``, ``registry``) a
    table built from that Avro writer schema of a registry subject, which then evolves."""
    from eos_pipeline.core.schema import TableSchema

    if "avro_schema" not in job:
        return TableSchema.from_mapping(job["schema"])
    from eos_pipeline_tests.support.evolution import pinned_schema

    return pinned_schema(job["registry"], job["avro_schema"], job["schema_id"])


def _clickhouse_setup(job: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Kafka settings, the chDB sink (table ensured) and the table spec a ClickHouse job names."""
    from eos_pipeline.adapters.clickhouse import ClickHouseSink
    from eos_pipeline.adapters.kafka import KafkaSettings
    from eos_pipeline.sinks.clickhouse import ClickHouseTableSpec

    schema = _job_schema(job)
    kafka = KafkaSettings(job["bootstrap"])
    sink = ClickHouseSink.connect(f"chdb://{job['chdb_path']}")
    sink.ensure_table(job["database"], job["table"], schema)
    spec = ClickHouseTableSpec(
        pipeline=job["pipeline"],
        database=job["database"],
        table=job["table"],
        schema=schema,
        max_records=job.get("max_records", 100_000),
    )
    return kafka, sink, spec


def _clickhouse(job: dict[str, Any]) -> None:
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
    from eos_pipeline.core.offsets import TopicPartition
    from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync

    kafka, sink, spec = _clickhouse_setup(job)
    kill_when_clickhouse_inserts(job["chdb_path"])  # only when mid_insert is the armed step
    settings = KeeperSettings(hosts=job["zookeeper"], root=job["keeper_root"])
    reports = {}
    with KeeperStateStore(settings) as store:
        sync = ClickHousePartitionSync(
            spec,
            kafka,
            store,
            sink,
            DeadLetterWriter(kafka, job["dlq_topic"], job["pipeline"]),
            writer=job.get("writer"),
            fault=_counting_fault(),
        )
        for partition in job["partitions"]:
            until = (job.get("until") or {}).get(str(partition))
            report = sync.run(TopicPartition(job["topic"], partition), until=until)
            reports[partition] = {
                "end": report.end,
                "cases": report.cases,
                "records_read": report.records_read,
                "rows_sent": report.rows_sent,
                "dead_letters": report.dead_letters,
            }
    sink.close()
    _emit(reports)


def _zombie(job: dict[str, Any]) -> None:
    """Two writers (threads, own keeper sessions, own writer ids) on one partition at once.

    ``mode="together"``: both take the lease, then both try to write (a barrier at the first
    step boundary). ``mode="stalled"``: writer A stops right after its insert, writer B takes
    the partition and finishes, then A goes on to its keeper write. Prints who got what.
    """
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
    from eos_pipeline.core.offsets import TopicPartition
    from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync

    kafka, sink, spec = _clickhouse_setup(job)
    tp = TopicPartition(job["topic"], job["partitions"][0])
    settings = KeeperSettings(hosts=job["zookeeper"], root=job["keeper_root"])
    together = threading.Barrier(2, timeout=60)
    a_stalled, b_done = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def hook_for(name: str) -> Any:
        first = {"done": False}

        def hook(step: str) -> None:
            if job["mode"] == "together" and not first["done"]:
                first["done"] = True
                together.wait()  # both hold a lease now; the older one is already fenced
            stall = job["mode"] == "stalled" and name == "A" and step == "after_insert"
            if stall and not first["done"]:
                first["done"] = True
                a_stalled.set()
                b_done.wait(60)

        return hook

    def writer(name: str) -> None:
        if job["mode"] == "stalled" and name == "B":
            a_stalled.wait(60)
        try:
            with KeeperStateStore(settings) as store:
                report = ClickHousePartitionSync(
                    spec,
                    kafka,
                    store,
                    sink,
                    DeadLetterWriter(kafka, job["dlq_topic"], job["pipeline"]),
                    writer=f"writer-{name}",
                    fault=hook_for(name),
                ).run(tp)
            outcome[name] = {"ok": True, "end": report.end, "rows_sent": report.rows_sent}
        except Exception as exc:
            outcome[name] = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
        finally:
            if name == "B":
                b_done.set()

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("A", "B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    _emit(outcome)


def _offsets(job: dict[str, Any]) -> None:
    from eos_pipeline.adapters.clickhouse import ClickHouseSink

    sink = ClickHouseSink.connect(f"chdb://{job['chdb_path']}")
    out = {}
    for partition in job["partitions"]:
        try:
            rows = sink.offsets_in_table(job["database"], job["table"], job["topic"], partition)
        except Exception as exc:  # a table never created holds no offset
            if "does not exist" not in str(exc):
                raise
            rows = []
        out[str(partition)] = {str(o): n for o, n in rows}
    sink.close()
    _emit(out)


def _rows(job: dict[str, Any]) -> None:
    """Print ``{"<partition>:<offset>": [row, ...]}`` of ``columns`` (the values, not only the
    offsets: an evolution's old rows must keep their defaults)."""
    from eos_pipeline.adapters.clickhouse import ClickHouseSink

    sink = ClickHouseSink.connect(f"chdb://{job['chdb_path']}")
    names = ", ".join(f"`{c}`" for c in job["columns"])
    result = sink.client.query(
        f"SELECT _partition, _offset, {names} FROM `{job['database']}`.`{job['table']}`"
    )
    out: dict[str, list[list[Any]]] = {}
    for p, o, *values in result.result_rows:
        out.setdefault(f"{p}:{o}", []).append(values)
    sink.close()
    _emit(out)


def _spark(job: dict[str, Any]) -> Any:
    """An in-process ``local[1]`` session, or with ``spark_remote`` a client of that server."""
    from pyspark.sql import SparkSession

    if job.get("spark_remote"):
        from eos_pipeline.adapters.spark_remote import connect

        return connect(job["spark_remote"])

    from eos_pipeline.adapters.spark import spark_conf

    builder = SparkSession.builder.appName("eos-fault-child")
    for key, value in spark_conf(master="local[1]", quick_start=True).items():
        builder = builder.config(key, value)
    for key, value in (job.get("spark_conf") or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _hudi_spec(job: dict[str, Any]) -> Any:
    from eos_pipeline.sinks.hudi import HudiTableSpec

    return HudiTableSpec(
        pipeline=job["pipeline"],
        topic=job["topic"],
        table_path=job["table_path"],
        table_name=job["table_name"],
        schema=_job_schema(job),
        max_records_per_partition=job.get("max_records", 1_000_000),
        hudi_options=job.get("hudi_options") or {},
    )


def _hudi(job: dict[str, Any]) -> None:
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.kafka import KafkaSettings
    from eos_pipeline.sinks.hudi import HudiTableSync
    from eos_pipeline.sinks.source import OneCluster
    from eos_pipeline_tests.support.spark_faults import fail_armed_tasks

    kafka = KafkaSettings(job["bootstrap"])
    spark = _spark(job)
    try:
        sync = HudiTableSync(
            _hudi_spec(job),
            OneCluster(kafka),
            spark,
            DeadLetterWriter(kafka, job["hudi_dlq_topic"], job["pipeline"]),
            fault=hudi_fault(job["table_path"], _counting_fault()),
            source_hook=fail_armed_tasks,
        )
        runs = []
        for _ in range(job.get("runs", 1)):
            report = sync.run(partitions=job.get("partitions"))
            runs.append(
                {
                    "instant": report.instant_time,
                    "after": {str(tp.partition): o for tp, o in report.checkpoint_after.items()},
                    "rows": report.total_rows_written,
                    "dead": report.total_dead_letters,
                }
            )
        # The proof is read in the same JVM when asked: a Spark start costs ~10 s.
        offsets = _read_hudi_offsets(spark, job["table_path"]) if job.get("verify") else None
        rows = (
            _read_hudi_rows(spark, job["table_path"], job["columns"]) if "columns" in job else None
        )
    finally:
        spark.stop()
    _emit({"runs": runs, "offsets": offsets, "rows": rows})


def _read_hudi_rows(spark: Any, table_path: str, columns: list[str]) -> dict[str, list[Any]]:
    """The values of ``columns`` per ``partition:offset`` (a table that evolved)."""
    frame = spark.read.format("hudi").load(table_path)
    out: dict[str, list[Any]] = {}
    for row in frame.select("_partition", "_offset", *columns).collect():
        out.setdefault(f"{row['_partition']}:{row['_offset']}", []).append(
            [row[c] for c in columns]
        )
    return out


def _read_hudi_offsets(spark: Any, table_path: str) -> dict[str, dict[str, int]]:
    """``{partition: {offset: rows}}`` of a Hudi table (its latest completed commit)."""
    if not (Path(table_path) / ".hoodie").is_dir():
        return {}
    rows = (
        spark.read.format("hudi").load(table_path).groupBy("_partition", "_offset").count()
    ).collect()
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        out.setdefault(str(row["_partition"]), {})[str(row["_offset"])] = row["count"]
    return out


def _hudi_offsets(job: dict[str, Any]) -> None:
    spark = _spark(job)
    try:
        _emit(_read_hudi_offsets(spark, job["table_path"]))
    finally:
        spark.stop()


def _replay(job: dict[str, Any]) -> None:
    """Replay ``[replay_start, replay_end)`` of ``replay_partition`` into ClickHouse."""
    from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
    from eos_pipeline.core.offsets import TopicPartition
    from eos_pipeline.sinks.clickhouse import ClickHouseReplay

    kafka, sink, spec = _clickhouse_setup(job)
    kill_when_clickhouse_inserts(job["chdb_path"])
    settings = KeeperSettings(hosts=job["zookeeper"], root=job["keeper_root"])
    with KeeperStateStore(settings) as store:
        replay = ClickHouseReplay(
            spec, kafka, store, sink, job["dlq_topic"], fault=_counting_fault()
        )
        tp = TopicPartition(job["topic"], job["replay_partition"])
        plan = replay.plan(tp, job["replay_start"], job.get("replay_end"))
        report = replay.run(plan)
    sink.close()
    _emit({"resumes": plan.resumes, **report.metadata()})


COMMANDS = {
    "replay": _replay,
    "clickhouse": _clickhouse,
    "offsets": _offsets,
    "rows": _rows,
    "zombie": _zombie,
    "hudi": _hudi,
    "hudi-offsets": _hudi_offsets,
}


from eos_pipeline_tests.faults.failover_child import COMMANDS as FAILOVER_COMMANDS  # noqa: E402


def _setup_logging() -> None:
    # A hung child can be asked for its stacks: the harness sends SIGUSR1 before killing it.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(message)s",
        force=True,
    )


def main(argv: list[str]) -> None:
    _setup_logging()
    command, job = argv[1], json.loads(argv[2])
    if command in FAILOVER_COMMANDS:  # two clusters: eos_pipeline_tests.faults.failover_child
        FAILOVER_COMMANDS[command](job, _counting_fault(), _emit)
        return
    COMMANDS[command](job)


if __name__ == "__main__":
    main(sys.argv)
