"""How the product's cost grows with the number of topic-partitions (issue 30).

``python -m benchmarks.scale``: for each total of topic-partitions (default 64, 256, 1024 and,
for sensor ticks only, 4096) and each layout (one wide topic; many topics of 16), it builds the
product's own Definitions for one ClickHouse pipeline (chDB, SQLite Dagster instance), then:

* evaluates every sensor in-process (``evaluate_tick``, as the daemon does) a few times and
  records p50/p95 tick time, keeper requests (and new ZooKeeper sessions) and Kafka admin
  requests per tick, and the time the ClickHouse lag sensor spends planning;
* with 3 records produced per partition, runs the lag sensor's own key-range run through
  ``dg.materialize`` (the catch-up run), and records its time, the Dagster event-log records it
  wrote (and their serialized bytes), the process's resident set size during it, and checks
  the table on the data (every Kafka offset exactly once);
* after the catch-up, starts Dagster's webserver on the same instance and times, in headless
  Chromium, the table asset's page and its partitions view until their content is shown
  (:mod:`benchmarks.ui_load`; median of a few loads).

Starts its own ZooKeeper and Kafka on free ports (or uses ``--kafka-bootstrap`` and
``--zookeeper-hosts``). Writes ``<out>/scale.json`` (not committed) and prints a table.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import argparse
import contextlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from benchmarks.harness import percentile
from benchmarks.report import write_json
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.components import sensors as sensors_module
from eos_pipeline.components.config import parse_config
from eos_pipeline.components.metadata import CLICKHOUSE_SINK
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.support.definitions import build_definitions

#: Keeper calls counted as requests (kazoo's async calls; the sync ones go through them).
_KEEPER_CALLS = (
    "get_async",
    "get_children_async",
    "exists_async",
    "create_async",
    "set_async",
    "transaction",
)
_KAFKA_CALLS = ("list_offsets", "describe_topics", "list_topics")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class Counters:
    """Counts keeper and Kafka admin requests and new ZooKeeper sessions, process-wide."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._undo: list[Callable[[], None]] = []

    def _wrap(self, cls: type, name: str, label: str) -> None:
        original = getattr(cls, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[label] += 1
            return original(*args, **kwargs)

        setattr(cls, name, counted)
        self._undo.append(lambda: setattr(cls, name, original))

    def __enter__(self) -> "Counters":
        for name in _KEEPER_CALLS:
            self._wrap(KazooClient, name, "keeper")
        self._wrap(KazooClient, "start", "keeper_sessions")
        for name in _KAFKA_CALLS:
            self._wrap(AdminClient, name, "kafka")
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self._undo):
            undo()

    def take(self) -> dict[str, int]:
        taken = dict(self.counts)
        self.counts.clear()
        return {k: taken.get(k, 0) for k in ("keeper", "keeper_sessions", "kafka")}


class PlanTimer:
    """Time spent in the ClickHouse planner (``plan_clickhouse``) during sensor ticks."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        original = sensors_module.plan_clickhouse

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds.append(time.perf_counter() - began)

        sensors_module.plan_clickhouse = timed
        try:
            yield
        finally:
            sensors_module.plan_clickhouse = original


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 1e6


@contextlib.contextmanager
def rss_sampler() -> Iterator[dict[str, float]]:
    """Resident set size before and at its peak while the block runs (sampled every 20 ms)."""
    found = {"before_mb": _rss_mb(), "peak_mb": _rss_mb()}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            found["peak_mb"] = max(found["peak_mb"], _rss_mb())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join()
        found["peak_mb"] = max(found["peak_mb"], _rss_mb())


def _yaml(name: str, topics: list[str], bootstrap: str, zookeeper: str, chdb: str) -> str:
    return f"""
keeper: {{hosts: '{zookeeper}'}}
clickhouse: {{url: 'chdb://{chdb}'}}
sensor_interval_seconds: 30
pipelines:
  - name: {name}
    kafka: {{bootstrap_servers: '{bootstrap}', topics: [{", ".join(topics)}]}}
    schema: {{id: Int64, name: String}}
    clickhouse: {{database: {name}, table: events}}
