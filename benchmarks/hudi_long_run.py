"""``python -m benchmarks.hudi_long_run``: many small Hudi commits in a row, metadata table on.

Issue 17: in a 150 s run of small batches over 4 partitions, about one Hudi commit in nine
failed while it overlapped a compaction of Hudi's metadata table (``ArrayIndexOutOfBoundsException``
writing a ``column_stats`` record). This runs the product's own write path (``HudiTableSync``, so
``write_transaction`` and the product's Hudi options) for ``--commits`` transactions of a few
records each on ONE table, with the metadata table on (Hudi's default, as HoodieStreamer has
it, and as the chaos run had it: no ``SMALL_TABLE_OPTIONS``), and counts the transactions that
failed. A failed transaction is not retried on its own: the next one plans from the table's
checkpoint and takes its records, exactly as the next Dagster run would.

By default every transaction runs in a fresh process and JVM, as Dagster runs do (a Spark start
per commit, so about 20 s each on 2 cores): that is where the failure shows, because it needs a
JVM whose first metadata-table work is a compaction. ``--one-jvm`` runs them all in one session.
``--compact-every N`` sets ``hoodie.metadata.compact.max.delta.commits`` (default 3 here, to
compact often; 0 keeps Hudi's default of 10); ``--option KEY=VALUE`` adds any Hudi write option.

At the end the table is caught up and read back: every produced offset must be in it exactly
once. Starts its own stack on free ports; prints one line per failure and a summary, writes the
JSON result to ``--json`` (default ``benchmarks/results/hudi_long_run.json``) and exits 1 if any
transaction failed or the data is not exact.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from benchmarks.local_stack import private_stack
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.hudi_timeline import completed_commits
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.adapters.spark import spark_conf
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import OneCluster

SCHEMA = TableSchema.from_mapping(
    {"id": "Int64", "name": "String", "score": "Float64", "action": "String", "page": "String"}
)
TOPIC = "long"
DEFAULT_JSON = Path(__file__).parent / "results" / "hudi_long_run.json"
_CAUSE = re.compile(r"Caused by: ([\w.$]+(?:Exception|Error)[^\n]*)")
_CHILD_RESULT = "HUDI-LONG-RUN-RESULT "


def _records(
    rng: random.Random, count: int, base: int, partitions: int
) -> list[tuple[int, None, bytes]]:
    return [
        (
            rng.randrange(partitions),
            None,
            json.dumps(
                {
                    "id": base + i,
                    "name": f"user-{(base + i) % 997}",
                    "score": (base + i) * 0.5,
                    "action": rng.choice(("view", "click", "buy")),
                    "page": f"/p/{(base + i) % 113}",
                }
            ).encode(),
        )
        for i in range(count)
    ]


def cause(text: str) -> str:
    """The innermost Java cause named in an error's text, else its first line."""
    causes = _CAUSE.findall(text)
    first = text.strip().splitlines()[0] if text.strip() else "error without a message"
    return (causes[-1] if causes else first)[:300]


def metadata_timeline(table_path: str) -> dict[str, Any]:
    """Instants of the metadata table's active timeline: compactions done and left pending."""
    timeline = Path(table_path) / ".hoodie" / "metadata" / ".hoodie" / "timeline"
    if not timeline.is_dir():
        return {"exists": False}
    names = [p.name for p in timeline.iterdir() if p.is_file()]
    # Hudi 1.x names a completed instant <requested>_<completed>.<action>; a compaction of a
    # Merge-on-Read table (the metadata table is one) completes as a ``commit``.
    done = sorted(n for n in names if re.fullmatch(r"\d+_\d+\.commit", n))
    pending = {
        n.split(".")[0]
        for n in names
        if n.endswith((".compaction.inflight", ".compaction.requested"))
    }
    return {
        "exists": True,
        "compactions_completed_active": len(done),
        "compactions_left_pending": sorted(pending - {n.split("_")[0] for n in done}),
        "deltacommits_completed_active": sum(
            1 for n in names if re.fullmatch(r"\d+_\d+\.deltacommit", n)
        ),
        "rollbacks_active": sum(1 for n in names if re.fullmatch(r"\d+_\d+\.rollback", n)),
    }


