"""``python -m benchmarks.kafka_engine_peer``: the project's exactly-once ClickHouse path against
ClickHouse's own Kafka table engine, same broker, same records, same chDB, same run.

The peer is what many ClickHouse users run: a ``Kafka`` engine table, a materialized view and a
MergeTree table; ClickHouse consumes in the background and parses the JSON itself (at least
once: a crash between insert and offset commit writes twice). It is tuned for this test: one
thread per consumer, one consumer per partition, blocks flushed every 250 ms (the default 7.5 s
would dominate); its time includes joining the consumer group, as a fresh table's does. The
project's path is the ``ClickHousePartitionSync`` of every partition, as a Dagster run calls it.

Each side runs in a fresh process with a fresh chDB path, rounds alternating; the figures are
wall seconds from start to the last row and CPU seconds of that process (chDB's threads
included). The engine's process must open chDB without the import-time probe of ``import
chdb`` (it starts and stops an engine, after which a Kafka table fails with "Shutdown was
called", see PLATFORM.md), so it loads ``chdb._chdb`` directly. Both tables are checked after
each round: every offset of every partition once. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from benchmarks.data import SCHEMA, make_values
from benchmarks.local_stack import private_stack
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic, idempotent_producer

_ENGINE_CHILD = textwrap.dedent(
    """
    import ctypes, importlib, json, os, resource, site, sys, time, types
    boot, topic, partitions, path, records, columns = sys.argv[1:7]
    pkg = os.path.join(site.getsitepackages()[0], "chdb")
    stub = types.ModuleType("chdb")
    stub.__path__ = [pkg]
    sys.modules["chdb"] = stub  # no import-time probe (see the module docstring)
    here = os.getcwd()
    os.chdir(pkg)
    ctypes.CDLL(os.path.join(pkg, "_chdb.abi3.so"), mode=sys.getdlopenflags() | 0x8)
    _chdb = importlib.import_module("chdb._chdb")
    os.chdir(here)
    conn = _chdb.connect(path)

    def q(sql):
        return conn.query(sql, "CSV").bytes().decode().strip()

    q("CREATE DATABASE IF NOT EXISTS bench")
    q(f"CREATE TABLE bench.events ({columns}, _topic String, _partition UInt64, _offset UInt64)"
      " ENGINE = MergeTree ORDER BY (_topic, _partition, _offset)")
    q(f"CREATE TABLE bench.queue ({columns}) ENGINE = Kafka SETTINGS "
      f"kafka_broker_list = '{boot}', kafka_topic_list = '{topic}', "
      f"kafka_group_name = 'peer-{os.getpid()}', kafka_format = 'JSONEachRow', "
      f"kafka_num_consumers = {partitions}, kafka_thread_per_consumer = 1, "
      "kafka_max_block_size = 65536, kafka_flush_interval_ms = 250")
    began, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    q("CREATE MATERIALIZED VIEW bench.mv TO bench.events AS "
      "SELECT *, _topic, _partition, _offset FROM bench.queue")
    deadline = began + 600
    while int(q("SELECT count() FROM bench.events")) < int(records):
        if time.perf_counter() > deadline:
            raise SystemExit("the Kafka engine did not consume every record in 600 s")
        time.sleep(0.02)
    seconds = time.perf_counter() - began
    now = resource.getrusage(resource.RUSAGE_SELF)
    used = (now.ru_utime - cpu.ru_utime) + (now.ru_stime - cpu.ru_stime)
    counted = q("SELECT count(), uniqExact(_partition, _offset) FROM bench.events")
    rows, distinct = counted.split(",")
    q("DROP TABLE bench.mv")
    q("DROP TABLE bench.queue")
    print(json.dumps({"rows": int(rows), "distinct": int(distinct), "seconds": seconds,
                      "cpu": used}))
    """
)

PROJECT_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time, uuid
    import clickhouse_connect
    from benchmarks.data import SCHEMA
    from eos_pipeline.adapters.clickhouse import ClickHouseSink
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.kafka import KafkaSettings
    from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
    from eos_pipeline.core.offsets import TopicPartition
    from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec

    boot, zk, topic, partitions, path, batch, parser = sys.argv[1:8]
    client = clickhouse_connect.get_client(interface="chdb", path=path)
    sink = ClickHouseSink(client)
    sink.ensure_table("bench", "events", SCHEMA)
    kafka = KafkaSettings(boot)
    root = "/peer_bench_" + uuid.uuid4().hex[:8]
    with KeeperStateStore(KeeperSettings(hosts=zk, root=root)) as store:
        spec = ClickHouseTableSpec(pipeline="bench", database="bench", table="events",
                                   schema=SCHEMA, max_records=int(batch), json_parser=parser)
        sync = ClickHousePartitionSync(
            spec, kafka, store, sink, DeadLetterWriter(kafka, topic + ".dlq", "bench"))
        began, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        for p in range(int(partitions)):
            sync.run(TopicPartition(topic, p))
        seconds = time.perf_counter() - began
        now = resource.getrusage(resource.RUSAGE_SELF)
    used = (now.ru_utime - cpu.ru_utime) + (now.ru_stime - cpu.ru_stime)
    rows, distinct = client.query(
        "SELECT count(), uniqExact(_partition, _offset) FROM bench.events").result_rows[0]
    print(json.dumps({"rows": int(rows), "distinct": int(distinct), "seconds": seconds,
                      "cpu": used}))
    """
)


