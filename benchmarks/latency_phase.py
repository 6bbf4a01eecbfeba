"""``python -m benchmarks.latency_phase``: produce-to-visible latency through the sensor path.

Starts real Dagster (``dagster dev`` on the project's ``workspace.yaml`` and ``dagster.yaml``,
after ``instance.upgrade()``, as ``eos-pipeline demo`` does) on a ClickHouse-only pipeline with
a short sensor interval, produces records at a steady rate round robin to several partitions,
and measures for every record the time from its produce call to the moment the keeper record
of its partition moved to ``AFTER`` over a range that covers its offset, i.e. the moment the
sensor-launched run had inserted it into ClickHouse and committed its position.

Why the keeper and not a query: chDB allows one process per data path, so the table cannot be
read while runs write to it. The keeper's ``AFTER`` is written right after the insert returns;
a thread polls it every 50 ms. Each record's latency is split along the run that wrote it
(Dagster's run records): until a sensor tick requested that run (the sensor interval, or a run
of the same partition still in flight), from request to run start (queue, dequeue, run worker
process start-up), and from run start to the commit. Afterwards Dagster is stopped and a child
process counts the table: every offset exactly once, or the measurement fails.

``--hudi`` adds a Hudi target to the pipeline, written by the sensor-launched Hudi runs as thin
clients of a Spark Connect server (the private stack starts one; or ``--spark-remote``), and
measures each record from its produce call to the completion of the Hudi commit that holds it,
read from the table without a JVM (:mod:`benchmarks.hudi_visible`); then every offset must be
in the Hudi table exactly once, dead letters excepted.

Prints one JSON line (the harness runs this as a fresh process with ``--latency``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.data import SCHEMA, make_values
from benchmarks.hudi_visible import (
    HudiWatch,
    exactly_once,
    instant_epoch,
    table_rows,
    timeline_zone,
)
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.dedup import Phase

PIPELINE = "latency"
SINK = "clickhouse"
POLL_S = 0.05

#: When a record (partition, offset) became visible, or None.
VisibleAt = Callable[[int, int], float | None]


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class KeeperWatch(threading.Thread):
    """Polls the keeper and notes when each partition's committed (``AFTER``) end moves."""

    def __init__(self, store: KeeperStateStore, topic: str) -> None:
        super().__init__(daemon=True)
        self.store, self.topic = store, topic
        self.ends: dict[int, int] = {}
        self.moves: dict[int, list[tuple[float, int]]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            for p, stored in self.store.read_many(PIPELINE, SINK, self.topic).items():
                record = stored.record
                if not record.has_state or record.phase != Phase.AFTER.value:
                    continue
                end = int(record.range_end or 0)
                if end > self.ends.get(p, 0):
                    self.ends[p] = end
                    self.moves.setdefault(p, []).append((now, end))
            time.sleep(POLL_S)

    def visible_at(self, p: int, offset: int) -> float | None:
        return next((t for t, end in self.moves.get(p, []) if end > offset), None)


def pipelines_file(
    path: Path,
    kafka: str,
    zookeeper: str,
    topic: str,
    interval: int,
    follow: float = 0.0,
    spark_remote: str | None = None,
    hudi_follow: float = 0.0,
    batch: int | None = None,
    hudi_table_type: str = "COPY_ON_WRITE",
    hudi_options: dict[str, str] | None = None,
) -> None:
    """A ClickHouse pipeline on the benchmark's schema (JSON is valid YAML); ``follow``: the
    sensor's runs go on writing new records until none came for that many seconds.
    ``spark_remote``: a Hudi target too, its runs thin clients of that Spark Connect server;
    ``hudi_follow``: its sensor's runs follow the stream the same way, into a table of
    ``hudi_table_type`` with ``hudi_options`` (Hudi write options). ``batch``: the
    pipeline's ``batch.max_records`` (default: the product's)."""
    doc: dict[str, Any] = {
        "keeper": {"hosts": zookeeper, "root": f"/eos_latency_{uuid.uuid4().hex[:8]}"},
        "clickhouse": {"url": f"chdb://{path.parent / 'chdb'}"},
        "sensor_interval_seconds": interval,
        "pipelines": [
            {
                "name": PIPELINE,
                "kafka": {"bootstrap_servers": kafka, "topics": [topic]},
                "format": "json",
                "schema": {c.name: c.ch_type for c in SCHEMA.columns},
                "reset": "earliest",
                "clickhouse": {
                    "database": "latency",
                    "table": "events",
                    "follow": {"idle_seconds": follow},
                },
            }
        ],
    }
    if batch is not None:
        doc["pipelines"][0]["batch"] = {"max_records": batch}
    if spark_remote:
        doc["spark"] = {"remote": spark_remote, "quick_start": True}
        doc["pipelines"][0]["hudi"] = {
            "path": str(hudi_path(path.parent)),
            "table": "events",
            "table_type": hudi_table_type,
            "options": dict(hudi_options or {}),
            "follow": {"idle_seconds": hudi_follow},
        }
    path.write_text(json.dumps(doc, indent=1))


def hudi_path(work: Path) -> Path:
    return work / "hudi" / "events"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency_phase", description=__doc__)
    parser.add_argument("--kafka-bootstrap", help="default: start a stack on free ports")
    parser.add_argument("--zookeeper-hosts")
    parser.add_argument("--workdir", type=Path, help="default: a new temporary directory")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=float, default=20.0, help="records per second, in total")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to produce")
    parser.add_argument("--interval", type=int, default=2, help="sensor interval (s)")
    parser.add_argument("--record-bytes", type=int, default=1600)
    parser.add_argument(
        "--follow",
        type=float,
        default=0.0,
        help="runs follow the stream until it is quiet this long (s); 0: runs end caught up",
    )
    parser.add_argument(
        "--hudi",
        action="store_true",
        help="a Hudi target too (runs on a Spark Connect server); time to its commits as well",
    )
    parser.add_argument(
        "--hudi-follow",
        type=float,
        default=0.0,
        help="with --hudi: Hudi runs follow the stream until it is quiet this long (s)",
    )
    parser.add_argument(
        "--hudi-table-type",
        choices=("COPY_ON_WRITE", "MERGE_ON_READ"),
        default="COPY_ON_WRITE",
        help="with --hudi: the Hudi table's type",
    )
    parser.add_argument(
        "--hudi-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --hudi: a Hudi write option for the table (repeatable)",
    )
    parser.add_argument("--spark-remote", help="sc://host:port; default: the private stack's")
    parser.add_argument("--timeout", type=float, default=300.0, help="for start-up and drain")
    args = parser.parse_args(argv)
    if args.workdir is None:
        args.workdir = Path(tempfile.mkdtemp(prefix="eos-latency-"))
    if args.kafka_bootstrap and args.zookeeper_hosts and (args.spark_remote or not args.hudi):
        print(json.dumps(measure(args)))
        return 0
    from benchmarks.local_stack import private_stack

    with private_stack(args.workdir, spark=args.hudi) as config:
        args.kafka_bootstrap, args.zookeeper_hosts = config.kafka_bootstrap, config.zookeeper_hosts
        if args.hudi:
            args.spark_remote = config.spark_connect_url
        print(json.dumps(measure(args)))
    return 0


