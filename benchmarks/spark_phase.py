"""Spark and Hudi: a raw Spark read of the Kafka range, and the project's Hudi path against what
a Hudi user would run instead.

The peers get the same records, the same Spark session settings, the same table type
(Copy-on-Write), record key (``_topic, _partition, _offset``) and ordering field:

* **Structured Streaming's Hudi sink**: ``readStream.format("kafka")`` into
  ``writeStream.format("hudi")`` with ``trigger(availableNow=True)`` and a checkpoint directory,
  the usual way to stream Kafka into Hudi from Spark;
* **a raw Hudi bulk write**: one batch read of the range, parsed, written with
  ``bulk_insert`` (no index lookup, no checkpoint): the upper bound for writing these rows;
* **HoodieStreamer** (hudi-utilities), through ``eos_pipeline_tests.support.hoodie_streamer``: the
  only version runnable from the reachable Maven Central is 0.14.0 (table version 6), started
  with spark-submit as its users do, so its figure includes a JVM start; it keys rows by
  ``event_id`` (its JSON source does not carry the Kafka coordinates).

Spark's start-up is reported separately; the other figures are timed on a warm session.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.data import SCHEMA
from benchmarks.report import Figure
from eos_pipeline.core.offsets import OffsetRange, TopicPartition

if TYPE_CHECKING:
    from benchmarks.harness import Bench, Topic


def _session(bench: Bench) -> Any:
    from pyspark.sql import SparkSession

    from eos_pipeline.adapters.spark import spark_conf

    conf = spark_conf(
        master="local[2]",
        extra={"spark.sql.warehouse.dir": str(bench.workdir / "spark-warehouse")},
    )
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _parsed(df: Any) -> Any:
    """Kafka rows to table rows: the JSON payload plus the source columns."""
    from pyspark.sql import functions as F

    from eos_pipeline.adapters.spark import spark_schema

    return df.select(
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.col("timestamp").alias("_timestamp"),
        F.from_json(F.col("value").cast("string"), spark_schema(SCHEMA)).alias("r"),
    ).select("_topic", "_partition", "_offset", "_timestamp", "r.*")


def _hudi_options(name: str, operation: str) -> dict[str, str]:
    return {
        "hoodie.table.name": name,
        "hoodie.datasource.write.table.name": name,
        "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
        "hoodie.datasource.write.operation": operation,
        "hoodie.datasource.write.recordkey.field": "_topic,_partition,_offset",
        "hoodie.datasource.write.precombine.field": "_offset",
        "hoodie.datasource.write.partitionpath.field": "",
        "hoodie.datasource.meta.sync.enable": "false",
        "hoodie.datasource.hive_sync.enable": "false",
    }


_AVRO_TYPES = {
    "Int64": "long",
    "Int32": "int",
    "Float64": "double",
    "Bool": "boolean",
    "String": "string",
    "LowCardinality(String)": "string",
}


def _avro_schema() -> dict[str, Any]:
    return {
        "type": "record",
        "name": "bench_event",
        "namespace": "eos_pipeline.bench",
        "fields": [{"name": c.name, "type": _AVRO_TYPES[c.ch_type]} for c in SCHEMA.columns],
    }


def _count(spark: Any, path: Path) -> int:
    rows = spark.read.format("hudi").load(str(path)).select("_partition", "_offset")
    return int(rows.distinct().count())


def run_spark_phase(bench: Bench, topic: Topic, baseline: str) -> list[Figure]:
    from eos_pipeline.adapters.spark import read_kafka_ranges

    say = bench.opts.say
    figures: list[Figure] = []
    began = time.perf_counter()
    spark = _session(bench)
    bench.overheads["spark_session_start_s"] = round(time.perf_counter() - began, 1)
    bootstrap = bench.kafka.bootstrap_servers
    ranges = {TopicPartition(topic.name, p): OffsetRange(0, e) for p, e in topic.ends.items()}
    try:
        # Raw read: warm up once (JVM, connector classes), then time the second read.
        for attempt in range(2):
            began = time.perf_counter()
            row = (
                read_kafka_ranges(spark, bootstrap, None, ranges)
                .selectExpr("count(*) AS n", "sum(length(value)) AS b")
                .collect()[0]
            )
            seconds = time.perf_counter() - began
            if attempt == 0:
                bench.overheads["spark_first_read_s"] = round(seconds, 1)
        figures.append(
            Figure(
                "raw Spark read (Kafka source)",
                "limit",
                int(row["n"]),
                int(row["b"]),
                seconds,
                baseline=baseline,
                note="local[2], warm session",
            )
        )
        if bench.opts.hudi:
            # Rounds interleave the four peers, so a burst of load elsewhere hits all of them;
            # the harness keeps each one's best round.
            for round_no in range(bench.opts.hudi_rounds):
                say(f"  Hudi round {round_no + 1} of {bench.opts.hudi_rounds}")
                figures += _hudi(bench, spark, topic, ranges, say, round_no)
    finally:
        spark.stop()
    return figures


def _check(bench: Bench, name: str, ok: bool) -> None:
    bench.checks[name] = bench.checks.get(name, True) and ok


def hudi_ratios(bench: Bench) -> None:
    """The project's Hudi path against its peers, on each one's best round."""
    by_name = {f.name: f for f in bench.figures}
    project = by_name.get("project Hudi path")
    if project is None:
        return
    peers = {
        "hudi_project_vs_structured_streaming": "Structured Streaming Hudi sink",
        "hudi_project_vs_bulk_insert": "raw Hudi bulk_insert (batch read)",
        "hudi_project_vs_hoodie_streamer": _STREAMER,
    }
    for key, name in peers.items():
        if name in by_name:
            project.extra[key] = round(by_name[name].seconds / project.seconds, 3)
    if _STREAMER in by_name:
        cold = project.seconds + float(bench.overheads.get("spark_session_start_s", 0.0))
        project.extra["hudi_project_cold_vs_hoodie_streamer"] = round(
            by_name[_STREAMER].seconds / cold, 3
        )


def _hudi(
    bench: Bench, spark: Any, topic: Topic, ranges: dict, say: Any, round_no: int = 0
) -> list[Figure]:
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.spark import read_kafka_ranges
    from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
    from eos_pipeline.sinks.source import OneCluster

    base = bench.workdir / "hudi" / f"round-{round_no}"
    out: list[Figure] = []
    expected = topic.records

    say("  raw Hudi bulk_insert of the parsed range")
    path = base / "bulk"
    began = time.perf_counter()
    (
        _parsed(read_kafka_ranges(spark, bench.kafka.bootstrap_servers, None, ranges))
        .write.format("hudi")
        .options(**_hudi_options("bench_bulk", "bulk_insert"))
        .mode("overwrite")
        .save(str(path))
    )
    bulk = Figure(
        "raw Hudi bulk_insert (batch read)",
        "hudi",
        topic.records,
        topic.bytes,
        time.perf_counter() - began,
        note="no checkpoint, no index lookup",
    )
    _check(bench, "hudi bulk_insert rows", _count(spark, path) == expected)
    out.append(bulk)

    say("  Structured Streaming Kafka -> Hudi, trigger(availableNow)")
    path = base / "streaming"
    began = time.perf_counter()
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bench.kafka.bootstrap_servers)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", topic.name)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
    )
    query = (
        _parsed(stream)
        .writeStream.format("hudi")
        .options(**_hudi_options("bench_streaming", "upsert"))
        .option("checkpointLocation", str(base / "streaming-checkpoint"))
        .trigger(availableNow=True)
        .start(str(path))
    )
    query.awaitTermination()
    streaming = Figure(
        "Structured Streaming Hudi sink",
        "hudi",
        topic.records,
        topic.bytes,
        time.perf_counter() - began,
        note="upsert, COW, availableNow",
    )
    _check(bench, "hudi structured streaming rows", _count(spark, path) == expected)
    out.append(streaming)

    say("  the project's Hudi path (one transaction)")
    path = base / "project"
    spec = HudiTableSpec(
        pipeline=f"bench-hudi-{bench.run_id}-{round_no}",
        topic=topic.name,
        table_path=str(path),
        table_name="bench_project",
        schema=SCHEMA,
    )
    sync = HudiTableSync(
        spec,
        OneCluster(bench.kafka),
        spark,
        DeadLetterWriter(bench.kafka, f"{topic.name}.dlq", spec.pipeline),
        fault=lambda _step: None,
    )
    began = time.perf_counter()
    report = sync.run()
    project = Figure(
        "project Hudi path",
        "hudi",
        report.total_rows_written,
        topic.bytes,
        time.perf_counter() - began,
        baseline=streaming.name,
        note="upsert, COW, one commit with the Kafka checkpoint",
    )
    _check(
        bench,
        "hudi project rows",
        _count(spark, path) == expected and report.total_rows_written == expected,
    )
    out.append(project)
    bulk.baseline = streaming.name

    say("  HoodieStreamer 0.14.0 (spark-submit, one sync)")
    out.append(_hoodie_streamer(bench, spark, topic, base))
    return out


_STREAMER = "HoodieStreamer 0.14.0 (spark-submit)"


def _hoodie_streamer(bench: Bench, spark: Any, topic: Topic, base: Path) -> Figure:
    from eos_pipeline_tests.support.hoodie_streamer import StreamerTable, run_streamer

    path = base / "streamer"
    table = StreamerTable(
        topic=topic.name,
        table_path=str(path),
        table_name="bench_streamer",
        avro_schema=_avro_schema(),
        record_key_fields=("event_id",),
        ordering_field="event_id",
        operation="UPSERT",
        props={"hoodie.datasource.write.hive_style_partitioning": "true"},
    )
    began = time.perf_counter()
    run_streamer(table, bench.kafka.bootstrap_servers, base / "streamer-work")
    seconds = time.perf_counter() - began
    rows = spark.read.format("hudi").load(str(path)).select("event_id").distinct().count()
    _check(bench, "hudi HoodieStreamer rows", int(rows) == topic.records)
    return Figure(
        _STREAMER,
        "hudi",
        topic.records,
        topic.bytes,
        seconds,
        baseline="Structured Streaming Hudi sink",
        note="includes its JVM start; upsert, COW",
    )
