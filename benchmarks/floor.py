"""``python -m benchmarks.floor``: the ClickHouse direct path against the machine's floor, one run.

Issue 30's goals for the direct path are ratios to a floor: by CPU, the raw Kafka read plus the
checked INSERT and nothing else; by the clock, the raw read. This measures all three on the same
records in one process, round after round (the best of each kept: the machine is shared):

* **raw read**: confluent-kafka alone, one consumer per partition in turn, values only counted
  (as :meth:`benchmarks.harness.Bench.raw_kafka_read` reads);
* **direct path**: the product's ``ClickHousePartitionSync`` over every partition (ClickHouse
  parses the JSON, the product's default), on a fresh chDB path and keeper root each round; its
  checked INSERTs are timed on their own too (wall and CPU of the ``INSERT ... SELECT`` calls).

The floor by CPU is the raw read's CPU plus the checked INSERTs' CPU of the best round. Every
round's table is counted (each offset once) or the benchmark fails. Starts its own stack unless
given one. Writes ``benchmarks/results/floor.json`` (not committed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.kafka_engine_peer import produce_backlog
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic, end_offsets


@contextmanager
def clocked(into: dict[str, float]) -> Iterator[None]:
    """Add the block's wall and CPU seconds (this process, chDB's threads included) to
    ``into``."""
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        into["wall"] = into.get("wall", 0.0) + time.perf_counter() - wall
        into["cpu"] = into.get("cpu", 0.0) + time.process_time() - cpu


def raw_read(kafka: KafkaSettings, topic: str, ends: dict[int, int]) -> dict[str, float]:
    """Every value of ``topic`` read and counted, one consumer per partition in turn."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from benchmarks.harness import read_values

    out: dict[str, float] = {"bytes": 0}
    with clocked(out):
        for p, end in ends.items():
            consumer = Consumer(
                kafka.config(
                    **{
                        "group.id": f"floor-{uuid.uuid4().hex[:8]}",
                        "enable.auto.commit": False,
                        "isolation.level": "read_committed",
                    }
                )
            )
            consumer.assign([KafkaTopicPartition(topic, p, 0)])
            out["bytes"] += read_values(consumer, end)[1]
            consumer.close()
    return out


def _timing_inserts(client: Any, into: dict[str, float]) -> None:
    """Time ``client``'s INSERT commands (the checked native INSERT) into ``into``."""
    command: Callable[..., Any] = client.command

    def timed(sql: str, *args: Any, **kwargs: Any) -> Any:
        if not sql.lstrip().upper().startswith("INSERT"):
            return command(sql, *args, **kwargs)
        with clocked(into):
            return command(sql, *args, **kwargs)

    client.command = timed


def direct(
    kafka: KafkaSettings, zookeeper: str, topic: str, ends: dict[int, int], path: Path, batch: int
) -> dict[str, float]:
    """The product's exactly-once sync of every partition; its time, its INSERTs' time, and
    whether each offset is in the table once."""
    import clickhouse_connect

    from benchmarks.data import SCHEMA
    from eos_pipeline.adapters.clickhouse import ClickHouseSink
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
    from eos_pipeline.core.offsets import TopicPartition
    from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec

    client = clickhouse_connect.get_client(interface="chdb", path=str(path))
    inserts: dict[str, float] = {}
    _timing_inserts(client, inserts)
    sink = ClickHouseSink(client)
    sink.ensure_table("bench", "events", SCHEMA)
    root = f"/floor_{uuid.uuid4().hex[:8]}"
    out: dict[str, float] = {}
    with KeeperStateStore(KeeperSettings(hosts=zookeeper, root=root)) as store:
        spec = ClickHouseTableSpec(
            pipeline="bench", database="bench", table="events", schema=SCHEMA, max_records=batch
        )
        dead = DeadLetterWriter(kafka, f"{topic}.dlq", "bench")
        sync = ClickHousePartitionSync(spec, kafka, store, sink, dead)
        with clocked(out):
            for p in ends:
                sync.run(TopicPartition(topic, p))
    rows, distinct = client.query(
        "SELECT count(), uniqExact(_partition, _offset) FROM bench.events"
    ).result_rows[0]
    client.close()
    out["insert_wall"], out["insert_cpu"] = inserts.get("wall", 0.0), inserts.get("cpu", 0.0)
    out["exact"] = float(int(rows) == int(distinct) == sum(ends.values()))
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    kafka = KafkaSettings(args.kafka_bootstrap)
    topic = f"floor-{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic, args.partitions)
    produce_backlog(kafka, topic, args.partitions, args.records, args.record_bytes)
    ends = end_offsets(kafka, topic)
    rounds: list[dict[str, Any]] = []
    for n in range(args.rounds):
        load = os.getloadavg()[0]
        raw = raw_read(kafka, topic, ends)
        path = args.workdir / f"chdb-{n}"
        run = direct(kafka, args.zookeeper_hosts, topic, ends, path, args.batch)
        rounds.append({"raw": raw, "direct": run, "load_avg_1m": [round(load, 2)]})
        rounds[-1]["load_avg_1m"].append(round(os.getloadavg()[0], 2))
        print(f"[round {n}] {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
    return {
        "benchmark": "floor",
        "command": " ".join(["python -m benchmarks.floor", *sys.argv[1:]]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "records": args.records,
        "partitions": args.partitions,
        "batch": args.batch,
        "summary": summarize(rounds),
        "rounds": rounds,
        "exact": all(r["direct"]["exact"] for r in rounds),
    }


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Best of each measure, MB per (CPU-)second, and the direct path's ratios to the floor."""
    mb = rounds[0]["raw"]["bytes"] / 1e6

    def best(part: str, key: str) -> float:
        return min(r[part][key] for r in rounds)

    floor_cpu = best("raw", "cpu") + best("direct", "insert_cpu")
    return {
        "megabytes": round(mb, 1),
        "raw_read_mb_per_s": round(mb / best("raw", "wall"), 1),
        "raw_read_mb_per_cpu_s": round(mb / best("raw", "cpu"), 1),
        "checked_insert_mb_per_cpu_s": round(mb / best("direct", "insert_cpu"), 1),
        "floor_with_checks_mb_per_cpu_s": round(mb / floor_cpu, 1),
        "direct_mb_per_s": round(mb / best("direct", "wall"), 1),
        "direct_mb_per_cpu_s": round(mb / best("direct", "cpu"), 1),
        "direct_vs_floor_by_cpu": round(floor_cpu / best("direct", "cpu"), 3),
        "direct_vs_raw_read_by_clock": round(best("raw", "wall") / best("direct", "wall"), 3),
        "load_avg_1m": [x for r in rounds for x in r["load_avg_1m"]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.floor", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-bytes", type=int, default=1600)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kafka-bootstrap", help="default: start a stack on free ports")
    parser.add_argument("--zookeeper-hosts")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/floor.json"))
    args = parser.parse_args(argv)
    args.workdir = Path(tempfile.mkdtemp(prefix="eos-floor-"))
    if args.kafka_bootstrap and args.zookeeper_hosts:
        doc = measure(args)
    else:
        from benchmarks.local_stack import private_stack

        with private_stack(args.workdir) as config:
            args.kafka_bootstrap = config.kafka_bootstrap
            args.zookeeper_hosts = config.zookeeper_hosts
            doc = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=2))
    return 0 if doc["exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
