"""The benchmark run: one stack, one data set, every measurement against its baseline.

Records are produced once per topic; every measurement then reads the same committed offsets.
Each exactly-once run is checked on the data afterwards (every offset in the table once), so a
fast but wrong path cannot produce a figure.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import clickhouse_connect
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from benchmarks.data import SCHEMA, make_values
from benchmarks.local_stack import private_stack
from benchmarks.report import (
    Figure,
    apply_ratios,
    latency_table,
    render_table,
    svg_bars,
    write_json,
)
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
    range_consumer,
    read_range,
)
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.decode import add_source_columns, decode_json, decode_json_arrow
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec

DATABASE = "bench"
# Same fetch sizes as the project's range reader, so the raw read is a fair upper bound.
CONSUMER_CONFIG = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
    "auto.offset.reset": "earliest",
    "enable.partition.eof": True,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
}


@dataclass
class Options:
    records: int = 100_000
    partitions: int = 4
    record_bytes: int = 1600
    batch: int = 25_000
    batch_sizes: tuple[int, ...] = (1_000, 5_000, 25_000)
    scaling: tuple[int, ...] = (1, 4, 16)
    empty_runs: int = 5
    rounds: int = 3
    memory_batches: tuple[int, ...] = ()
    hudi_records: int = 10_000
    hudi_rounds: int = 3
    latency: bool = False
    latency_seconds: float = 60.0
    latency_rate: float = 20.0
    latency_interval: int = 2
    #: ``clickhouse.follow.idle_seconds`` of the latency run's pipeline (0: runs do not follow).
    latency_follow: float = 10.0
    dagster: bool = True
    memory: bool = True
    spark: bool = False
    hudi: bool = False
    out: Path = Path("benchmarks/results")
    kafka_bootstrap: str | None = None
    zookeeper_hosts: str | None = None
    profile: Path | None = None
    say: Callable[[str], None] = print


@dataclass
class Topic:
    name: str
    partitions: int
    ends: dict[int, int]
    records: int
    bytes: int


@dataclass
class Timer:
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@contextlib.contextmanager
def timed() -> Iterator[Timer]:
    """Wall and CPU time of the block; CPU covers every thread of this process (chDB, Arrow,
    librdkafka), not the broker or ZooKeeper."""
    box = Timer()
    wall, cpu = time.perf_counter(), time.process_time()
    yield box
    box.seconds = time.perf_counter() - wall
    box.cpu_seconds = time.process_time() - cpu


FRESH_CLIENTS = "exactly-once, new Kafka clients per call (before)"
NATIVE_PARSER = "exactly-once, ClickHouse parses the JSON (clickhouse.json_parser: auto)"


@contextlib.contextmanager
def _fresh_kafka_clients(active: bool) -> Iterator[None]:
    """The Kafka adapter as it was before its clients were reused (for a same-run before)."""
    if not active:
        yield
        return
    from eos_pipeline.adapters import kafka

    @contextlib.contextmanager
    def no_shared_consumer(_settings: Any, _topics: Any = ()) -> Iterator[None]:
        yield None  # read_range then makes and closes a consumer per batch

    with (
        mock.patch.object(kafka, "shared_admin", kafka.admin_client),
        mock.patch.object(kafka, "_gc_paused", contextlib.nullcontext),
        mock.patch("eos_pipeline.sinks.clickhouse.range_consumer", no_shared_consumer),
    ):
        yield


@contextlib.contextmanager
def profiled(path: Path | None) -> Iterator[None]:
    """Sample this process with py-spy (native frames too) while the block runs."""
    if path is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            *(spy, "record", "--pid", str(os.getpid()), "--native", "--idle", "--rate", "200"),
            *("--format", "raw", "--output", str(path)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)  # let it attach before the measured block starts
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_values(consumer: Consumer, end: int) -> tuple[int, int]:
    """Consume the one partition ``consumer`` is assigned (from its start) up to ``end``,
    counting only: (records, bytes of their values)."""
    records = size = 0
    left = end
    while left > 0:
        # Ask for no more than is left: consume() waits for a full batch or timeout.
        for msg in consumer.consume(num_messages=min(10_000, left), timeout=0.5):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(err.str())
            records += 1
            size += len(msg.value())
            left = end - 1 - msg.offset()
    return records, size


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class TimedStore:
    """The keeper store with every round trip timed (the sink sees the same interface)."""

    def __init__(self, inner: KeeperStateStore) -> None:
        self.inner = inner
        self.calls: dict[str, list[float]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _timed(self, name: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            self.calls[name].append(time.perf_counter() - began)

    def acquire(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("acquire", self.inner.acquire, *args, **kwargs)

    def write(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("write", self.inner.write, *args, **kwargs)

    def read(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("read", self.inner.read, *args, **kwargs)


class Bench:
    """Holds the stack endpoints, the one chDB engine of this process and the results."""

    def __init__(self, opts: Options, workdir: Path) -> None:
        self.opts = opts
        self.workdir = workdir
        self.run_id = uuid.uuid4().hex[:8]
        self.kafka = KafkaSettings(opts.kafka_bootstrap or "")
        self.zookeeper_hosts = opts.zookeeper_hosts or ""
        self.client: Any = None
        self.sink: ClickHouseSink | None = None
        self.figures: list[Figure] = []
        self.overheads: dict[str, Any] = {}
        self.checks: dict[str, bool] = {}
        self.values: list[bytes] = []
        self.topics: dict[int, Topic] = {}

    # ---- setup ----------------------------------------------------------------------------------
    def open_engine(self) -> ClickHouseSink:
        path = self.workdir / "chdb"
        path.mkdir(parents=True, exist_ok=True)
        self.client = clickhouse_connect.get_client(interface="chdb", path=str(path))
        self.sink = ClickHouseSink(self.client, target=f"chdb://{path}")
        self.client.command(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        return self.sink

    def produce(self, partitions: int, count: int | None = None, tag: str = "") -> Topic:
        """A topic holding the run's records (or the first ``count``), round robin."""
        values = self.values if count is None else self.values[:count]
        name = f"bench-{self.run_id}-p{partitions}{tag}"
        create_topic(self.kafka, name, partitions)
        producer = idempotent_producer(
            self.kafka, **{"linger.ms": 50, "batch.size": 1_000_000, "compression.type": "none"}
        )
        produce_all(
            producer,
            name,
            ((i % partitions, None, v) for i, v in enumerate(values)),
            timeout=300,
        )
        ends = end_offsets(self.kafka, name)
        total = sum(ends.values())
        if total != len(values):
            raise RuntimeError(f"{name}: produced {len(values)} records, Kafka holds {total}")
        topic = Topic(name, partitions, ends, total, sum(map(len, values)))
        if count is None:
            self.topics[partitions] = topic
        return topic

    def add(self, fig: Figure) -> Figure:
        """Record a figure; a repeat of the same measurement keeps the best of the rounds
        (the least disturbed by other load on a shared machine) and lists every run."""
        self.opts.say(
            f"  {fig.name}: {fig.records:,} records in {fig.seconds:.2f} s "
            f"({fig.mb_per_s:.1f} MB/s, {fig.records_per_s:,.0f} records/s)"
        )
        prev = next((f for f in self.figures if f.name == fig.name), None)
        if prev is None:
            fig.extra["runs_s"] = [round(fig.seconds, 3)]
            self.figures.append(fig)
            return fig
        prev.extra["runs_s"].append(round(fig.seconds, 3))
        prev.seconds = min(prev.seconds, fig.seconds)
        if fig.cpu_seconds is not None and prev.cpu_seconds is not None:
            prev.cpu_seconds = min(prev.cpu_seconds, fig.cpu_seconds)
        return prev

    def fresh_table(self, name: str) -> str:
        assert self.sink is not None
        table = f"{name}_{self.run_id}"
        self.sink.ensure_table(DATABASE, table, SCHEMA)
        return table

    def drop(self, table: str) -> None:
        self.client.command(f"DROP TABLE IF EXISTS {DATABASE}.`{table}` SYNC")

    def verify(self, label: str, table: str, topic: Topic) -> None:
        """Every offset Kafka holds is in the table exactly once (the benchmark has no bad data)."""
        assert self.sink is not None
        ok = True
        for p, end in topic.ends.items():
            stored = self.sink.offsets_in_table(DATABASE, table, topic.name, p)
            if len(stored) != end or any(n != 1 for _, n in stored):
                ok = False
                dupes = sum(1 for _, n in stored if n != 1)
                self.opts.say(f"  !! {label} p{p}: {len(stored)} of {end} offsets, {dupes} dupes")
        self.checks[label] = ok

    # ---- the limits -----------------------------------------------------------------------------
    def raw_kafka_read(self, topic: Topic, name: str) -> Figure:
        """confluent-kafka alone: one consumer per partition in turn, values only counted.

        One consumer per partition, like the sink's reader: measured here, a single consumer
        assigned all partitions was 2-3x slower on this setup (large multi-partition fetches
        that do not overlap), so that would flatter every ratio against it.
        """
        records = size = 0
        with timed() as t:
            for p, end in topic.ends.items():
                if end <= 0:
                    continue
                consumer = Consumer(
                    self.kafka.config(**CONSUMER_CONFIG, **{"group.id": f"bench-raw-{self.run_id}"})
                )
                consumer.assign([KafkaTopicPartition(topic.name, p, 0)])
                got, got_bytes = read_values(consumer, end)
                records, size = records + got, size + got_bytes
                consumer.close()
        return self.add(
            Figure(name, "limit", records, size, t.seconds, t.cpu_seconds, note="confluent-kafka")
        )

    def project_reader(self, topic: Topic, batch: int, baseline: str) -> Figure:
        """The sink's own range reader alone (no decode, no insert): what reading costs it."""
        records = size = 0
        with timed() as t:
            for p, end in topic.ends.items():
                start = 0
                with range_consumer(self.kafka) as consumer:  # one per partition run
                    while start < end:
                        got = read_range(
                            self.kafka,
                            TopicPartition(topic.name, p),
                            OffsetRange(start, min(end, start + batch)),
                            max_bytes=64 * 1024 * 1024,
                            consumer=consumer,
                        )
                        records += len(got)
                        size += got.value_bytes
                        start = got.range.end
        return self.add(
            Figure(
                "project range reader only",
                "limit",
                records,
                size,
                t.seconds,
                t.cpu_seconds,
                baseline=baseline,
            )
        )

    def chunks(self, topic: Topic, batch: int) -> Iterator[tuple[int, int, list[bytes]]]:
        """Batches as the sink cuts them, from the records this run produced (no Kafka read)."""
        per_partition: dict[int, list[bytes]] = defaultdict(list)
        for i, v in enumerate(self.values):
            per_partition[i % topic.partitions].append(v)
        for p, values in sorted(per_partition.items()):
            for start in range(0, len(values), batch):
                yield p, start, values[start : start + batch]

    def raw_insert(self, topic: Topic, batch: int, baseline: str) -> Figure:
        """Pre-built Arrow tables into the same engine, without tokens or one-block settings."""
        tables = []
        for p, start, values in self.chunks(topic, batch):
            payload = decode_json_arrow(values, SCHEMA)
            assert payload is not None
            offsets = list(range(start, start + len(values)))
            tables.append(
                add_source_columns(
                    payload, SCHEMA.source, TopicPartition(topic.name, p), offsets, offsets
                )
            )
        table = self.fresh_table("raw_insert")
        with timed() as t:
            for tbl in tables:
                self.client.insert_arrow(f"{DATABASE}.`{table}`", tbl)
        self.drop(table)
        return self.add(
            Figure(
                "raw chDB insert (pre-built Arrow)",
                "limit",
                topic.records,
                topic.bytes,
                t.seconds,
                t.cpu_seconds,
                baseline=baseline,
            )
        )

    # ---- the naive baseline ---------------------------------------------------------------------
    def naive(self, topic: Topic, batch: int, baseline: str) -> Figure:
        """Same reader, decoder and writer; no keeper, no state machine, no tokens, no DLQ.

        Its position lives where at-least-once consumers keep it, in Kafka's group offsets:
        each partition run looks up the end offset and the committed offset, and each batch is
        committed after its insert (a crash between the two inserts the batch again).
        """
        table = self.fresh_table("naive")
        ref = f"{DATABASE}.`{table}`"
        group = Consumer(
            self.kafka.config(
                **CONSUMER_CONFIG, **{"group.id": f"bench-naive-{uuid.uuid4().hex[:8]}"}
            )
        )
        with timed() as t:
            for p in topic.ends:
                tp = TopicPartition(topic.name, p)
                end = end_offsets(self.kafka, topic.name)[p]
                committed = group.committed([KafkaTopicPartition(topic.name, p)], timeout=10)
                start = max(0, committed[0].offset)
                # One consumer per partition run, as the exactly-once sink reads.
                with range_consumer(self.kafka) as consumer:
                    while start < end:
                        wanted = OffsetRange(start, min(end, start + batch))
                        got = read_range(self.kafka, tp, wanted, consumer=consumer)
                        payload = decode_json_arrow(got.values, SCHEMA)
                        if payload is None:  # never with this data; kept for an honest baseline
                            decoded = decode_json(got.values, SCHEMA)
                            payload = pa.Table.from_pydict(decoded.columns)
                        self.client.insert_arrow(
                            ref,
                            add_source_columns(
                                payload, SCHEMA.source, tp, got.offsets, got.timestamps_ms
                            ),
                        )
                        start = got.range.end
                        group.commit(
                            offsets=[KafkaTopicPartition(topic.name, p, start)],
                            asynchronous=False,
                        )
        group.close()
        self.verify("naive at-least-once", table, topic)
        self.drop(table)
        return self.add(
            Figure(
                "naive at-least-once",
                "baseline",
                topic.records,
                topic.bytes,
                t.seconds,
                t.cpu_seconds,
                baseline=baseline,
            )
        )

    # ---- the exactly-once path ------------------------------------------------------------------
    def store(self) -> TimedStore:
        settings = KeeperSettings(
            hosts=self.zookeeper_hosts, root=f"/eos_bench_{self.run_id}_{uuid.uuid4().hex[:6]}"
        )
        return TimedStore(KeeperStateStore(settings).start())

    def sync(
        self,
        topic: Topic,
        table: str,
        batch: int,
        store: TimedStore,
        json_parser: str = "arrow",
    ) -> Any:
        assert self.sink is not None
        pipeline = f"bench-{table}"
        spec = ClickHouseTableSpec(
            pipeline=pipeline,
            database=DATABASE,
            table=table,
            schema=SCHEMA,
            max_records=batch,
            json_parser=json_parser,  # type: ignore[arg-type]
        )
        dlq = DeadLetterWriter(self.kafka, f"{topic.name}.dlq", pipeline)
        return ClickHousePartitionSync(
            spec, self.kafka, store, self.sink, dlq, fault=lambda _step: None
        )  # type: ignore[arg-type]

    def eos(
        self,
        topic: Topic,
        batch: int,
        name: str,
        baseline: str,
        *,
        reference_decoder: bool = False,
        fresh_clients: bool = False,
        keep: bool = False,
        profile: Path | None = None,
        json_parser: str = "arrow",
    ) -> tuple[Figure, TimedStore, Any]:
        table = self.fresh_table(f"eos_{topic.partitions}_{batch}" + ("_ref" if keep else ""))
        store = self.store()
        # The per-record decoder is the reference: neither bulk parser may answer before it.
        parser = "arrow" if reference_decoder else json_parser
        sync = self.sync(topic, table, batch, store, parser)
        patch = (
            mock.patch("eos_pipeline.sinks.clickhouse.decode_json_arrow", lambda *_a: None)
            if reference_decoder
            else contextlib.nullcontext()
        )
        native_chunks = [0]  # steps ClickHouse parsed itself (the rest: Arrow or per record)
        real_insert_json = sync.sink.insert_json

        def counted(*args: Any, **kwargs: Any) -> int:
            sent = real_insert_json(*args, **kwargs)  # raises when ClickHouse refused the chunk
            native_chunks[0] += 1
            return sent

        counting = mock.patch.object(sync.sink, "insert_json", counted)
        with patch, counting, _fresh_kafka_clients(fresh_clients), profiled(profile), timed() as t:
            tps = [TopicPartition(topic.name, p) for p in topic.ends]
            with sync.reading(tps):  # as the product's runs: the partitions in one session
                for tp in tps:
                    sync.run(tp)
        self.verify(name, table, topic)
        fig = self.add(
            Figure(
                name,
                "project",
                topic.records,
                topic.bytes,
                t.seconds,
                t.cpu_seconds,
                baseline=baseline,
                extra={
                    "batch": batch,
                    "partitions": topic.partitions,
                    "json_parser": parser,
                    "chunks_parsed_by_clickhouse": native_chunks[0],
                },
            )
        )
        if not keep:
            store.close()
            self.drop(table)
        return fig, store, (sync, table)

    def keeper_and_fixed_cost(self, store: TimedStore, sync: Any, topic: Topic) -> None:
        writes = [s * 1000 for s in store.calls["write"]]
        # Every batch of a clean catch-up is one step: BEFORE then AFTER.
        per_batch = [a + b for a, b in zip(writes[0::2], writes[1::2], strict=False)]
        acquires = [s * 1000 for s in store.calls["acquire"]]
        empty = []
        for _ in range(self.opts.empty_runs):
            with timed() as t:
                sync.run(TopicPartition(topic.name, 0))
            empty.append(t.seconds * 1000)
        self.overheads.update(
            keeper_write_ms_p50=round(percentile(writes, 0.5), 2),
            keeper_write_ms_p95=round(percentile(writes, 0.95), 2),
            keeper_ms_per_batch_p50=round(percentile(per_batch, 0.5), 2),
            keeper_ms_per_batch_p95=round(percentile(per_batch, 0.95), 2),
            keeper_acquire_ms_p50=round(percentile(acquires, 0.5), 2),
            batches=len(per_batch),
            empty_run_ms_p50=round(statistics.median(empty), 1),
            empty_run_ms_max=round(max(empty), 1),
        )

    # ---- Dagster --------------------------------------------------------------------------------
    def dagster(self, topic: Topic, batch: int, baseline: str) -> Figure:
        from benchmarks.dagster_phase import materialize_all

        table = self.fresh_table("dagster")
        store = self.store()
        sync = self.sync(topic, table, batch, store)
        with timed() as t:
            materialize_all(sync, topic.name, sorted(topic.ends))
        self.verify("exactly-once via Dagster", table, topic)
        with timed() as empty:
            materialize_all(sync, topic.name, [0])
        self.overheads["dagster_empty_materialization_ms"] = round(empty.seconds * 1000, 1)
        store.close()
        self.drop(table)
        return self.add(
            Figure(
                "exactly-once via dg.materialize",
                "project",
                topic.records,
                topic.bytes,
                t.seconds,
                t.cpu_seconds,
                baseline=baseline,
                note=f"{len(topic.ends)} partition runs",
            )
        )

    # ---- produce-to-visible latency through the sensor path -------------------------------------
    def latency(self) -> dict[str, Any]:
        """Real Dagster (daemon, sensors, run launcher) in a fresh process tree; see
        ``benchmarks/latency_phase.py``. Its chDB path is its own, so this process's engine
        does not block the runs. Twice: runs that follow the stream (``clickhouse.follow``),
        then runs that end once caught up (each record waits for a sensor tick, the queue and
        a run process start)."""
        following = self._latency_run(self.opts.latency_follow, "latency")
        ending = self._latency_run(0.0, "latency-no-follow")
        for name, result in (("", following), ("runs_ending_caught_up_", ending)):
            lat, split = result["latency_s"], result["split_s"]
            self.overheads.update(
                {
                    f"sensor_latency_{name}s_p50": lat["p50"],
                    f"sensor_latency_{name}s_p95": lat["p95"],
                    f"sensor_latency_{name}split_p50_s": (
                        f"until run requested {split['until_run_requested']['p50']}, "
                        f"queued {split['run_queued']['p50']}, "
                        f"run process start {split['run_process_start']['p50']}, "
                        f"run until commit {split['run_until_commit']['p50']}"
                    ),
                }
            )
        p50 = ending["latency_s"]["p50"]
        following["vs_runs_ending_caught_up_p50"] = round(
            following["latency_s"]["p50"] / p50 if p50 else 0.0, 3
        )
        following["runs_ending_caught_up"] = ending
        return following

    def _latency_run(self, follow: float, workdir: str) -> dict[str, Any]:
        cmd = [
            *(sys.executable, "-m", "benchmarks.latency_phase"),
            *("--kafka-bootstrap", self.kafka.bootstrap_servers),
            *("--zookeeper-hosts", self.zookeeper_hosts),
            *("--workdir", str(self.workdir / workdir)),
            *("--partitions", str(self.opts.partitions)),
            *("--seconds", str(self.opts.latency_seconds)),
            *("--rate", str(self.opts.latency_rate)),
            *("--interval", str(self.opts.latency_interval)),
            *("--record-bytes", str(self.opts.record_bytes)),
            *("--follow", str(follow)),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"latency phase failed: {done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        what = "following runs" if follow else "runs ending caught up"
        self.checks[f"latency via sensor ({what}): every offset once"] = bool(result.pop("exact"))
        return dict(result)

    def dagster_backlog(self) -> dict[str, Any]:
        """A backlog of the run's size through the product's own definitions (``dagster dev``,
        the sensors, following runs; from a cold start and landing while a following run is up)
        against the direct path in fresh processes, one round; see
        ``benchmarks/dagster_throughput.py``."""
        out = self.workdir / "dagster_throughput.json"
        cmd = [
            *(sys.executable, "-m", "benchmarks.dagster_throughput"),
            *("--kafka-bootstrap", self.kafka.bootstrap_servers),
            *("--zookeeper-hosts", self.zookeeper_hosts),
            *("--workdir", str(self.workdir / "dagster-backlog")),
            *("--records", str(self.opts.records)),
            *("--record-bytes", str(self.opts.record_bytes)),
            *("--partitions", str(self.opts.partitions)),
            *("--batch", str(self.opts.batch)),
            *("--interval", str(self.opts.latency_interval)),
            *("--follow", str(self.opts.latency_follow or 10.0)),
            *("--rounds", "1", "--no-ending", "--warm", "--out", str(out)),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if not out.exists():
            raise RuntimeError(f"backlog through Dagster failed: {done.stderr[-3000:]}")
        doc = json.loads(out.read_text())
        self.checks["backlog through Dagster and direct: every offset once"] = bool(doc["exact"])
        return dict(doc["summary"])

    # ---- memory ---------------------------------------------------------------------------------
    def memory(self, topic: Topic, batch: int) -> dict[str, Any]:
        """Peak memory of a catch-up in a fresh process (RSS high-water marks never go down)."""
        workdir = self.workdir / f"mem-{batch}"
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.memprobe",
            "--kafka-bootstrap",
            self.kafka.bootstrap_servers,
            "--zookeeper-hosts",
            self.zookeeper_hosts,
            "--topic",
            topic.name,
            "--partitions",
            str(topic.partitions),
            "--batch",
            str(batch),
            "--workdir",
            str(workdir),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"memory probe failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["batch_value_mb"] = round(batch * topic.bytes / topic.records / 1e6, 1)
        self.checks[f"memory probe batch {batch}"] = bool(result.pop("exact"))
        return result


# ---- Spark and Hudi -----------------------------------------------------------------------------


def spark_and_hudi(bench: Bench, topic: Topic, baseline: str) -> None:
    from benchmarks.spark_phase import hudi_ratios, run_spark_phase

    for fig in run_spark_phase(bench, topic, baseline):
        bench.add(fig)
    hudi_ratios(bench)


# ---- the run ------------------------------------------------------------------------------------


@contextlib.contextmanager
def stack_for(opts: Options, workdir: Path) -> Iterator[tuple[str, str]]:
    """Endpoints given on the command line, or a private stack on free ports in ``workdir``."""
    if opts.kafka_bootstrap and opts.zookeeper_hosts:
        yield opts.kafka_bootstrap, opts.zookeeper_hosts
        return
    with private_stack(workdir, say=lambda line: opts.say(f"[stack] {line}")) as config:
        yield config.kafka_bootstrap, config.zookeeper_hosts


def run(opts: Options) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="eos-bench-"))
    started = time.time()
    try:
        with stack_for(opts, workdir) as (bootstrap, zk):
            opts.kafka_bootstrap, opts.zookeeper_hosts = bootstrap, zk
            bench = Bench(opts, workdir)
            return _measure(bench, opts, started)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _measure(bench: Bench, opts: Options, started: float) -> dict[str, Any]:
    say = opts.say
    say(f"generating {opts.records:,} records of ~{opts.record_bytes} bytes")
    bench.values = make_values(opts.records, opts.record_bytes)
    bench.open_engine()
    partition_counts = sorted({opts.partitions, *opts.scaling})
    for count in partition_counts:
        say(f"producing to a topic with {count} partition(s)")
        bench.produce(count)
    main = bench.topics[opts.partitions]
    raw = f"raw Kafka read, {main.partitions} partitions"

    eos_name = f"exactly-once ClickHouse, batch {opts.batch:,}"
    before_name = "exactly-once, per-record decoder (before)"
    for round_no in range(1, opts.rounds + 1):
        say(f"round {round_no} of {opts.rounds}: limits, naive baseline, exactly-once path")
        bench.raw_kafka_read(main, raw)
        bench.project_reader(main, opts.batch, raw)
        bench.raw_insert(main, opts.batch, raw)
        bench.naive(main, opts.batch, raw)
        first = round_no == 1
        _, store, (sync, table) = bench.eos(
            main, opts.batch, eos_name, raw, keep=True, profile=opts.profile if first else None
        )
        if round_no == opts.rounds:
            bench.keeper_and_fixed_cost(store, sync, main)
        store.close()
        bench.drop(table)
        # The same with the per-record Python decoder: the hot path before this change.
        before_profile = None
        if opts.profile is not None and first:
            before_profile = opts.profile.with_name(f"{opts.profile.stem}-before.txt")
        bench.eos(
            main, opts.batch, before_name, eos_name, reference_decoder=True, profile=before_profile
        )
        # The same with ClickHouse parsing the JSON where it gives the contract's verdict.
        bench.eos(main, opts.batch, NATIVE_PARSER, raw, json_parser="auto")
        # The same with Kafka clients as before they were reused: a new admin client per offset
        # lookup, a new consumer per batch, the collector running while a batch is consumed.
        bench.eos(main, opts.batch, FRESH_CLIENTS, eos_name, fresh_clients=True)
    naive = next(f for f in bench.figures if f.name == "naive at-least-once")
    if opts.dagster:
        say("through Dagster")
        bench.dagster(main, opts.batch, eos_name)

    say("experiment: the same with Python's collector frozen (gc.freeze) during the run")
    # Consuming allocates a tracked object per record, so the collector keeps walking every
    # long-lived object of the process (Dagster, PySpark, ...); a worker can freeze them once.
    gc.collect()
    gc.freeze()
    try:
        bench.eos(main, opts.batch, "exactly-once, gc.freeze() (experiment)", eos_name)
    finally:
        gc.unfreeze()

    say("batch sizes")
    for size in opts.batch_sizes:
        if size != opts.batch:
            bench.eos(main, size, f"exactly-once, batch {size:,}", raw)
    say("partition counts")
    for count in opts.scaling:
        if count == opts.partitions:
            continue
        topic = bench.topics[count]
        base = f"raw Kafka read, {count} partitions"
        bench.raw_kafka_read(topic, base)
        bench.eos(topic, opts.batch, f"exactly-once, {count} partitions", base)

    memory = {}
    if opts.memory:
        say("peak memory (fresh processes)")
        for size in opts.memory_batches or (opts.batch,):
            memory[str(size)] = bench.memory(main, size)
    if opts.spark or opts.hudi:
        say(f"Spark and Hudi, on the first {opts.hudi_records:,} records")
        small = bench.produce(opts.partitions, min(opts.hudi_records, opts.records), "-spark")
        small_raw = f"raw Kafka read, {small.records:,} records"
        bench.raw_kafka_read(small, small_raw)
        spark_and_hudi(bench, small, small_raw)
    latency: dict[str, Any] = {}
    if opts.latency:
        say(
            f"produce-to-visible latency through the sensor path ({opts.latency_rate:g} "
            f"records/s for {opts.latency_seconds:g} s, sensor interval {opts.latency_interval} s)"
        )
        latency = bench.latency()
        say("a backlog through the product's Dagster definitions against the direct path")
        latency["backlog_through_dagster"] = bench.dagster_backlog()

    apply_ratios(bench.figures)
    eos_fig = next(f for f in bench.figures if f.name == eos_name)
    doc = {
        "command": " ".join(["python -m benchmarks", *sys.argv[1:]]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_avg_at_end": os.getloadavg(),
        },
        "data": {
            "records": opts.records,
            "avg_record_bytes": round(main.bytes / main.records, 1),
            "partitions": opts.partitions,
            "batch": opts.batch,
        },
        "figures": [f.as_dict() for f in bench.figures],
        "ratios": _headline(bench, eos_fig, naive, raw),
        "overheads": bench.overheads,
        "memory": memory,
        "checks": bench.checks,
        "latency_via_sensor": latency,
        "not_measured": {}
        if latency
        else {"end_to_end_latency_via_sensor": "run with --latency (starts real Dagster)"},
    }
    doc["table"] = render_table(bench.figures)
    doc["overheads_table"] = latency_table(
        [(k, str(v)) for k, v in bench.overheads.items()]
        + [(f"peak memory, batch {k}", _memory_line(v)) for k, v in memory.items()]
    )
    return doc