def dagster_env(work: Path, config: Path, interval: int) -> tuple[dict[str, str], Any]:
    """The environment of ``dagster dev`` on ``config`` (the project's ``dagster.yaml`` in a
    fresh ``DAGSTER_HOME`` under ``work``) and its instance, upgraded as the demo does."""
    import dagster as dg

    from eos_dev.demo import prepare_dagster_home
    from eos_pipeline.components.config import migrate

    home = prepare_dagster_home(work / "dagster_home")
    # The code location reads a defs folder: the benchmark's file, moved as a user's would be.
    defs = work / "defs"
    shutil.rmtree(defs, ignore_errors=True)
    migrate(config, defs)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "EOS_DEFS_DIR": str(defs),
        "EOS_SENSOR_INTERVAL_SECONDS": str(interval),
    }
    instance = dg.DagsterInstance.from_config(str(home))
    instance.upgrade(print_fn=lambda _msg: None)
    return env, instance


def keeper_store(config: Path) -> KeeperStateStore:
    """A started store on the keeper of the pipelines file ``config``."""
    keeper = json.loads(config.read_text())["keeper"]
    return KeeperStateStore(KeeperSettings(keeper["hosts"], keeper["root"])).start()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import dagster as dg

    from eos_dev.demo import start_dagster, stop_dagster
    from eos_dev.stack.services import free_port
    from eos_pipeline.components.metadata import partitions_name
    from eos_pipeline.components.sensors import SINK_TAG
    from eos_pipeline.core.planning import parse_partition_key

    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    topic = f"latency-{uuid.uuid4().hex[:8]}"
    kafka = KafkaSettings(args.kafka_bootstrap)
    create_topic(kafka, topic, args.partitions)
    config = work / "pipelines.yaml"
    remote = args.spark_remote if args.hudi else None
    pipelines_file(
        config,
        args.kafka_bootstrap,
        args.zookeeper_hosts,
        topic,
        args.interval,
        args.follow,
        remote,
        args.hudi_follow,
        hudi_table_type=args.hudi_table_type,
        hudi_options=dict(o.split("=", 1) for o in args.hudi_option),
    )
    env, instance = dagster_env(work, config, args.interval)
    store = keeper_store(config)
    watch = KeeperWatch(store, topic)
    watch.start()
    hudi = HudiWatch(str(hudi_path(work)), topic) if args.hudi else None
    if hudi is not None:
        hudi.start()
    producer = idempotent_producer(kafka, **{"linger.ms": 0, "compression.type": "none"})
    values = make_values(int(args.rate * args.seconds) + args.partitions, args.record_bytes)
    log = work / "dagster.log"
    began = time.time()
    process = start_dagster(env, free_port(), log)
    result: dict[str, Any] = {
        "partitions": args.partitions,
        "rate_per_s": args.rate,
        "produce_seconds": args.seconds,
        "sensor_interval_s": args.interval,
        "follow_idle_s": args.follow,
        "hudi_follow_idle_s": args.hudi_follow if args.hudi else None,
        "hudi_table_type": args.hudi_table_type if args.hudi else None,
        "hudi_options": dict(o.split("=", 1) for o in args.hudi_option) if args.hudi else None,
    }
    hudi_runs: list[Any] = []
    hudi_by_partition: dict[int, list[tuple[float, float, float, float]]] = {}
    try:
        # Warm-up: one record per partition, until the sensors and a first run per partition
        # have gone through (code location loaded, partitions added). Not measured. While the
        # slower sink warms up, a record per partition now and then keeps the other sink's
        # following run from ending idle before the measured records come.
        warm_up = [(p, None, values[p]) for p in range(args.partitions)]
        produce_all(producer, topic, warm_up)
        first = dict.fromkeys(range(args.partitions), 1)
        keep_alive = _keep_alive_period(args)
        while keep_alive and not _caught_up(watch, hudi, first):
            _wait_at_most(keep_alive, lambda: _caught_up(watch, hudi, first), args, log)
            produce_all(producer, topic, warm_up)
        _wait(lambda: _caught_up(watch, hudi, end_offsets(kafka, topic)), args, log)
        result["warm_up_s"] = round(time.time() - began, 1)
        sent = _produce_steadily(producer, topic, values[args.partitions :], args)
        ends = end_offsets(kafka, topic)
        _wait(lambda: _caught_up(watch, hudi, ends), args, log)
        _wait(lambda: _in_flight(instance) == 0, args, log)
        ordered = instance.get_dynamic_partitions(partitions_name(PIPELINE))

        def sink_runs(sink: str) -> tuple[list[Any], dict[int, list[Any]]]:
            runs = instance.get_run_records(
                filters=dg.RunsFilter(tags={SINK_TAG: f"{PIPELINE}.{sink}"}), limit=10_000
            )
            return runs, _runs(instance, runs, parse_partition_key, ordered)

        runs, by_partition = sink_runs(SINK)
        if hudi is not None:
            hudi_runs, hudi_by_partition = sink_runs("hudi")
    finally:
        watch.stop.set()
        if hudi is not None:
            hudi.stop.set()
        stop_dagster(process)
        watch.join(5)
        store.close()
        instance.dispose()
    result.update(_split(sent, watch.visible_at, by_partition))
    result.update(_throughput(sent, watch.visible_at, args.record_bytes))
    result.update(_run_stats(runs, by_partition))
    result["exact"] = _verify(topic, ends, config)
    if hudi is not None:
        hudi.join(5)
        result["hudi"] = _hudi_result(hudi, sent, ends, kafka, hudi_runs, hudi_by_partition, args)
        result["exact"] = result["exact"] and result["hudi"]["exact"]
    return result