def _spark(master: str, quick_start: bool) -> SparkSession:
    builder = SparkSession.builder.appName("hudi-long-run")
    for key, value in spark_conf(master, quick_start=quick_start).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _sync(job: dict[str, Any], spark: SparkSession) -> HudiTableSync:
    kafka = KafkaSettings(job["bootstrap"])
    kw: dict[str, Any] = {"table_type": job["table_type"]} if job.get("table_type") else {}
    spec = HudiTableSpec(
        TOPIC, TOPIC, job["table_path"], "long_run", SCHEMA, hudi_options=job["options"], **kw
    )
    return HudiTableSync(
        spec, OneCluster(kafka), spark, DeadLetterWriter(kafka, f"{TOPIC}.dlq", TOPIC)
    )


def _attempt(sync: HudiTableSync) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        report = sync.run()
    except Exception as exc:  # counting failures is the point
        return {"ok": False, "seconds": time.monotonic() - t0, "error": str(exc)[:20_000]}
    return {"ok": True, "seconds": time.monotonic() - t0, "instant": report.instant_time}


def _child(job: dict[str, Any]) -> int:
    """One transaction in this (fresh) process: prints its outcome as one JSON line."""
    spark = _spark(job["master"], job["quick_start"])
    try:
        outcome = _attempt(_sync(job, spark))
    finally:
        spark.stop()
    print(_CHILD_RESULT + json.dumps(outcome), flush=True)
    return 0


