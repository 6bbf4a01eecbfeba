"""``python -m benchmarks.check_cost``: what the ClickHouse exactly-once check costs, full vs
incremental, as a partition grows.

One partition on a fresh local stack (Kafka, ZooKeeper, chDB) grows in steps of ``--step``
records, each proven by a check; then ``--increment`` more records are written (a small run,
as the sensors launch when the sink keeps up) and that run's check is timed both ways on the
same data:

- **full** (the check before issue 15): every offset of the committed range from the table and
  from Kafka, compared one by one;
- **incremental** (the check now): the range proven by the previous check re-checked by
  ClickHouse's aggregates, and only the new step compared one by one.

Both verdicts must pass and agree, or the benchmark stops. Prints one JSON document (also saved
under ``benchmarks/results/check_cost.json``): seconds per check per partition size, and the
ratio.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import clickhouse_connect

from benchmarks.local_stack import private_stack
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    idempotent_producer,
    read_range,
)
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.proof import (
    ProvenPrefix,
    compare,
    detail_range,
    extend,
    prefix_unchanged,
)
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec

SCHEMA = {"id": "Int64", "name": "String", "score": "Float64", "page": "String"}
WHERE = ("bench", "events")


def _produce(settings: KafkaSettings, topic: str, first: int, count: int) -> None:
    producer = idempotent_producer(settings, **{"linger.ms": 20, "batch.size": 1_000_000})
    for i in range(first, first + count):
        value = json.dumps(
            {"id": i, "name": f"user-{i % 9973}", "score": i * 0.5, "page": "/p/" + "x" * 200}
        ).encode()
        producer.produce(topic, value=value, partition=0)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def _full(sink: ClickHouseSink, kafka: KafkaSettings, tp: TopicPartition, end: int) -> Any:
    committed = OffsetRange(0, end)
    table = dict(sink.offsets_in_table(*WHERE, tp.topic, tp.partition, within=committed))
    return compare(tp, committed, read_range(kafka, tp, committed).offsets, set(), table)


def _incremental(
    sink: ClickHouseSink,
    kafka: KafkaSettings,
    tp: TopicPartition,
    end: int,
    prefix: ProvenPrefix | None,
) -> Any:
    sink.lowest_offset(*WHERE, tp.topic, tp.partition, below=end)  # the low bound's read
    committed = OffsetRange(0, end)
    detail = detail_range(prefix, committed)
    if prefix is not None and detail != committed:
        aggregate = sink.offset_aggregate(
            *WHERE, tp.topic, tp.partition, within=OffsetRange(prefix.start, prefix.through)
        )
        if not prefix_unchanged(prefix, aggregate):
            detail = committed
    table = dict(sink.offsets_in_table(*WHERE, tp.topic, tp.partition, within=detail))
    proof = compare(tp, detail, read_range(kafka, tp, detail).offsets, set(), table)
    return extend(prefix, proof) if prefix is not None and detail != committed else proof


def run(steps: int, step: int, increment: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="eos-check-cost-"))
    rows: list[dict[str, Any]] = []
    with private_stack(work) as config:
        kafka = KafkaSettings(f"127.0.0.1:{config.kafka_port}")
        topic = "check-cost-" + uuid.uuid4().hex[:6]
        create_topic(kafka, topic, partitions=1)
        tp = TopicPartition(topic, 0)
        schema = TableSchema.from_mapping(SCHEMA)
        client = clickhouse_connect.get_client(interface="chdb", path=str(work / "chdb"))
        sink = ClickHouseSink(client)
        sink.ensure_table(*WHERE, schema)
        spec = ClickHouseTableSpec(
            pipeline="bench", database=WHERE[0], table=WHERE[1], schema=schema
        )
        settings = KeeperSettings(hosts=f"127.0.0.1:{config.zookeeper_port}")
        prefix: ProvenPrefix | None = None
        with KeeperStateStore(settings) as store:
            sync = ClickHousePartitionSync(
                spec, kafka, store, sink, DeadLetterWriter(kafka, topic + ".dlq", "bench")
            )
            produced = 0
            for _ in range(steps):
                # The partition grows by a step and a check proves it (as after a big run) ...
                _produce(kafka, topic, produced, step)
                produced += step
                prefix = _incremental(sink, kafka, tp, sync.run(tp).end, prefix).proven()
                # ... then a small run (what the sensors launch when caught up) is checked.
                _produce(kafka, topic, produced, increment)
                produced += increment
                end = sync.run(tp).end
                began = time.perf_counter()
                full = _full(sink, kafka, tp, end)
                full_s = time.perf_counter() - began
                began = time.perf_counter()
                incremental = _incremental(sink, kafka, tp, end, prefix)
                incremental_s = time.perf_counter() - began
                assert full.passed and incremental.passed, (full.summary(), incremental.summary())
                assert (full.kafka_records, full.table_rows) == (
                    incremental.kafka_records,
                    incremental.table_rows,
                )
                rows.append(
                    {
                        "records_in_partition": end,
                        "full_check_s": round(full_s, 3),
                        "incremental_check_s": round(incremental_s, 3),
                        "ratio_full_over_incremental": round(full_s / incremental_s, 1),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    return {
        "benchmark": "check_cost",
        "step_records": step,
        "checked_run_records": increment,
        "steps": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="growth steps (default 5)")
    parser.add_argument("--step", type=int, default=40_000, help="records per step")
    parser.add_argument(
        "--increment", type=int, default=500, help="records of the run that is checked"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/check_cost.json"))
    args = parser.parse_args()
    doc = run(args.steps, args.step, args.increment)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
