"""The main job, end to end on the local stack (``eos-pipeline demo`` / ``make demo``).

Brings the stack up, produces sample events (a few of them malformed) into a demo topic, moves
them exactly once into ClickHouse (embedded chDB) through the keeper-backed state machine and
into a Hudi table through Spark (one commit, offsets in the commit), then prints, per partition,
the Kafka offsets next to what each table holds. Running it again produces more events and moves
only those: the counts show every offset once.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetter, DeadLetterWriter, read_dead_letters
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline.stack.services import Stack, StackConfig

TOPIC = "demo-events"
PIPELINE = "demo"
SCHEMA = TableSchema.from_mapping(
    {"event_id": "Int64", "user": "String", "action": "LowCardinality(String)", "amount": "Float64"}
)

# The same payload columns for Spark: non-nullable fields are required, as in ClickHouse.
SPARK_SCHEMA_FIELDS = [
    ("event_id", "long", False),
    ("user", "string", False),
    ("action", "string", False),
    ("amount", "double", False),
]


def _spark_schema():  # type: ignore[no-untyped-def]
    from pyspark.sql import types as T

    kinds = {"long": T.LongType(), "string": T.StringType(), "double": T.DoubleType()}
    return T.StructType([T.StructField(n, kinds[k], null) for n, k, null in SPARK_SCHEMA_FIELDS])


def _events(count: int, seed: int) -> list[tuple[int | None, bytes | None, bytes | None]]:
    rng = random.Random(seed)
    out: list[tuple[int | None, bytes | None, bytes | None]] = []
    for i in range(count):
        user = f"user-{rng.randrange(50)}"
        if i % 250 == 249:
            value = b'{"event_id": "not-a-number", "user": 1}'  # schema violation -> DLQ
        elif i % 333 == 332:
            value = b"\x00garbage"  # not JSON -> DLQ
        else:
            value = json.dumps(
                {
                    "event_id": seed * 1_000_000 + i,
                    "user": user,
                    "action": rng.choice(["view", "cart", "buy"]),
                    "amount": round(rng.random() * 100, 2),
                }
            ).encode()
        out.append((None, user.encode(), value))
    return out


def _hudi_step(
    settings: KafkaSettings, work: Path, ends: dict[int, int], say: Callable[[str], None]
) -> dict[int, tuple[int, int]]:
    """Kafka -> Hudi with Spark: one commit from the table's checkpoint to ``ends``."""
    from pyspark.sql import SparkSession

    from eos_pipeline.adapters.hudi import latest_checkpoint, write_transaction
    from eos_pipeline.adapters.spark import ERROR_COLUMN as ERROR
    from eos_pipeline.adapters.spark import decode_json, read_kafka_ranges, spark_conf

    say("starting Spark (local) with the Hudi bundle and Spark's Kafka connector ...")
    builder = SparkSession.builder
    for key, value in spark_conf(quick_start=True).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    table = str(work / "hudi" / "demo_events")
    previous = latest_checkpoint(spark, table)
    start = {p: 0 for p in ends}
    if previous is not None:
        start.update({tp.partition: off for tp, off in previous.items() if tp.topic == TOPIC})
    ranges = {
        TopicPartition(TOPIC, p): OffsetRange(start[p], ends[p]) for p in ends if ends[p] > start[p]
    }
    if ranges:
        raw = read_kafka_ranges(spark, settings.bootstrap_servers, None, ranges).persist()
        good, bad = decode_json(raw, _spark_schema())
        # Spark hands binary columns over as bytearray; the producer wants bytes.
        letters = [
            (
                r["partition"],
                DeadLetter(
                    r["offset"],
                    None if r["key"] is None else bytes(r["key"]),
                    None if r["value"] is None else bytes(r["value"]),
                    "DecodeError",
                    r[ERROR],
                ),
            )
            for r in bad.collect()
        ]
        dlq = DeadLetterWriter(settings, f"{TOPIC}.dlq", PIPELINE)
        for p in sorted({p for p, _ in letters}):
            dlq.send(TopicPartition(TOPIC, p), [d for q, d in letters if q == p])
        commit = write_transaction(
            good,
            table,
            "demo_events",
            {TopicPartition(TOPIC, p): e for p, e in ends.items()},
        )
        raw.unpersist()
        say(
            f"hudi: one commit {commit.instant_time} covering {len(ranges)} partitions, "
            f"{len(letters)} bad records to the dead-letter topic"
        )
    else:
        say("hudi: already caught up, nothing to commit")
    from pyspark.sql import functions as F

    rows = spark.read.format("hudi").load(table)
    counts = {
        r["_partition"]: (r["rows"], r["distinct"])
        for r in rows.groupBy("_partition")
        .agg(F.count("*").alias("rows"), F.countDistinct("_offset").alias("distinct"))
        .collect()
    }
    spark.stop()
    return {p: counts.get(p, (0, 0)) for p in ends}