def _memory_line(m: Mapping[str, Any]) -> str:
    return (
        f"RSS +{m['rss_growth_mb']} MB over {m['rss_before_mb']} MB at start "
        f"(batch values {m['batch_value_mb']} MB; Python heap peak {m['tracemalloc_peak_mb']} MB, "
        f"Arrow pool peak {m['arrow_peak_mb']} MB)"
    )


def _headline(bench: Bench, eos: Figure, naive: Figure, raw: str) -> dict[str, Any]:
    by_name = {f.name: f for f in bench.figures}
    raw_fig = by_name[raw]
    before = by_name.get("exactly-once, per-record decoder (before)")
    out: dict[str, Any] = {
        "eos_vs_raw_kafka_read": round(eos.records_per_s / raw_fig.records_per_s, 3),
        "eos_vs_naive": round(eos.records_per_s / naive.records_per_s, 3),
        "eos_mb_per_s": round(eos.mb_per_s, 1),
        "eos_mb_per_cpu_s": round(eos.mb_per_cpu_s or 0.0, 1),
        "targets": {"eos_vs_raw_kafka_read": 0.8, "eos_vs_naive": 0.95, "mb_per_cpu_s": 63},
    }
    if before is not None:
        out["speedup_vs_per_record_decoder"] = round(eos.records_per_s / before.records_per_s, 2)
    native = by_name.get(NATIVE_PARSER)
    if native is not None:
        # The headline path parses with Arrow (json_parser: arrow); the product's default,
        # auto, is the NATIVE_PARSER row.
        arrow = eos
        out["json_parser"] = {
            "native_mb_per_s": round(native.mb_per_s, 1),
            "native_mb_per_cpu_s": round(native.mb_per_cpu_s or 0.0, 1),
            "arrow_mb_per_s": round(arrow.mb_per_s, 1),
            "arrow_mb_per_cpu_s": round(arrow.mb_per_cpu_s or 0.0, 1),
            "native_vs_arrow_wall": round(native.records_per_s / arrow.records_per_s, 3),
            "native_vs_arrow_cpu": round((native.mb_per_cpu_s or 0) / (arrow.mb_per_cpu_s or 1), 3),
            "native_vs_raw_read": round(native.records_per_s / raw_fig.records_per_s, 3),
            "arrow_vs_raw_read": round(arrow.records_per_s / raw_fig.records_per_s, 3),
            "target_mb_per_cpu_s": 200,
        }
    fresh = by_name.get(FRESH_CLIENTS)
    if fresh is not None:
        out["speedup_vs_fresh_kafka_clients"] = round(eos.records_per_s / fresh.records_per_s, 3)
    dag = by_name.get("exactly-once via dg.materialize")
    if dag is not None:
        out["dagster_vs_eos"] = round(dag.records_per_s / eos.records_per_s, 3)
    hudi = by_name.get("project Hudi path")
    if hudi is not None:
        out.update({k: v for k, v in hudi.extra.items() if k.startswith("hudi_project_")})
    return out


def save(doc: dict[str, Any], out: Path) -> Path:
    """Write the timestamped JSON and refresh ``latest.json`` / ``latest.svg``."""
    stamp = doc["when"].replace(":", "").replace("-", "")
    path = out / f"bench-{stamp}.json"
    write_json(path, doc)
    write_json(out / "latest.json", doc)
    figures = [Figure(**_figure_fields(f)) for f in doc["figures"]]
    (out / "latest.svg").write_text(
        svg_bars(figures, f"eos_pipeline benchmark {doc['when']} ({doc['data']['records']:,} rec)")
    )
    return path


def _figure_fields(d: Mapping[str, Any]) -> dict[str, Any]:
    keys = Figure.__dataclass_fields__.keys()
    return {k: v for k, v in d.items() if k in keys}


__all__ = ["Options", "run", "save"]