"""


def evaluate(defs: dg.Definitions, name: str, instance: dg.DagsterInstance) -> Any:
    """One tick as the sensor daemon runs it, on the real resources."""
    sensor = defs.get_repository_def().get_sensor_def(name)
    with dg.build_sensor_context(
        instance=instance, resources=defs.resources, definitions=defs
    ) as context:
        return sensor.evaluate_tick(context)


def layout_topics(total: int, layout: str, prefix: str) -> dict[str, int]:
    """Topic name -> partitions: one topic of ``total`` or ``total / 16`` topics of 16."""
    if layout == "wide":
        return {f"{prefix}_w": total}
    return {f"{prefix}_m{i:04d}": 16 for i in range(max(1, total // 16))}


def measure(
    kafka: KafkaSettings,
    zookeeper: str,
    workdir: Path,
    total: int,
    layout: str,
    *,
    ticks: int,
    catch_up: bool,
    say: Callable[[str], None],
    ui_loads: int = 0,
) -> dict[str, Any]:
    """Every figure for one size and layout (see the module docstring)."""
    name = f"s{total}{layout[0]}_{uuid.uuid4().hex[:6]}"
    topics = layout_topics(total, layout, name)
    for topic, count in topics.items():
        create_topic(kafka, topic, count)
    chdb = str(workdir / "chdb")  # one chDB data path per process: databases differ
    yaml_text = _yaml(name, list(topics), kafka.bootstrap_servers, zookeeper, chdb)
    config = parse_config(yaml_text, "")
    defs = build_definitions(config)
    home = workdir / f"dagster_{name}"
    home.mkdir()
    result: dict[str, Any] = {"partitions": total, "layout": layout, "topics": len(topics)}
    with dg.DagsterInstance.local_temp(str(home)) as instance, Counters() as counters:
        _add_keys(defs, f"{name}_partitions", instance, total)
        _produce(kafka, topics, 3)
        if catch_up:  # the backlog: the lag sensor's one key-range run over every partition
            tick = evaluate(defs, f"{name}_clickhouse_lag", instance)
            if not tick.run_requests:
                raise RuntimeError("the lag sensor asked for no run over the backlog")
            counters.take()
            result["catch_up"] = _catch_up(defs, instance, tick.run_requests[0], counters)
            result["catch_up"]["exactly_once"] = _check(chdb, name, 3 * total)
            say(f"  {total:5d} {layout:5s} catch-up: {result['catch_up']}")
            if ui_loads:
                result["ui"] = _ui(
                    defs, instance, home, yaml_text, workdir / f"ui_{name}", ui_loads
                )
                say(f"  {total:5d} {layout:5s} UI: {result['ui']}")
        else:  # the keeper records a caught-up pipeline has, without the run
            _seed_keeper(zookeeper, name, topics)
        _produce(kafka, topics, 1)  # a trickle: every partition is behind by one record
        counters.take()
        sensors = {
            "partitions": f"{name}_partitions",
            "clickhouse_lag": f"{name}_clickhouse_lag",
            "topics": f"{name}_topics",
        }
        planner = PlanTimer()
        with planner.installed():
            for short, sensor in sensors.items():
                times: list[float] = []
                requests: list[dict[str, int]] = []
                for _ in range(ticks):
                    began = time.perf_counter()
                    evaluate(defs, sensor, instance)
                    times.append(time.perf_counter() - began)
                    requests.append(counters.take())
                result[f"{short}_tick_ms"] = {
                    "p50": round(1000 * percentile(times, 0.5), 1),
                    "p95": round(1000 * percentile(times, 0.95), 1),
                }
                result[f"{short}_requests_per_tick"] = {
                    k: statistics.median(r[k] for r in requests) for k in requests[0]
                }
        result["planning_ms_p50"] = round(1000 * statistics.median(planner.seconds), 2)
        say(
            f"  {total:5d} {layout:5s} ticks: "
            + ", ".join(
                f"{s} {result[f'{s}_tick_ms']['p50']}/{result[f'{s}_tick_ms']['p95']} ms "
                f"{result[f'{s}_requests_per_tick']}"
                for s in sensors
            )
            + f"; planning {result['planning_ms_p50']} ms"
        )
    return result


def _add_keys(defs: dg.Definitions, sensor: str, instance: dg.DagsterInstance, total: int) -> None:
    """Tick the partitions sensor until it added one key per Kafka partition (a topic created
    a moment ago may not be in the broker's metadata yet)."""
    deadline = time.monotonic() + 60
    keys: set[str] = set()
    while len(keys) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(keys)} of {total} partition keys after 60 s")
        tick = evaluate(defs, sensor, instance)
        for request in tick.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
            keys |= set(request.partition_keys)
        if len(keys) < total:
            time.sleep(0.5)


def _produce(kafka: KafkaSettings, topics: dict[str, int], per_partition: int) -> None:
    producer = idempotent_producer(kafka)
    for topic, count in topics.items():
        records = [
            (p, None, json.dumps({"id": p * 10 + i, "name": "x"}).encode())
            for p in range(count)
            for i in range(per_partition)
        ]
        produce_all(producer, topic, records)
    producer.flush()


