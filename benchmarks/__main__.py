"""``python -m benchmarks``: measure the pipeline against its limits and baselines.

Starts its own ZooKeeper and Kafka on free ports in a temporary directory (or uses the endpoints
given), produces the records once, runs every measurement, prints the tables and writes
``<out>/bench-<time>.json`` plus ``<out>/latest.json`` and ``<out>/latest.svg``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.harness import Options, run, save


def _sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v.replace("_", "")) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=100_000, help="records per topic")
    parser.add_argument("--record-bytes", type=int, default=1600, help="JSON size per record")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the main topic")
    parser.add_argument("--batch", type=int, default=25_000, help="records per batch (main)")
    parser.add_argument(
        "--batch-sizes", type=_sizes, default=(1_000, 5_000, 25_000), help="batch size sweep"
    )
    parser.add_argument(
        "--scaling", type=_sizes, default=(1, 4, 16), help="partition counts to compare"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="repeat the headline measurements, keep the best (shared machines are noisy)",
    )
    parser.add_argument("--spark", action="store_true", help="also measure a raw Spark read")
    parser.add_argument(
        "--hudi",
        action="store_true",
        help="also measure the Hudi path against its peers (see benchmarks/spark_phase.py)",
    )
    parser.add_argument(
        "--hudi-records",
        type=int,
        default=10_000,
        help="records for the Spark and Hudi measurements (Hudi writes are slow on 2 cores)",
    )
    parser.add_argument(
        "--hudi-rounds",
        type=int,
        default=3,
        help="repeat the four Hudi measurements, keep the best of each",
    )
    parser.add_argument(
        "--latency",
        action="store_true",
        help="also measure produce-to-visible latency through real Dagster sensors and runs, "
        "and a backlog of --records through them against the direct path",
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=60.0, help="how long records are produced"
    )
    parser.add_argument(
        "--latency-rate", type=float, default=20.0, help="records per second (all partitions)"
    )
    parser.add_argument(
        "--latency-interval", type=int, default=2, help="sensor interval for the latency run (s)"
    )
    parser.add_argument(
        "--latency-follow",
        type=float,
        default=10.0,
        help="clickhouse.follow.idle_seconds of the latency pipeline (it is also measured at 0)",
    )
    parser.add_argument("--no-dagster", action="store_true", help="skip the Dagster runs")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory probes")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run that only proves the harness works (CI); no figure means anything",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the main exactly-once runs with py-spy into this file (collapsed stacks)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results"), help="where results go"
    )
    parser.add_argument("--kafka-bootstrap", help="use this broker instead of starting a stack")
    parser.add_argument("--zookeeper-hosts", help="use this ZooKeeper instead of starting one")
    args = parser.parse_args(argv)
    if bool(args.kafka_bootstrap) != bool(args.zookeeper_hosts):
        parser.error("--kafka-bootstrap and --zookeeper-hosts go together")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    opts = Options(
        records=args.records,
        record_bytes=args.record_bytes,
        partitions=args.partitions,
        batch=args.batch,
        batch_sizes=args.batch_sizes,
        rounds=max(1, args.rounds),
        memory_batches=tuple(sorted({args.batch_sizes[0], args.batch})),
        scaling=args.scaling,
        dagster=not args.no_dagster,
        memory=not args.no_memory,
        spark=args.spark,
        hudi=args.hudi,
        hudi_records=args.hudi_records,
        hudi_rounds=max(1, args.hudi_rounds),
        latency=args.latency,
        latency_seconds=args.latency_seconds,
        latency_rate=args.latency_rate,
        latency_interval=args.latency_interval,
        latency_follow=args.latency_follow,
        out=args.out,
        kafka_bootstrap=args.kafka_bootstrap,
        zookeeper_hosts=args.zookeeper_hosts,
        profile=args.profile,
        say=lambda line: print(line, flush=True),
    )
    if args.smoke:
        opts.records, opts.partitions, opts.batch = min(args.records, 400), 2, 100
        opts.batch_sizes, opts.scaling, opts.empty_runs = (50, 100), (1, 2), 2
        opts.rounds, opts.memory_batches, opts.hudi_rounds = 1, (100,), 1
        opts.latency_seconds, opts.latency_rate = min(args.latency_seconds, 5.0), 4.0
    doc = run(opts)
    path = save(doc, opts.out)
    print()
    print(doc["table"])
    print()
    print(doc["overheads_table"])
    print()
    print("headline ratios:", doc["ratios"])
    print("exactly-once checks:", "all passed" if all(doc["checks"].values()) else doc["checks"])
    print(f"written: {path}")
    return 0 if all(doc["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