def dead_letters_by_partition(settings: KafkaSettings, dlq_topic: str) -> dict[int, int]:
    """Distinct source offsets per source partition in the dead-letter topic."""
    seen = {
        (int(h["eos.source.partition"]), int(h["eos.source.offset"]))
        for h in read_dead_letters(settings, dlq_topic)
        if h.get("eos.source.topic") == TOPIC
    }
    out: dict[int, int] = {}
    for partition, _ in seen:
        out[partition] = out.get(partition, 0) + 1
    return out


def run_demo(config: StackConfig, args: argparse.Namespace) -> int:
    say = print
    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    stack = Stack(config)
    stack.up()
    settings = KafkaSettings(config.kafka_bootstrap)
    create_topic(settings, TOPIC, args.partitions)

    seed = int(time.time())
    delivered = produce_all(idempotent_producer(settings), TOPIC, _events(args.records, seed))
    say(f"produced {len(delivered)} events to {TOPIC} ({args.partitions} partitions)")
    ends = end_offsets(settings, TOPIC)

    # ClickHouse, exactly once per partition.
    sink = ClickHouseSink.connect(f"chdb://{work / 'chdb'}")
    sink.ensure_table("demo", "events", SCHEMA)
    spec = ClickHouseTableSpec(PIPELINE, "demo", "events", SCHEMA, max_records=2000)
    dlq_topic = f"{TOPIC}.dlq"
    with KeeperStateStore(KeeperSettings(hosts=config.zookeeper_hosts)) as store:
        sync = ClickHousePartitionSync(
            spec, settings, store, sink, DeadLetterWriter(settings, dlq_topic, PIPELINE)
        )
        for p in sorted(ends):
            report = sync.run(TopicPartition(TOPIC, p), until=ends[p])
            say(
                f"clickhouse: {TOPIC}[{p}] {report.start} -> {report.end}: "
                f"{report.records_read} read, {report.rows_sent} sent, "
                f"{report.dead_letters} to {dlq_topic}, cases {report.cases or ['(caught up)']}"
            )

    hudi = _hudi_step(settings, work, ends, say)

    say("")
    say(
        f"{'partition':>9} {'kafka end':>10} {'ch rows':>8} {'ch distinct':>12} {'ch dups':>8} "
        f"{'dlq':>5} {'hudi rows':>10} {'hudi distinct':>14}"
    )
    dlq_by_partition = dead_letters_by_partition(settings, dlq_topic)
    for p in sorted(ends):
        offsets = sink.offsets_in_table("demo", "events", TOPIC, p)
        rows = sum(n for _, n in offsets)
        dups = sum(1 for _, n in offsets if n > 1)
        say(
            f"{p:>9} {ends[p]:>10} {rows:>8} {len(offsets):>12} {dups:>8} "
            f"{dlq_by_partition.get(p, 0):>5} {hudi[p][0]:>10} {hudi[p][1]:>14}"
        )
    say(f"dead-letter topic {dlq_topic}: {sum(dlq_by_partition.values())} distinct source records")
    say(
        f"done in {time.monotonic() - began:.0f}s. ClickHouse data: {work / 'chdb'}; "
        f"Hudi table: {work / 'hudi' / 'demo_events'}"
    )
    if args.down:
        stack.down()
    else:
        say("the stack is still running; stop it with: eos-pipeline stack down")
    return 0