def _caught_up(watch: KeeperWatch, hudi: HudiWatch | None, ends: dict[int, int]) -> bool:
    """ClickHouse's committed ends (and the Hudi checkpoint) reached ``ends``."""
    marks = [watch.ends] if hudi is None else [watch.ends, hudi.ends]
    return all(m.get(p, 0) >= e for m in marks for p, e in ends.items())


def _run_stats(
    runs: Sequence[Any], by_partition: dict[int, list[tuple[float, float, float, float]]]
) -> dict[str, Any]:
    """How many runs, and the p50 of their parts (queued, process start, run)."""
    all_runs = [r for v in by_partition.values() for r in v]

    def p50(part: Callable[[tuple[float, float, float, float]], float]) -> float:
        return round(statistics.median([part(r) for r in all_runs] or [0]), 2)

    return {
        "runs": len(runs),
        "run_seconds_p50": p50(lambda r: r[3] - r[2]),
        "run_queued_s_p50": p50(lambda r: r[1] - r[0]),
        "run_process_start_s_p50": p50(lambda r: r[2] - r[1]),
    }


def _hudi_result(
    hudi: HudiWatch,
    sent: list[tuple[int, int, float]],
    ends: dict[int, int],
    kafka: KafkaSettings,
    runs: Sequence[Any],
    by_partition: dict[int, list[tuple[float, float, float, float]]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Latency to the completion of the Hudi commit holding each record (and to the poller
    seeing it), the runs, and the exactly-once proof on the table's rows (hudi-rs)."""
    from eos_pipeline.adapters.dlq import dead_letter_offsets

    rows = table_rows(hudi.table_path)
    commit_of = {(p, o): c for p, o, c in rows}

    def at(times: dict[str, float]) -> VisibleAt:
        return lambda p, o: times.get(commit_of.get((p, o), ""))

    out: dict[str, Any] = _split(sent, at(hudi.completed), by_partition)
    seen = _split(sent, at(hudi.seen), {})["latency_s"]
    out["latency_seen_by_poll_s"] = seen
    out.update(_throughput(sent, at(hudi.completed), args.record_bytes))
    out.update(_run_stats(runs, by_partition))
    out["commits"] = len(hudi.completed)
    out["commits_with_rows"] = len({c for _, _, c in rows})
    out.update(_commit_parts({c for _, _, c in rows}, hudi, by_partition))
    dead = dead_letter_offsets(kafka, f"{hudi.topic}.dlq", PIPELINE, "hudi")
    proof = exactly_once(rows, ends, {tp.partition: o for tp, o in dead.items()})
    out["proof"] = proof
    out["exact"] = proof["missing"] == proof["unexpected"] == proof["duplicates"] == 0
    return out


def _commit_parts(
    commits: set[str],
    hudi: HudiWatch,
    by_partition: dict[int, list[tuple[float, float, float, float]]],
) -> dict[str, Any]:
    """Inside the runs, per commit with rows: run start to the instant's request (connect, plan,
    the Spark job reading Kafka), and request to completion (the Hudi write and commit)."""
    zone = timeline_zone(hudi.table_path)
    runs = {r for v in by_partition.values() for r in v}
    before, write = [], []
    for instant in commits:
        requested, completed = instant_epoch(instant, zone), hudi.completed.get(instant)
        if completed is None:
            continue
        write.append(completed - requested)
        started = [r[2] for r in runs if r[2] <= requested <= r[3]]
        if started:
            before.append(requested - max(started))
    return {
        "run_start_to_instant_s": sorted(round(x, 2) for x in before),
        "instant_to_commit_s": sorted(round(x, 2) for x in write),
    }


def _run_keys(tags: Any, ordered: Sequence[str]) -> list[str]:
    """The partition keys a run wrote: its partition, or every key of its key range."""
    if "dagster/partition" in tags:
        return [tags["dagster/partition"]]
    first = tags.get("dagster/asset_partition_range_start")
    last = tags.get("dagster/asset_partition_range_end")
    if first not in ordered or last not in ordered:
        return []
    return list(ordered[ordered.index(first) : ordered.index(last) + 1])


def _runs(
    instance: Any, runs: Sequence[Any], parse_partition_key: Any, ordered: Sequence[str]
) -> dict[int, list[tuple[float, float, float, float]]]:
    """Per partition: (requested, dequeued, started, ended) of each sensor-launched run (a
    key-range run counts for every partition of its range)."""
    from dagster import DagsterEventType

    wanted = {DagsterEventType.RUN_DEQUEUED, DagsterEventType.RUN_STARTING}
    out: dict[int, list[tuple[float, float, float, float]]] = {}
    for rec in runs:
        keys = _run_keys(rec.dagster_run.tags, ordered)
        if not keys or rec.start_time is None or rec.end_time is None:
            continue
        created = _epoch(rec.create_timestamp)
        stamps = [e.timestamp for e in instance.all_logs(rec.dagster_run.run_id, of_type=wanted)]
        dequeued = min(stamps, default=created)
        for key in keys:
            out.setdefault(parse_partition_key(key).partition, []).append(
                (created, dequeued, rec.start_time, rec.end_time)
            )
    return out


def _epoch(when: datetime) -> float:
    """Dagster's run storage hands out naive UTC datetimes."""
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _produce_steadily(
    producer: Any, topic: str, values: list[bytes], args: argparse.Namespace
) -> list[tuple[int, int, float]]:
    """One record every 1/rate s, round robin; returns (partition, offset, produce time)."""
    sent: list[tuple[int, int, float]] = []
    failures: list[str] = []
    period = 1.0 / args.rate
    start = time.time()
    for i in range(int(args.rate * args.seconds)):
        due = start + i * period
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        t = time.time()

        def delivered(err: Any, msg: Any, t: float = t) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                sent.append((msg.partition(), msg.offset(), t))

        producer.produce(
            topic, value=values[i], partition=i % args.partitions, on_delivery=delivered
        )
        producer.poll(0)
    producer.flush(60)
    if failures:
        raise RuntimeError(f"producing failed: {failures[:3]}")
    return sent


def _keep_alive_period(args: argparse.Namespace) -> float:
    """How often the warm-up sends a record per partition while the sinks warm up: well
    within the shortest idle time of the following runs; 0 when no run follows (or only one
    sink is measured: it is caught up once, and the measured records come at once)."""
    follows = [f for f in (args.follow, args.hudi_follow if args.hudi else 0.0) if f > 0]
    if not args.hudi or not follows:
        return 0.0
    return max(0.5, min(follows) / 3)


def _wait_at_most(seconds: float, done: Any, args: argparse.Namespace, log: Path) -> None:
    """:func:`_wait`, but give up quietly after ``seconds`` (the overall timeout still holds)."""
    until = time.monotonic() + seconds
    _wait(lambda: done() or time.monotonic() > until, args, log)


def _in_flight(instance: Any) -> int:
    import dagster as dg

    statuses = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
    ]
    return int(instance.get_runs_count(dg.RunsFilter(statuses=statuses)))


def _wait(done: Any, args: argparse.Namespace, log: Path) -> None:
    deadline = time.monotonic() + args.timeout
    while not done():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise TimeoutError(f"not done within {args.timeout:.0f}s; dagster log:\n{tail}")
        time.sleep(0.2)


def _throughput(
    sent: list[tuple[int, int, float]], visible_at: VisibleAt, record_bytes: int
) -> dict[str, Any]:
    """From the first produce to the last record visible: the rate the sensor-launched runs
    sustained (bounded by the produce rate), and how long they took to drain after the last
    produce."""
    seen = [t for p, o, _ in sent if (t := visible_at(p, o)) is not None]
    if not sent or not seen:
        return {}
    first, last_sent, last_seen = min(s[2] for s in sent), max(s[2] for s in sent), max(seen)
    span = max(last_seen - first, 1e-9)
    return {
        "visible_span_s": round(span, 2),
        "drain_after_last_produce_s": round(last_seen - last_sent, 2),
        "through_dagster_mb_per_s": round(len(seen) * record_bytes / 1e6 / span, 2),
    }


def _split(
    sent: list[tuple[int, int, float]],
    visible_at: VisibleAt,
    runs: dict[int, list[tuple[float, float, float, float]]],
) -> dict[str, Any]:
    """Latency per record, and its parts along the run that committed it."""
    total, wait, queued, start, work = [], [], [], [], []
    for p, offset, produced in sent:
        visible = visible_at(p, offset)
        if visible is None:
            continue
        total.append(visible - produced)
        # The run of this partition that was running when the offset became visible.
        covering = [r for r in runs.get(p, []) if r[2] <= visible <= r[3] + 1.0]
        if not covering:
            continue
        created, dequeued, started, _ = max(covering, key=lambda r: r[2])
        wait.append(max(0.0, created - produced))
        queued.append(max(0.0, dequeued - max(created, produced)))
        start.append(max(0.0, started - max(dequeued, produced)))
        work.append(visible - max(started, produced))

    def stats(values: list[float]) -> dict[str, float]:
        return {
            "p50": round(percentile(values, 0.5), 2),
            "p95": round(percentile(values, 0.95), 2),
        }

    return {
        "records": len(sent),
        "records_seen_visible": len(total),
        "latency_s": {**stats(total), "max": round(max(total, default=float("nan")), 2)},
        "split_s": {
            "until_run_requested": stats(wait),
            "run_queued": stats(queued),
            "run_process_start": stats(start),
            "run_until_commit": stats(work),
        },
    }


def _verify(topic: str, ends: dict[int, int], config: Path) -> bool:
    doc = json.loads(config.read_text())
    return every_offset_once(topic, ends, doc["clickhouse"]["url"], "latency", "events")


def every_offset_once(
    topic: str,
    ends: dict[int, int],
    url: str,
    database: str,
    table: str,
    records: dict[int, int] | None = None,
) -> bool:
    """Each partition's offsets ``[0, end)`` in the table exactly once (rows and distinct
    offsets both equal to the end), counted in a child process (chDB: one process per path).

    ``records``: how many records each partition holds below its end, for a topic written in
    transactions (each commit marker takes an offset and is no record): rows and distinct
    offsets must both equal it."""
    request = {
        "topic": topic,
        "partitions": sorted(ends),
        "clickhouse_url": url,
        "database": database,
        "table": table,
        "hudi_path": None,
    }
    done = subprocess.run(
        [sys.executable, "-m", "eos_dev.demo", json.dumps(request)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"counting {database}.{table} failed: {done.stderr[-2000:]}")
    counts = json.loads(done.stdout.strip().splitlines()[-1])["clickhouse"]
    want = records if records is not None else ends
    return all(counts.get(str(p)) == [want[p], want[p]] for p in ends)


if __name__ == "__main__":
    sys.exit(main())