def produce_backlog(
    settings: KafkaSettings, topic: str, partitions: int, count: int, record_bytes: int = 1600
) -> int:
    """``count`` benchmark records round robin over ``partitions``, as fast as the producer
    goes; returns their bytes."""
    producer = idempotent_producer(settings, **{"linger.ms": 20, "batch.size": 1_000_000})
    size = send_round_robin(producer, topic, partitions, count, record_bytes)
    assert producer.flush(60) == 0
    return size


def send_round_robin(
    producer: Any, topic: str, partitions: int, count: int, record_bytes: int
) -> int:
    """Hand ``count`` benchmark records to ``producer``, round robin over ``partitions``, as
    fast as it takes them (not flushed); returns their bytes."""
    size = 0
    for i, value in enumerate(make_values(count, record_bytes)):
        size += len(value)
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:  # the local queue is full (more than 100,000 records)
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    return size


def run_child(code: str, args: list[str], records: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], check=False, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["distinct"] != records:
        raise RuntimeError(f"{result['distinct']} distinct offsets in the table, not {records}")
    return result


def _columns() -> str:
    return ", ".join(f"`{c.name}` {c.ch_type}" for c in SCHEMA.columns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.kafka_engine_peer", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=25_000, help="project: records per step")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--json-parser",
        choices=("arrow", "auto", "native"),
        default="auto",
        help="the project's clickhouse.json_parser (default: the product's, auto)",
    )
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="eos-engine-peer-") as work:
        say = lambda line: print(f"[stack] {line}", file=sys.stderr)  # noqa: E731
        with private_stack(Path(work), say) as config:
            kafka = KafkaSettings(config.kafka_bootstrap)
            topic = "engine-peer"
            create_topic(kafka, topic, partitions=opts.partitions)
            size = produce_backlog(kafka, topic, opts.partitions, opts.records)
            runs: dict[str, list[dict[str, Any]]] = {"kafka_engine": [], "project": []}
            for n in range(opts.rounds):
                engine = [config.kafka_bootstrap, topic, str(opts.partitions)]
                engine += [str(Path(work) / f"engine-{n}"), str(opts.records), _columns()]
                runs["kafka_engine"].append(run_child(_ENGINE_CHILD, engine, opts.records))
                project = [config.kafka_bootstrap, config.zookeeper_hosts, topic]
                project += [str(opts.partitions), str(Path(work) / f"project-{n}")]
                project += [str(opts.batch), opts.json_parser]
                runs["project"].append(run_child(PROJECT_CHILD, project, opts.records))
                print(
                    f"[round {n}] {json.dumps({k: v[-1] for k, v in runs.items()})}",
                    file=sys.stderr,
                )
    mb = size / 1e6
    summary: dict[str, Any] = {
        "benchmark": "kafka_engine_peer",
        "records": opts.records,
        "megabytes": round(mb, 1),
        "project_json_parser": opts.json_parser,
    }
    for name, results in runs.items():
        best = min(r["seconds"] for r in results)
        summary[name] = {
            "best_seconds": round(best, 2),
            "median_seconds": round(statistics.median(r["seconds"] for r in results), 2),
            "best_cpu_seconds": round(min(r["cpu"] for r in results), 2),
            "mb_per_s": round(mb / best, 1),
            "mb_per_cpu_s": round(mb / min(r["cpu"] for r in results), 1),
            "duplicates": max(r["rows"] - r["distinct"] for r in results),
        }
    summary["project_over_engine_speed"] = round(
        summary["kafka_engine"]["best_seconds"] / summary["project"]["best_seconds"], 2
    )
    summary["project_over_engine_cpu_efficiency"] = round(
        summary["kafka_engine"]["best_cpu_seconds"] / summary["project"]["best_cpu_seconds"], 2
    )
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
