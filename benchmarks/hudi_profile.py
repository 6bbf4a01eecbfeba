"""``python -m benchmarks.hudi_profile``: where the project's Hudi transaction spends its time.

Starts its own stack on free ports, produces the benchmark's 1.6 KB records, starts one warm
Spark session with Spark's event log on, then runs ``HudiTableSync.run()`` into fresh tables
(``--runs``) with a timer around each phase (plan and its Java API/Kafka calls, the Kafka read
and decode set-up, the actions before the write, the dead letters, the write). The event log
then says which Spark jobs ran and for how long, grouped by call site. Optionally HoodieStreamer
runs on the same records (``--streamer``). Prints one JSON document.

Why a separate tool: the full harness reports one number for the Hudi path; this one says why.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from benchmarks.data import SCHEMA, make_values
from benchmarks.local_stack import private_stack
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    idempotent_producer,
    produce_all,
)


class PhaseTimer:
    """Wall time per named phase, summed over calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - began

    def wrap(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return func(*args, **kwargs)

        return wrapped


def _jobs(event_dir: Path) -> list[dict[str, Any]]:
    """Spark jobs from the event log: call site, stages, wall seconds."""
    starts: dict[int, dict[str, Any]] = {}
    out = []
    for log in sorted(event_dir.glob("*")):
        for line in log.read_text(errors="replace").splitlines():
            ev = json.loads(line)
            kind = ev.get("Event")
            if kind == "SparkListenerJobStart":
                props = ev.get("Properties") or {}
                starts[ev["Job ID"]] = {
                    "job": ev["Job ID"],
                    "site": props.get("callSite.short")
                    or (ev.get("Stage Infos") or [{}])[0].get("Stage Name", "?"),
                    "description": props.get("spark.job.description", ""),
                    "stages": len(ev.get("Stage Infos") or []),
                    "t0": ev["Submission Time"],
                }
            elif kind == "SparkListenerJobEnd" and ev["Job ID"] in starts:
                job = starts.pop(ev["Job ID"])
                job["seconds"] = round((ev["Completion Time"] - job.pop("t0")) / 1000, 2)
                out.append(job)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hudi_profile", description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2, help="fresh tables, one transaction each")
    parser.add_argument("--streamer", action="store_true", help="also run HoodieStreamer 0.14")
    parser.add_argument(
        "--quick-start", action="store_true", help="JVM on its fast-start JIT tier (spark_conf)"
    )
    parser.add_argument("--option", action="append", default=[], help="extra Hudi write option k=v")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME:k=v,k=v: also run with these Hudi options (each run does every variant)",
    )
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="eos-hudi-profile-"))
    result: dict[str, Any] = {"records": args.records, "options": args.option, "runs": []}
    with private_stack(work) as config:
        kafka = KafkaSettings(config.kafka_bootstrap)
        topic = "profile"
        create_topic(kafka, topic, args.partitions)
        values = make_values(args.records)
        produce_all(
            idempotent_producer(kafka, **{"compression.type": "none"}),
            topic,
            ((i % args.partitions, None, v) for i, v in enumerate(values)),
        )
        result["runs"] = _profile(args, kafka, topic, work)
        if args.streamer:
            from benchmarks.spark_phase import _avro_schema
            from eos_pipeline_tests.support.hoodie_streamer import StreamerTable, run_streamer

            table = StreamerTable(
                topic=topic,
                table_path=str(work / "streamer"),
                table_name="profile_streamer",
                avro_schema=_avro_schema(),
                record_key_fields=("event_id",),
                ordering_field="event_id",
                operation="UPSERT",
            )
            began = time.perf_counter()
            run_streamer(table, kafka.bootstrap_servers, work / "streamer-work")
            result["streamer_s"] = round(time.perf_counter() - began, 1)
    print(json.dumps(result, indent=1))
    return 0