def _in_child(job: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.hudi_long_run", "--child", json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith(_CHILD_RESULT):
            return json.loads(line[len(_CHILD_RESULT) :])
    return {
        "ok": False,
        "seconds": time.monotonic() - t0,
        "error": f"child exited {done.returncode} without a result: {done.stderr[-4000:]}",
    }


def _table_offsets(spark: SparkSession, table_path: str) -> dict[int, Counter[int]]:
    rows = (
        spark.read.format("hudi").load(table_path).groupBy("_partition", "_offset").count()
    ).collect()
    out: dict[int, Counter[int]] = {}
    for row in rows:
        out.setdefault(int(row["_partition"]), Counter())[int(row["_offset"])] = row["count"]
    return out


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hudi_long_run", description=__doc__)
    parser.add_argument("--commits", type=int, default=100, help="transactions to attempt")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--records", type=int, default=12, help="records produced per commit")
    parser.add_argument(
        "--compact-every",
        type=int,
        default=3,
        help="hoodie.metadata.compact.max.delta.commits (default 3; 0: Hudi's default, 10)",
    )
    parser.add_argument("--table-type", choices=("COPY_ON_WRITE", "MERGE_ON_READ"))
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="extra Hudi option"
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (local[N])")
    parser.add_argument(
        "--full-jit",
        action="store_true",
        help="JVM with its full JIT (default: the fast-start tier, as the shared defs.yaml has it)",
    )
    parser.add_argument(
        "--one-jvm",
        action="store_true",
        help="all transactions in one Spark session (default: a fresh process and JVM each)",
    )
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--keep", action="store_true", help="keep the table's folder")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.options = {}
    if args.compact_every:
        args.options["hoodie.metadata.compact.max.delta.commits"] = str(args.compact_every)
    args.quick_start = not args.full_jit
    args.process_per_commit = not args.one_jvm
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--option wants KEY=VALUE, got {item!r}")
        args.options[key.strip()] = value.strip()
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.child:
        return _child(json.loads(args.child))
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="eos-hudi-long-"))
    table_path = str(work / "table")
    failures: list[dict[str, Any]] = []
    first_failure = ""
    durations: list[float] = []
    try:
        with private_stack(work) as config:
            job = {
                "bootstrap": config.kafka_bootstrap,
                "table_path": table_path,
                "table_type": args.table_type,
                "options": args.options,
                "master": args.master,
                "quick_start": args.quick_start,
            }
            kafka = KafkaSettings(config.kafka_bootstrap)
            create_topic(kafka, TOPIC, args.partitions)
            producer = idempotent_producer(kafka)
            spark = None if args.process_per_commit else _spark(args.master, args.quick_start)
            sync = None if spark is None else _sync(job, spark)
            began = time.monotonic()
            for n in range(args.commits):
                produce_all(producer, TOPIC, _records(rng, args.records, n * 1000, args.partitions))
                outcome = _attempt(sync) if sync is not None else _in_child(job)
                seconds = outcome["seconds"]
                if outcome["ok"]:
                    durations.append(seconds)
                    if (n + 1) % 10 == 0:
                        print(f"commit {n + 1}: ok ({len(failures)} failed so far)", flush=True)
                    continue
                first_failure = first_failure or outcome["error"]
                why = cause(outcome["error"])
                failures.append({"attempt": n + 1, "seconds": round(seconds, 1), "cause": why})
                print(f"commit {n + 1}: FAILED after {seconds:.1f} s: {why}", flush=True)
            elapsed = time.monotonic() - began
            # Catch up whatever a failed last transaction left (the same way, up to three tries:
            # a try that fails leaves the table as it was), then check the data in this process.
            catch_up: dict[str, Any] = {"ok": False, "error": "not tried"}
            tries = 0
            while tries < 3 and not catch_up["ok"]:
                tries += 1
                catch_up = _attempt(sync) if sync is not None else _in_child(job)
                if not catch_up["ok"]:
                    print(f"catch-up {tries}: FAILED: {cause(catch_up['error'])}", flush=True)
            if spark is None:
                spark = _spark(args.master, args.quick_start)
            ends = end_offsets(kafka, TOPIC)
            stored = _table_offsets(spark, table_path)
            missing = duplicated = 0
            for p, end in ends.items():
                seen = stored.get(p, Counter())
                # Idempotent, non-transactional producer: offsets are 0..end-1, one record each.
                missing += sum(1 for o in range(end) if o not in seen)
                duplicated += sum(1 for c in seen.values() if c > 1)
            durations.sort()
            result: dict[str, Any] = {
                "commits_attempted": args.commits,
                "commits_failed": len(failures),
                "commits_succeeded": args.commits - len(failures),
                "completed_commits_on_table": len(completed_commits(table_path)),
                "seconds_total": round(elapsed, 1),
                "seconds_per_commit_median": (
                    round(durations[len(durations) // 2], 2) if durations else None
                ),
                "failures": failures,
                "failure_causes": dict(Counter(f["cause"][:160] for f in failures)),
                "first_failure_text": first_failure,
                "catch_up_failed": not catch_up["ok"],
                "catch_up_tries": tries,
                "records_produced": sum(ends.values()),
                "missing_offsets": missing,
                "duplicated_offsets": duplicated,
                "metadata_table": metadata_timeline(table_path),
                "partitions": args.partitions,
                "records_per_commit": args.records,
                "process_per_commit": args.process_per_commit,
                "master": args.master,
                "quick_start": args.quick_start,
                "hudi_options": args.options,
                "seed": args.seed,
                "table_path": table_path if args.keep else None,
            }
            spark.stop()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"commits attempted {args.commits}, failed {len(failures)}, "
        f"{result['records_produced']} records, missing {missing}, duplicated {duplicated}, "
        f"{elapsed:.0f} s; metadata table {result['metadata_table']}; json: {args.json}"
    )
    exact = missing == 0 and duplicated == 0 and catch_up["ok"]
    return 0 if not failures and exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
