"""``python -m benchmarks.failover``: what a failover and a failback cost the ClickHouse sink.

Starts its own ZooKeeper (for the keeper) and two Kafka clusters with MirrorMaker 2 on free
ports, then, once per MM2 ``offset.lag.max`` asked for (default: MM2's default 100, and 0):

1. ``--records`` records per partition on A; the sink writes the first half there;
2. ``--new`` records per partition produced on B (producers moved), then the switch to B
   (:func:`eos_pipeline.adapters.failover.switch`) and one sink run on B: the seconds of the
   switch, and from the switch command to the end of that run (every new row written);
3. the same back to A (failback), with ``--new`` records per partition on A.

Per switch it reports the records re-read per partition of every moved position (translation
is conservative; the fingerprint skips them exactly), and checks the table: every event once.
``--hudi`` adds a Hudi table to the same pipeline, written through the Spark Connect server of a
private stack: after each switch its first run is timed (switch command -> new commit), with the
records it re-read and skipped, and the table is checked with hudi-rs (every event once).
Then the fingerprint's cost on the normal path: the exactly-once ClickHouse run of
:mod:`benchmarks.fingerprint_cost`, in alternating rounds with and without the mark (the
last record's fingerprint kept with each step). Writes ``benchmarks/results/failover.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from benchmarks.fingerprint_cost import _produce as produce_plain
from benchmarks.fingerprint_cost import _round as fingerprint_round
from benchmarks.local_stack import private_stack
from eos_dev.stack.mirror import MirrorStack, mirror_config
from eos_dev.stack.services import free_port
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.failover import FailoverPipeline, read_window, switch
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.kafka import (
    KafkaReadError,
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
)
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.failover import ClusterSet, Window
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import ActiveCluster
from eos_pipeline_tests.support.sink_runs import run_active_clickhouse

PARTITIONS = 2
SCHEMA = TableSchema.from_mapping({"id": "String"})


def _produce(settings: KafkaSettings, topic: str, prefix: str, per_partition: int) -> None:
    """Paced batches of 50 (MM2 copies them in many transactions, as live traffic)."""
    producer = idempotent_producer(settings)
    for first in range(0, per_partition * PARTITIONS, 50):
        for n in range(first, min(first + 50, per_partition * PARTITIONS)):
            event = f"{prefix}-{n}"
            producer.produce(
                topic, key=event.encode(), value=json.dumps({"id": event}).encode(),
                partition=n % PARTITIONS, headers=[("event-id", event.encode())],
            )  # fmt: skip
        assert producer.flush(30) == 0
        time.sleep(0.01)


def _held(settings: KafkaSettings, tp: TopicPartition) -> int:
    try:
        return len(read_window(settings, tp, Window(0, None)))
    except (KafkaException, KafkaReadError):  # a replica topic not created or led yet
        return 0


def _wait(settings: KafkaSettings, topic: str, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    for p in range(PARTITIONS):
        while _held(settings, TopicPartition(topic, p)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}[{p}] never held {count} records")
            time.sleep(0.3)


def _hudi_sync(ctx: dict[str, Any], spark: Any) -> HudiTableSync:
    """The Hudi sink on the active cluster (one per run)."""
    source = ActiveCluster(ctx["fp"], ctx["store"])
    dead_letters = DeadLetterWriter(source.kafka, ctx["dlq"], ctx["hudi"].pipeline)
    return HudiTableSync(ctx["hudi"], source, spark, dead_letters)


def _switch_and_run(ctx: dict[str, Any], target: str) -> dict[str, Any]:
    fp, store = ctx["fp"], ctx["store"]
    began = time.perf_counter()
    report = switch(store, fp, target)
    switched = time.perf_counter() - began
    runs = run_active_clickhouse(fp, ctx["spec"], store, ctx["sink"], ctx["dlq"])
    done = time.perf_counter() - began
    moved = {f"{m.route.target.topic}[{m.partition}]" for m in report.moves}
    hudi: dict[str, Any] = {}
    if ctx.get("hudi") is not None:
        started = time.perf_counter()
        run = _hudi_sync(ctx, ctx["spark"]).run()
        hudi = {
            # the switch plus the first Hudi run after it (the ClickHouse runs not counted)
            "hudi_switch_to_new_commit_seconds": round(switched + time.perf_counter() - started, 3),
            "hudi_reread": run.reread,
            "hudi_skipped": run.skipped,
            "hudi_rows_written": run.total_rows_written,
        }
    return {
        **hudi,
        "switch_seconds": round(switched, 3),
        "switch_to_new_rows_seconds": round(done, 3),
        "reread_per_partition": {str(r.tp): r.reread for r in runs if str(r.tp) in moved},
        "skipped_per_partition": {str(r.tp): r.skipped for r in runs if str(r.tp) in moved},
        "rows_written": sum(r.rows_sent for r in runs),
        # where each moved partition's re-read started, and whether the timestamp or the syncs
        # set it (the syncs' own start next to it)
        "starts": report.starts,
    }


def _scenario(
    stack: MirrorStack, zk: str, chdb: Any, records: int, new: int, hudi: tuple[Any, Path] | None
) -> dict[str, Any]:
    """``hudi``: a Spark (Connect) session and a folder for the Hudi table, or None."""
    a, b = (KafkaSettings(stack.bootstrap(x)) for x in ("A", "B"))
    suffix = uuid.uuid4().hex[:8]
    topic = f"fo-bench-{suffix}"
    for settings in (a, b):
        create_topic(settings, topic, partitions=PARTITIONS)
    table_path = str(hudi[1] / suffix) if hudi else None
    fp = FailoverPipeline(
        name=f"fo_bench_{suffix}", topics=(topic,), sinks=("clickhouse",),
        clusters=ClusterSet.both_ways(("A", "B")), settings={"A": a, "B": b}, initial="A",
        offset_syncs_location=stack.config.offset_syncs_location, hudi_table=table_path,
    )  # fmt: skip
    sink = ClickHouseSink(chdb)
    database = f"fo_{suffix}"
    sink.ensure_table(database, "events", SCHEMA)
    spec = ClickHouseTableSpec(pipeline=fp.name, database=database, table="events", schema=SCHEMA)
    with KeeperStateStore(KeeperSettings(hosts=zk, root=f"/fo_bench_{suffix}")) as store:
        ctx = {"fp": fp, "store": store, "spec": spec, "sink": sink, "dlq": f"{topic}.dlq"}
        _produce(a, topic, "a", records)
        on_a = ClickHousePartitionSync(
            spec, a, store, sink, DeadLetterWriter(a, ctx["dlq"], fp.name), cluster="A"
        )
        ends = end_offsets(a, topic)
        for p in range(PARTITIONS):
            on_a.run(TopicPartition(topic, p), until=ends[p] // 2)
        if hudi is not None and table_path is not None:
            ctx["spark"] = hudi[0]
            ctx["hudi"] = HudiTableSpec(
                pipeline=fp.name, topic=topic, table_path=table_path, table_name="events",
                schema=SCHEMA, hudi_options=SMALL_TABLE_OPTIONS,
            )  # fmt: skip
            first = _hudi_sync(ctx, hudi[0])
            first.run(until={p: ends[p] // 2 for p in range(PARTITIONS)})
        _wait(b, f"A.{topic}", records)
        _produce(b, topic, "b", new)
        failover = _switch_and_run(ctx, "B")
        _wait(a, f"B.{topic}", new)
        _produce(a, topic, "c", new)
        failback = _switch_and_run(ctx, "A")
    rows = chdb.query(f"SELECT count(), uniqExact(id) FROM {database}.events").result_rows[0]
    total = (records + 2 * new) * PARTITIONS
    assert tuple(rows) == (total, total), f"not exactly once: {rows} rows/ids, {total} events"
    if table_path is not None:
        ids = _hudi_ids(table_path)
        assert (len(ids), len(set(ids))) == (total, total), (
            f"Hudi not exactly once: {len(ids)} rows, {len(set(ids))} ids, {total} events"
        )
    return {"failover": failover, "failback": failback, "events": total}


def _hudi_ids(table_path: str) -> list[str]:
    """The ``id`` of every row of the Hudi table, read by hudi-rs (no Spark)."""
    import pyarrow as pa
    from hudi import HudiTableBuilder

    data = pa.Table.from_batches(HudiTableBuilder.from_base_uri(table_path).build().read())
    return [str(v) for v in data["id"].to_pylist()]


def _fingerprint_cost(work: Path, rounds: int, records: int) -> dict[str, Any]:
    """The exactly-once run with and without the mark, alternating, on a private stack."""
    tree = Path(__file__).resolve().parents[1]
    rates: dict[str, list[float]] = {"with": [], "without": []}
    cpu: dict[str, list[float]] = {"with": [], "without": []}
    with private_stack(work / "fp-stack") as config:
        kafka = KafkaSettings(config.kafka_bootstrap)
        create_topic(kafka, "fp-bench", partitions=4)
        produce_plain(kafka, "fp-bench", 4, records)
        for n in range(rounds):
            for name in ("without", "with"):
                args = [config.kafka_bootstrap, config.zookeeper_hosts, "fp-bench", "4",
                        str(work / f"chdb-fp-{name}-{n}"), "25000"]  # fmt: skip
                env = {"EOS_BENCH_NO_MARK": "1"} if name == "without" else {}
                wall, per_cpu = fingerprint_round(tree, args, env)
                rates[name].append(wall)
                cpu[name].append(per_cpu)
                print(
                    f"[fingerprint round {n}] {name}: {wall:,.0f} rec/s, {per_cpu:,.0f} rec/CPU-s",
                    file=sys.stderr,
                )

    def ratio(values: dict[str, list[float]], pick: Any) -> float:
        return round(pick(values["with"]) / pick(values["without"]), 4)

    return {
        "records": records,
        "rounds": rounds,
        "rec_per_s": {k: [round(x) for x in v] for k, v in rates.items()},
        "rec_per_cpu_s": {k: [round(x) for x in v] for k, v in cpu.items()},
        "with_vs_without_median": ratio(rates, statistics.median),
        "with_vs_without_best": ratio(rates, max),
        "cpu_with_vs_without_median": ratio(cpu, statistics.median),
        "cpu_with_vs_without_best": ratio(cpu, max),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.failover", description=__doc__)
    parser.add_argument("--records", type=int, default=1000, help="per partition on A")
    parser.add_argument("--new", type=int, default=100, help="per partition, per switch")
    parser.add_argument(
        "--lag-max", type=int, nargs="*", default=[100, 0], help="none: fingerprint cost only"
    )
    parser.add_argument("--fp-records", type=int, default=100_000)
    parser.add_argument("--fp-rounds", type=int, default=3)
    parser.add_argument(
        "--hudi", action="store_true", help="a Hudi table too (a private Spark Connect server)"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/failover.json"))
    opts = parser.parse_args(argv)
    import clickhouse_connect

    results: dict[str, Any] = {"partitions": PARTITIONS, "records_per_partition": opts.records}
    with tempfile.TemporaryDirectory(prefix="fo-bench-") as tmp:
        work = Path(tmp)
        say = lambda line: print(f"[stack] {line}", file=sys.stderr)  # noqa: E731
        chdb = clickhouse_connect.get_client(interface="chdb", path=str(work / "chdb"))
        stack_cm = private_stack(work / "zk", say, spark=opts.hudi)
        with stack_cm if opts.lag_max else nullcontext() as base:
            hudi = None
            if opts.hudi and base is not None:
                from eos_pipeline.adapters.spark_remote import connect

                hudi = (connect(base.spark_connect_url), work / "hudi")
            ports = [(free_port(), free_port()), (free_port(), free_port())]
            config = mirror_config(work / "mirror", ports, rest_port=free_port())
            stack = None
            try:
                for lag in opts.lag_max:
                    if stack is not None:
                        stack.stop_mirror()  # the brokers stay; MM2 restarts with the new lag
                    stack = MirrorStack(dataclasses.replace(config, offset_lag_max=lag), say)
                    stack.up()
                    results[f"offset_lag_max={lag}"] = _scenario(
                        stack, base.zookeeper_hosts, chdb, opts.records, opts.new, hudi
                    )
                    print(json.dumps(results[f"offset_lag_max={lag}"]), file=sys.stderr)
            finally:
                if stack is not None:
                    stack.down()
        if opts.fp_rounds:
            results["fingerprint_cost"] = _fingerprint_cost(work, opts.fp_rounds, opts.fp_records)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
