"""``eos-pipeline``: the project's command line (local stack, artifact fetch, the demo job)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from eos_pipeline.stack.artifacts import ArtifactError, default_cache_dir, ensure_all
from eos_pipeline.stack.services import Stack, StackConfig, StackError

EPILOG = """\
environment variables (flags win over them):
  EOS_STACK_DIR              state directory of the local stack (default: ./.state/stack)
  EOS_ZOOKEEPER_PORT         ZooKeeper client port (default: 2181)
  EOS_KAFKA_PORT             Kafka broker port (default: 9092)
  EOS_KAFKA_CONTROLLER_PORT  Kafka KRaft controller port (default: 9093)
  EOS_ARTIFACT_CACHE         where fetched JVM jars are kept (default: ./.cache/jvm)
  EOS_MAVEN_REPOSITORY       Maven Central mirror to fetch from
  EOS_PIPELINES_FILE         pipelines file of the Dagster code location (default: ./pipelines.yaml)

examples:
  eos-pipeline stack up                  start ZooKeeper and Kafka, wait until both answer
  eos-pipeline stack status              show what runs where
  eos-pipeline stack down                stop both, leaving no process behind
  eos-pipeline demo                      run the main job end to end (Dagster drives it)
  eos-pipeline demo --keep-ui            ... and keep the Dagster UI running afterwards
"""


def _add_stack_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, help="data, logs and pid files of the stack")
    parser.add_argument("--zookeeper-port", type=int, help="ZooKeeper client port")
    parser.add_argument("--kafka-port", type=int, help="Kafka broker (PLAINTEXT) port")
    parser.add_argument("--controller-port", type=int, help="Kafka KRaft controller port")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eos-pipeline",
        description="Exactly-once Kafka -> ClickHouse / Hudi pipelines: local stack and tools.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    stack = commands.add_parser(
        "stack",
        help="start, stop or inspect the local ZooKeeper + Kafka",
        description="Manage the local development stack (ZooKeeper and a KRaft Kafka broker).",
    )
    stack.add_argument("action", choices=["up", "down", "status"], help="what to do")
    _add_stack_options(stack)

    fetch = commands.add_parser(
        "fetch",
        help="download the pinned JVM jars into the local cache",
        description="Fetch Kafka, ZooKeeper, Spark's Kafka connector and the Hudi bundle from "
        "Maven Central, verified by SHA-256. Jars already cached are reused.",
    )
    fetch.add_argument("--cache-dir", type=Path, help=f"default: {default_cache_dir()}")

    demo = commands.add_parser(
        "demo",
        help="run the main job end to end on the local stack, driven by Dagster",
        description="Bring the local stack up, produce sample events (a few malformed), start "
        "`dagster dev` (UI URL printed) and let its sensors move the events into ClickHouse and "
        "Hudi; when both are caught up, print per partition what landed next to the Kafka "
        "offsets, then stop Dagster (or keep the UI with --keep-ui).",
    )
    _add_stack_options(demo)
    demo.add_argument("--work-dir", type=Path, default=Path(".state/demo"), help="demo outputs")
    demo.add_argument("--records", type=int, default=1000, help="records to produce")
    demo.add_argument("--partitions", type=int, default=3, help="partitions of the demo topic")
    demo.add_argument("--keep-ui", action="store_true", help="keep Dagster running at the end")
    demo.add_argument(
        "--dagster-home", type=Path, default=Path(".dagster_home"), help="DAGSTER_HOME to use"
    )
    demo.add_argument("--port", type=int, help="Dagster UI port (default: a free one)")
    demo.add_argument(
        "--pipelines-file",
        type=Path,
        help="pipelines file (default: EOS_PIPELINES_FILE or ./pipelines.yaml)",
    )
    demo.add_argument(
        "--sensor-interval", type=int, default=3, help="seconds between sensor evaluations"
    )
    demo.add_argument(
        "--timeout", type=float, default=900.0, help="give up if not caught up after this long"
    )
    demo.add_argument("--down", action="store_true", help="stop the stack when done")
    return parser


def _stack_config(args: argparse.Namespace) -> StackConfig:
    return StackConfig.from_env(
        state_dir=args.state_dir,
        zookeeper_port=args.zookeeper_port,
        kafka_port=args.kafka_port,
        controller_port=args.controller_port,
    )


def _run_stack(args: argparse.Namespace) -> int:
    stack = Stack(_stack_config(args))
    if args.action == "up":
        stack.up()
        print(f"zookeeper: {stack.config.zookeeper_hosts}")
        print(f"kafka:     {stack.config.kafka_bootstrap}")
        print(f"state:     {stack.config.state_dir}  (stop with: eos-pipeline stack down)")
    elif args.action == "down":
        stack.down()
        print("stack stopped")
    else:
        for service in stack.status():
            state = f"running (pid {service.pid})" if service.running else "stopped"
            print(f"{service.name:<10} {state:<22} {service.endpoint:<22} log: {service.log}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "stack":
            return _run_stack(args)
        if args.command == "fetch":
            for name, jars in ensure_all(args.cache_dir, progress=print).items():
                print(f"{name}: {len(jars)} jars in {jars[0].parent}")
            return 0
        if args.command == "demo":
            from eos_pipeline.demo import run_demo

            return run_demo(_stack_config(args), args)
    except (StackError, ArtifactError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 2  # pragma: no cover - argparse rejects unknown commands before this


if __name__ == "__main__":
    sys.exit(main())