def _profile(args: argparse.Namespace, kafka: KafkaSettings, topic: str, work: Path) -> list:
    from pyspark.sql import SparkSession

    import eos_pipeline.adapters.hudi as hudi_adapter
    import eos_pipeline.sinks.hudi as hudi_sink
    import eos_pipeline.sinks.source as hudi_source
    from eos_pipeline.adapters.dlq import DeadLetterWriter
    from eos_pipeline.adapters.spark import spark_conf
    from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
    from eos_pipeline.sinks.source import OneCluster

    events = work / "events"
    events.mkdir()
    conf = spark_conf(
        "local[2]",
        quick_start=args.quick_start,
        extra={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.sql.warehouse.dir": str(work / "warehouse"),
        },
    )
    began = time.perf_counter()
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    start_s = time.perf_counter() - began
    base = dict(o.split("=", 1) for o in args.option)
    variants: list[tuple[str, dict[str, str]]] = [("base", base)]
    for text in args.variant:
        name, _, pairs = text.partition(":")
        extra = dict(kv.split("=", 1) for kv in pairs.split(",") if kv)
        variants.append((name, {**base, **extra}))
    plan = [("warm-up", base)] + [v for _ in range(args.runs) for v in variants]
    runs = []
    for n, (label, options) in enumerate(plan):
        timer = PhaseTimer()
        spec = HudiTableSpec(
            pipeline=f"profile-{n}",
            topic=topic,
            table_path=str(work / f"table-{n}"),
            table_name=f"profile_{n}",
            schema=SCHEMA,
            hudi_options=options,
        )
        sync = HudiTableSync(
            spec,
            OneCluster(kafka),
            spark,
            DeadLetterWriter(kafka, f"{topic}.dlq", spec.pipeline),
            fault=lambda _step: None,
        )
        if label == "legacy":
            patches_legacy = [mock.patch.object(HudiTableSync, "run_plan", _legacy_run_plan)]
        else:
            patches_legacy = []
        timed = [  # (where, name, phase): each is wrapped by the timer for this run
            (hudi_sink, "latest_commit", "plan: latest_commit (Java API)"),
            (hudi_source, "end_offsets", "plan: end_offsets"),
            (hudi_source, "start_offsets", "plan: start_offsets"),
            (hudi_sink, "read_kafka_ranges", "read: set-up"),
            (hudi_sink, "tag_json", "decode: set-up"),
            (hudi_sink, "send_dead_letters", "dead letters (action)"),
            (hudi_adapter, "latest_commit", "write: latest_commit x2 (Java API)"),
            (hudi_sink, "write_transaction", "write_transaction (total)"),
        ]
        patches = [
            mock.patch.object(where, name, timer.wrap(phase, getattr(where, name)))
            for where, name, phase in timed
        ]
        with contextlib.ExitStack() as stack:
            for p in patches + patches_legacy:
                stack.enter_context(p)
            with timer.phase("total"):
                report = sync.run()
        assert report.total_rows_written == args.records, report
        phases = {"variant": label, **{k: round(v, 2) for k, v in timer.seconds.items()}}
        runs.append(phases)
        print(json.dumps({"run": n, **phases}), flush=True)
    spark.stop()
    jobs = _jobs(events)
    return [{"spark_start_s": round(start_s, 1)}, *runs, {"jobs": jobs}]


def _legacy_run_plan(self: Any, plan: Any) -> Any:
    """``HudiTableSync.run_plan`` as it was before (variant ``legacy``): the raw Kafka rows
    persisted, one job to count them, a sort plus one job per partition to collect the bad
    rows, JSON parsed again by the write, Hudi's pre-write de-duplication on."""
    import eos_pipeline.sinks.hudi as hudi_sink
    from eos_pipeline.adapters.spark import read_kafka_ranges, split_tagged, tag_json
    from eos_pipeline.core.offsets import TopicPartition
    from eos_pipeline.sinks.hudi import HudiReport

    spec = self.spec
    report = HudiReport(None, dict(plan.ranges), None, plan.checkpoint, dict(plan.end_offsets))
    wanted = {tp: r for tp, r in plan.ranges.items() if not r.is_empty}
    raw = read_kafka_ranges(
        self.spark, self.kafka.bootstrap_servers, spec.kafka_options, wanted
    ).persist()
    try:
        report.records_read = {tp: 0 for tp in plan.ranges}
        for row in raw.groupBy("partition").count().collect():
            report.records_read[TopicPartition(spec.topic, row["partition"])] = row["count"]
        good, bad = split_tagged(tag_json(raw, spec.schema), spec.schema)
        list(bad.orderBy("partition", "offset").toLocalIterator())
        report.dead_letters = {tp: 0 for tp in plan.ranges}
        report.rows_written = dict(report.records_read)
        commit = hudi_sink.write_transaction(
            self.table_rows(good),
            spec.table_path,
            spec.table_name,
            plan.checkpoint,
            record_key_fields=spec.record_key_fields,
            ordering_field=spec.ordering_field,
            partition_count=len(plan.end_offsets),
            expected_previous=plan.previous.checkpoint if plan.previous else None,
            options=spec.hudi_options,
        )
    finally:
        raw.unpersist()
    report.instant_time = commit.instant_time
    return report


if __name__ == "__main__":
    raise SystemExit(main())