def _seed_keeper(zookeeper: str, pipeline: str, topics: dict[str, int]) -> None:
    """An ``AFTER [0, 0)`` record per partition, as a pipeline that has started has."""
    with KeeperStateStore(KeeperSettings(zookeeper)) as store:
        for topic, count in topics.items():
            for p in range(count):
                key = KeeperKey.of(pipeline, CLICKHOUSE_SINK, TopicPartition(topic, p))
                store.write(store.acquire(key, writer="scale-benchmark"), 0, 0, "AFTER")


def _catch_up(
    defs: dg.Definitions, instance: dg.DagsterInstance, request: Any, counters: Counters
) -> dict[str, Any]:
    """The lag sensor's run, executed in-process: time, event-log records, RSS, requests."""
    asset = defs.assets[0].key
    with rss_sampler() as rss:
        wall = time.time()
        began = time.perf_counter()
        done = dg.materialize(
            defs.assets,
            selection=dg.AssetSelection.assets(asset),
            partition_key=request.partition_key,
            instance=instance,
            resources=defs.resources,
            tags=request.tags,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )
        seconds = time.perf_counter() - began
    if not done.success:
        raise RuntimeError("the catch-up run failed")
    logs = instance.all_logs(done.run_id)
    stamps = {e.dagster_event.event_type_value: e.timestamp for e in logs if e.dagster_event}
    return {
        "seconds": round(seconds, 2),
        # Dagster writing the run's planned events (one per partition on SQLite) before it starts
        "until_step_start_s": round(stamps["STEP_START"] - wall, 2),
        "step_s": round(stamps["STEP_SUCCESS"] - stamps["STEP_START"], 2),
        "event_log_records": len(logs),
        # what Dagster stored for the run (its events serialized as the storage keeps them)
        "event_log_bytes": sum(len(dg.serialize_value(e)) for e in logs),
        "rss_before_mb": round(rss["before_mb"], 1),
        "rss_peak_mb": round(rss["peak_mb"], 1),
        "requests": counters.take(),
    }


def _ui(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    home: Path,
    yaml_text: str,
    workdir: Path,
    loads: int,
) -> dict[str, Any]:
    """The table asset's page and partitions view in Chromium, after the catch-up."""
    from benchmarks.ui_load import ui_load_times

    asset = defs.assets[0].key
    latest = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=asset), limit=1)
    key = latest.records[0].partition_key
    assert key is not None
    partitions = defs.assets[0].partitions_def
    assert isinstance(partitions, dg.DynamicPartitionsDefinition) and partitions.name
    total = len(instance.get_dynamic_partitions(partitions.name))
    return ui_load_times(home, yaml_text, workdir, list(asset.path), key, total, loads=loads)


def _check(chdb: str, database: str, expected: int) -> bool:
    """Every produced offset in the table exactly once."""
    sink = ClickHouseSink.connect(f"chdb://{chdb}")
    try:
        rows = sink.client.query(
            f"SELECT count(), uniqExact(_topic, _partition, _offset) FROM {database}.events"
        ).result_rows[0]
    finally:
        sink.close()
    return tuple(rows) == (expected, expected)


