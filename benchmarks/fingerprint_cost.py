"""``python -m benchmarks.fingerprint_cost``: what keeping the failover fingerprint costs.

Since issue 13 the ClickHouse sink keeps, with every step, the fingerprint of the step's last
record (and the reader keeps record headers, which the fingerprint covers). This compares the
exactly-once ClickHouse path of two source trees on the same stack and the same topic, in
alternating rounds: ``--before`` (default ``/work/main``: the code without fingerprints) and
``--after`` (this tree). Each round runs in a fresh process (fresh chDB path, fresh keeper root)
with ``PYTHONPATH`` set to the tree. Records carry one header each, the worst case for the
header copy. Prints one JSON line: best and median records per wall second and per CPU second of
the sink's process (steadier on a shared machine: the fingerprint is CPU work in that process),
per tree, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from benchmarks.local_stack import private_stack
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic, idempotent_producer

_CHILD = textwrap.dedent(
    """
    import json, os, sys, time, uuid
    import clickhouse_connect
    from eos_pipeline.adapters.clickhouse import ClickHouseSink
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.kafka import KafkaSettings
    from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
    from eos_pipeline.core.offsets import TopicPartition
    from eos_pipeline.core.schema import TableSchema
    from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec

    boot, zk, topic, partitions, chdb, batch = sys.argv[1:7]
    if os.environ.get("EOS_BENCH_NO_MARK"):  # the path without the failover fingerprint
        ClickHousePartitionSync._mark = lambda self, batch, step: None
    schema = TableSchema.from_mapping(
        {"id": "Int64", "name": "String", "score": "Float64", "page": "String"}
    )
    client = clickhouse_connect.get_client(interface="chdb", path=chdb)
    sink = ClickHouseSink(client)
    sink.ensure_table("bench", "events", schema)
    kafka = KafkaSettings(boot)
    root = "/fp_bench_" + uuid.uuid4().hex[:8]
    with KeeperStateStore(KeeperSettings(hosts=zk, root=root)) as store:
        spec = ClickHouseTableSpec(
            pipeline="bench", database="bench", table="events", schema=schema,
            max_records=int(batch),
        )
        sync = ClickHousePartitionSync(
            spec, kafka, store, sink, DeadLetterWriter(kafka, topic + ".dlq", "bench")
        )
        began, cpu = time.perf_counter(), time.process_time()
        rows = sum(sync.run(TopicPartition(topic, p)).rows_sent for p in range(int(partitions)))
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    print(json.dumps({"rows": rows, "seconds": seconds, "cpu": cpu}))
    """
)


def _produce(settings: KafkaSettings, topic: str, partitions: int, count: int) -> None:
    producer = idempotent_producer(settings, **{"linger.ms": 20, "batch.size": 1_000_000})
    for i in range(count):
        value = json.dumps(
            {"id": i, "name": f"user-{i % 9973}", "score": i * 0.5, "page": "/p/" + "x" * 300}
        ).encode()
        producer.produce(
            topic, value=value, partition=i % partitions, headers=[("event-id", str(i).encode())]
        )
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _round(
    tree: Path, args: list[str], extra_env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(records per wall second, records per CPU second of the sink's process)."""
    env = dict(os.environ, PYTHONPATH=str(tree), **(extra_env or {}))
    out = (
        subprocess.run(
            [sys.executable, "-c", _CHILD, *args],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    result = json.loads(out)
    return result["rows"] / result["seconds"], result["rows"] / result["cpu"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fingerprint_cost")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=25_000, help="records per step")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per tree (alternating)")
    parser.add_argument("--before", type=Path, default=Path("/work/main"))
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fp-bench-") as work:
        say = lambda line: print(f"[stack] {line}", file=sys.stderr)  # noqa: E731
        with private_stack(Path(work), say) as config:
            kafka = KafkaSettings(config.kafka_bootstrap)
            topic = "fp-bench"
            create_topic(kafka, topic, partitions=opts.partitions)
            _produce(kafka, topic, opts.partitions, opts.records)
            rates: dict[str, list[float]] = {"before": [], "after": []}
            cpu: dict[str, list[float]] = {"before": [], "after": []}
            for n in range(opts.rounds):
                for name, tree in (("before", opts.before), ("after", opts.after)):
                    chdb = str(Path(work) / f"chdb-{name}-{n}")
                    args = [
                        config.kafka_bootstrap,
                        config.zookeeper_hosts,
                        topic,
                        str(opts.partitions),
                        chdb,
                        str(opts.batch),
                    ]
                    wall, per_cpu = _round(tree, args)
                    rates[name].append(wall)
                    cpu[name].append(per_cpu)
                    print(
                        f"[round {n}] {name}: {wall:,.0f} rec/s, {per_cpu:,.0f} rec/CPU-s",
                        file=sys.stderr,
                    )
    best = {k: max(v) for k, v in rates.items()}
    median = {k: statistics.median(v) for k, v in rates.items()}
    cpu_best = {k: max(v) for k, v in cpu.items()}
    cpu_median = {k: statistics.median(v) for k, v in cpu.items()}
    print(
        json.dumps(
            {
                "records": opts.records,
                "rounds": opts.rounds,
                "best_rec_per_s": {k: round(v) for k, v in best.items()},
                "median_rec_per_s": {k: round(v) for k, v in median.items()},
                "after_vs_before_best": round(best["after"] / best["before"], 4),
                "after_vs_before_median": round(median["after"] / median["before"], 4),
                "best_rec_per_cpu_s": {k: round(v) for k, v in cpu_best.items()},
                "median_rec_per_cpu_s": {k: round(v) for k, v in cpu_median.items()},
                "cpu_after_vs_before_best": round(cpu_best["after"] / cpu_best["before"], 4),
                "cpu_after_vs_before_median": round(cpu_median["after"] / cpu_median["before"], 4),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