@contextlib.contextmanager
def _stack(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[str, str]]:
    if args.kafka_bootstrap:
        yield args.kafka_bootstrap, args.zookeeper_hosts
        return
    from benchmarks.local_stack import private_stack

    with private_stack(workdir, say=lambda line: print(line, flush=True)) as config:
        yield f"127.0.0.1:{config.kafka_port}", f"127.0.0.1:{config.zookeeper_port}"


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sizes", type=_sizes, default=(64, 256, 1024, 4096))
    parser.add_argument(
        "--catch-up-max",
        type=int,
        default=1024,
        help="largest total that also gets a catch-up run (4096 takes minutes)",
    )
    parser.add_argument("--layouts", default="wide,many", help="wide (one topic), many (of 16)")
    parser.add_argument("--ticks", type=int, default=5, help="ticks per sensor and size")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/scale.json"))
    parser.add_argument("--kafka-bootstrap", help="use this broker instead of starting a stack")
    parser.add_argument("--zookeeper-hosts", help="use this ZooKeeper instead of starting one")
    parser.add_argument(
        "--ui-loads",
        type=int,
        default=3,
        help="loads of each UI page after a catch-up (plus a first one); 0: no UI timing",
    )
    parser.add_argument("--ui-layouts", default="wide,many", help="layouts whose UI is timed")
    parser.add_argument(
        "--smoke", action="store_true", help="64 partitions, 2 ticks, one UI load (CI)"
    )
    args = parser.parse_args(argv)
    if bool(args.kafka_bootstrap) != bool(args.zookeeper_hosts):
        parser.error("--kafka-bootstrap and --zookeeper-hosts go together")
    if args.smoke:
        args.sizes, args.ticks, args.ui_loads, args.ui_layouts = (64,), 2, 1, "wide"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = lambda line: print(line, flush=True)  # noqa: E731
    began = time.time()
    rows: list[dict[str, Any]] = []
    load_start = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="eos-scale-") as tmp,
        _stack(args, Path(tmp)) as (
            bootstrap,
            zookeeper,
        ),
    ):
        kafka = KafkaSettings(bootstrap)
        ui_layouts = set(args.ui_layouts.split(",")) if _ui_possible(args, say) else set()
        for total in args.sizes:
            for layout in args.layouts.split(","):
                rows.append(
                    measure(
                        kafka,
                        zookeeper,
                        Path(tmp),
                        total,
                        layout,
                        ticks=args.ticks,
                        catch_up=total <= args.catch_up_max,
                        say=say,
                        ui_loads=args.ui_loads if layout in ui_layouts else 0,
                    )
                )
    doc = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began)),
        "seconds": round(time.time() - began, 1),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "sizes": rows,
        "growth": growth(rows),
        "checks": {
            f"{r['partitions']} {r['layout']}": r["catch_up"]["exactly_once"]
            for r in rows
            if "catch_up" in r
        },
    }
    write_json(args.out, doc)
    print(table(rows))
    print("growth (ratio per 4x partitions):", json.dumps(doc["growth"]))
    print(f"load average {doc['load_average_start']} -> {doc['load_average_end']}")
    print(f"written: {args.out}")
    return 0 if all(doc["checks"].values()) else 1


def _ui_possible(args: argparse.Namespace, say: Callable[[str], None]) -> bool:
    if not args.ui_loads:
        return False
    from benchmarks.ui_load import missing_reason

    reason = missing_reason()
    if reason:
        say(f"no UI timing: {reason}")
    return reason is None


def _figures(row: dict[str, Any]) -> dict[str, float]:
    out = {
        f"{s}_tick_p50_ms": row[f"{s}_tick_ms"]["p50"]
        for s in ("partitions", "clickhouse_lag", "topics")
    }
    out["planning_ms"] = row["planning_ms_p50"]
    if "catch_up" in row:
        out["catch_up_s"] = row["catch_up"]["seconds"]
        out["event_log_records"] = row["catch_up"]["event_log_records"]
        out["event_log_bytes"] = row["catch_up"]["event_log_bytes"]
    if "ui" in row:
        out["asset_page_s"] = row["ui"]["asset_page"]["p50_s"]
        out["partitions_view_s"] = row["ui"]["partitions_view"]["p50_s"]
    return out


def growth(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per layout and figure, the ratio of each size's value to the previous size's (x4 each:
    ~4 is linear, ~16 quadratic, ~1 flat)."""
    found: dict[str, dict[str, list[float]]] = {}
    for layout in sorted({r["layout"] for r in rows}):
        mine = sorted((r for r in rows if r["layout"] == layout), key=lambda r: r["partitions"])
        figures = [_figures(r) for r in mine]
        ratios: dict[str, list[float]] = {}
        for before, after in itertools.pairwise(figures):
            for key, value in after.items():
                if before.get(key):
                    ratios.setdefault(key, []).append(round(value / before[key], 2))
        found[layout] = ratios
    return found


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| partitions | layout | partitions tick p50/p95 ms | lag tick p50/p95 ms | "
        "topics tick p50/p95 ms | lag tick keeper/sessions/kafka | planning ms | catch-up s | "
        "event-log records / KB | run RSS peak MB | asset page / partitions view p50 s |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        c = r.get("catch_up", {})
        ui = r.get("ui")
        pages = f"{ui['asset_page']['p50_s']}/{ui['partitions_view']['p50_s']}" if ui else "-"
        kb = round(c["event_log_bytes"] / 1000) if c else "-"
        req = r["clickhouse_lag_requests_per_tick"]
        lines.append(
            f"| {r['partitions']} | {r['layout']} | "
            + " | ".join(
                f"{r[f'{s}_tick_ms']['p50']}/{r[f'{s}_tick_ms']['p95']}"
                for s in ("partitions", "clickhouse_lag", "topics")
            )
            + f" | {req['keeper']:g}/{req['keeper_sessions']:g}/{req['kafka']:g}"
            + f" | {r['planning_ms_p50']} | {c.get('seconds', '-')} | "
            f"{c.get('event_log_records', '-')} / {kb} | {c.get('rss_peak_mb', '-')} | {pages} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
