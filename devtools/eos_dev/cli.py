"""The checkout's half of ``eos-pipeline``: the local stack and the demo (not in the product)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from eos_dev.stack.mirror import MirrorCluster, MirrorConfig, MirrorStack
from eos_dev.stack.secure import SecureStack
from eos_dev.stack.secure_config import PIPELINE, SecureStackConfig
from eos_dev.stack.services import ServiceStatus, Stack, StackConfig, StackError


def run(args: argparse.Namespace) -> int:
    """Run `stack` or `demo` with the arguments the product's parser took."""
    try:
        if args.command == "stack":
            return _run_stack(args)
        from eos_dev.demo import run_demo

        if args.spark is None and "EOS_SPARK" not in os.environ:
            args.spark = True  # as `stack up`: runs are thin clients of its server
        return run_demo(_stack_config(args), args)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _stack_config(args: argparse.Namespace) -> StackConfig:
    # `--spark` exists on `stack` and `demo`; the other Spark options on `stack` only.
    return StackConfig.from_env(
        state_dir=args.state_dir,
        zookeeper_port=args.zookeeper_port,
        kafka_port=args.kafka_port,
        controller_port=args.controller_port,
        spark=getattr(args, "spark", None),
        spark_connect_port=getattr(args, "spark_connect_port", None),
        spark_memory=getattr(args, "spark_memory", None),
        spark_cores=getattr(args, "spark_cores", None),
        spark_workers=getattr(args, "spark_workers", None),
        spark_master_port=getattr(args, "spark_master_port", None),
        # `stack up` brings the schema registry too unless EOS_REGISTRY says otherwise.
        registry=(
            True
            if args.command == "stack" and args.action == "up" and "EOS_REGISTRY" not in os.environ
            else None
        ),
    )


def _mirror_config(args: argparse.Namespace, main: StackConfig) -> MirrorConfig:
    """The failover stack: the main Kafka as the first cluster, a second one started beside it."""
    aliases = [a.strip() for a in args.aliases.split(",")]
    if len(aliases) != 2:
        raise StackError(f"--aliases needs two comma-separated aliases, got {args.aliases!r}")
    return MirrorConfig(
        state_dir=main.state_dir / "mirror",
        host=main.host,
        clusters=(
            MirrorCluster(aliases[0], main.kafka_port, main.controller_port, managed=False),
            MirrorCluster(aliases[1], args.mirror_kafka_port, args.mirror_controller_port),
        ),
        rest_port=args.mirror_rest_port,
        cache_dir=main.cache_dir,
    )


def _mirror_services(mirror_dir: Path) -> list[ServiceStatus]:
    """The failover stack's own processes, if one was started (the main Kafka is listed already)."""
    if MirrorConfig.load(mirror_dir) is None:
        return []
    mirror = MirrorStack.from_state_dir(mirror_dir)
    managed = {f"kafka-{c.alias}" for c in mirror.config.clusters if c.managed}
    return [s for s in mirror.status() if s.name in managed or s.name == "mirrormaker"]


def _run_stack(args: argparse.Namespace) -> int:
    if args.action == "up" and args.spark is None and "EOS_SPARK" not in os.environ:
        args.spark = True  # `stack up` brings the whole stack, Spark included, unless told
    stack = Stack(_stack_config(args))
    if args.action == "up":
        # A bad failover option is refused before anything starts.
        mirror_config = _mirror_config(args, stack.config) if args.mirror else None
        stack.up()
        print(f"zookeeper: {stack.config.zookeeper_hosts}")
        print(f"kafka:     {stack.config.kafka_bootstrap}")
        if stack.config.registry:
            print(f"registry:  {stack.config.registry_url}")
        if stack.config.spark:
            print(f"spark:     {stack.config.spark_connect_url}")
        if mirror_config is not None:
            mirror = MirrorStack(mirror_config)
            mirror.up()
            first, second = mirror.config.aliases
            print(
                f"clusters:  {first}={mirror.bootstrap(first)} {second}={mirror.bootstrap(second)}"
            )
            print(f"mm2:       {mirror.config.rest_url}  (T on {first} is {first}.T on {second})")
        if getattr(args, "secure", False):
            _secure_up(stack.config)
        print(f"state:     {stack.config.state_dir}  (stop with: eos-pipeline stack down)")
    elif args.action == "restart-mirror":
        mirror_dir = stack.config.state_dir / "mirror"
        if MirrorConfig.load(mirror_dir) is None:
            raise StackError(
                f"no failover stack in {mirror_dir}: start one with "
                "`eos-pipeline stack up --mirror`"
            )
        mirror = MirrorStack.from_state_dir(mirror_dir)
        mirror.restart_mirror()
        print(f"mm2:       {mirror.config.rest_url}  replicating again")
    elif args.action == "down":
        mirror_dir = stack.config.state_dir / "mirror"
        if MirrorConfig.load(mirror_dir) is not None:
            # MirrorMaker 2 first: it holds clients of the main Kafka.
            MirrorStack.from_state_dir(mirror_dir).down()
        secure_dir = stack.config.state_dir / "secure"
        if secure_dir.exists():
            SecureStack(SecureStackConfig.default(secure_dir)).down()
        stack.down()
        print("stack stopped")
    else:
        secure_dir = stack.config.state_dir / "secure"
        secured = (
            SecureStack(SecureStackConfig.default(secure_dir)).status()
            if secure_dir.exists()
            else []
        )
        for service in (
            stack.status() + _mirror_services(stack.config.state_dir / "mirror") + secured
        ):
            state = f"running (pid {service.pid})" if service.running else "stopped"
            print(f"{service.name:<16} {state:<22} {service.endpoint:<26} log: {service.log}")
    return 0


def _secure_up(main: StackConfig) -> None:
    """The secured replicated stack beside the plain one; secrets are named, never printed."""
    secure = SecureStack(
        SecureStackConfig.default(main.state_dir / "secure", cache_dir=main.cache_dir)
    )
    secure.up()
    cfg = secure.config
    print(f"secured kafka:     {cfg.kafka_bootstrap}  (SASL_SSL SCRAM-SHA-512, user {PIPELINE})")
    print(f"  ca:              {cfg.tls_dir / 'ca.pem'}")
    print(f"  password file:   {cfg.state_dir / 'secrets' / (PIPELINE + '.password')}")
    print(
        f"secured zookeeper: {cfg.zookeeper_hosts}  (digest user eos-pipeline, "
        f"root {cfg.keeper_root})"
    )
    print(f"  password file:   {cfg.state_dir / 'secrets' / 'keeper-eos-pipeline.password'}")


#: The dev tools' part of ``eos-pipeline --help``.
EPILOG = """\
environment variables of the local stack and the demo (flags win over them):
  EOS_STACK_DIR              state directory of the local stack (default: ./.state/stack)
  EOS_ZOOKEEPER_PORT         ZooKeeper client port (default: 2181)
  EOS_KAFKA_PORT             Kafka broker port (default: 9092)
  EOS_KAFKA_CONTROLLER_PORT  Kafka KRaft controller port (default: 9093)
  EOS_SPARK                  1/0: whether `stack up` / `demo` start Spark Connect (default: 1)
  EOS_SPARK_CONNECT_PORT     Spark Connect (sc://) port (default: 15002)
  EOS_SPARK_MEMORY           heap of the Spark driver and of each executor (default: 2g)
  EOS_SPARK_CORES            cores of local[N], or of each standalone worker (default: 2)
  EOS_SPARK_WORKERS          0: Spark in local mode; N: a standalone master + N workers (default: 0)
  EOS_SPARK_MASTER_PORT      standalone master port (default: 7077)
  EOS_REGISTRY               1/0: whether `stack up` starts the schema registry (default: 1)
  EOS_REGISTRY_PORT          schema registry port, API at /apis/ccompat/v7 (default: 8081)
  EOS_REGISTRY_ADDRESS       host:port of the registry the demo's Avro pipeline reads
                             (default: the stack's, which `demo` then starts)
  EOS_STACK_JVM_OPTIONS      options of every JVM the stack starts (default: -XX:+UseG1GC)

examples:
  eos-pipeline stack up                  start ZooKeeper, Kafka, the schema registry and Spark
                                         Connect, wait for each
  eos-pipeline stack up --no-spark       ... only ZooKeeper and Kafka
  eos-pipeline stack up --spark-workers 1  ... Spark Connect on a standalone master + 1 worker
  eos-pipeline stack status              show what runs where
  eos-pipeline stack up --mirror         ... plus a second Kafka cluster (B) and MirrorMaker 2
  eos-pipeline stack up --secure         ... plus 3 SASL_SSL brokers (ACLs) and a ZooKeeper ensemble
                                         copying topics both ways (T on A is A.T on B)
  eos-pipeline stack restart-mirror      restart MirrorMaker 2 (it resumes from its offsets)
  eos-pipeline stack down                stop everything, leaving no process behind
  eos-pipeline demo                      run the main job end to end (Dagster drives it)
  eos-pipeline demo --keep-ui            ... and keep the Dagster UI running afterwards
  eos-pipeline demo --no-spark           ... each Hudi run with a Spark of its own (no server)
"""


def add_stack_command(commands: Any) -> None:
    """``eos-pipeline stack`` (``commands``: the product parser's subparsers)."""
    stack = commands.add_parser(
        "stack",
        help="start, stop or inspect the local ZooKeeper + Kafka (+ Spark Connect)",
        description="Manage the local development stack (ZooKeeper, a KRaft Kafka broker and a "
        "Spark Connect server, optionally on a standalone Spark master + workers).",
    )
    stack.add_argument(
        "action",
        choices=["up", "down", "status", "restart-mirror"],
        help="what to do (restart-mirror: stop and start MirrorMaker 2 of `up --mirror`, "
        "then prove both flows replicate)",
    )
    _add_stack_options(stack)
    mirror = stack.add_argument_group(
        "failover stack (status and down cover it whenever it was started)"
    )
    mirror.add_argument(
        "--mirror",
        action="store_true",
        help="with up: also start a second KRaft cluster and MirrorMaker 2 replicating both ways "
        "(the main Kafka is the first cluster)",
    )
    mirror.add_argument(
        "--aliases", default="A,B", help="MM2 aliases of the main and the second cluster (A,B)"
    )
    mirror.add_argument(
        "--mirror-kafka-port", type=int, default=9094, help="second cluster's broker port"
    )
    mirror.add_argument(
        "--mirror-controller-port", type=int, default=9095, help="second cluster's controller port"
    )
    mirror.add_argument(
        "--mirror-rest-port", type=int, default=9096, help="MirrorMaker 2's internal REST port"
    )
    stack.add_argument(
        "--secure",
        action="store_true",
        help="with up: also start the secured replicated stack (3 SASL_SSL brokers with ACLs, "
        "a 3-server ZooKeeper with auth; fixed ports 19101-19118); docs/security.md",
    )
    spark = stack.add_argument_group("Spark")
    spark.add_argument(
        "--spark",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start the Spark Connect server with `up` (default: on, or EOS_SPARK)",
    )
    spark.add_argument("--spark-connect-port", type=int, help="Spark Connect (sc://) port")
    spark.add_argument("--spark-memory", help="heap of the driver and of each executor, e.g. 2g")
    spark.add_argument("--spark-cores", type=int, help="cores of local[N] or of each worker")
    spark.add_argument(
        "--spark-workers", type=int, help="0: local mode; N: standalone master + N workers"
    )
    spark.add_argument("--spark-master-port", type=int, help="standalone master port")


def add_demo_command(commands: Any) -> None:
    """``eos-pipeline demo``."""
    demo = commands.add_parser(
        "demo",
        help="run the main job end to end on the local stack, driven by Dagster",
        description="Bring the local stack up (schema registry included), produce sample "
        "events to a JSON topic and an Avro one (a few malformed), start `dagster dev` (UI URL "
        "printed) and let its sensors move the events into ClickHouse and Hudi; when all is "
        "caught up, print per partition what landed next to the Kafka offsets and check that "
        "each topic is exact, then stop Dagster (or keep the UI with --keep-ui).",
    )
    _add_stack_options(demo)
    demo.add_argument("--work-dir", type=Path, default=Path(".state/demo"), help="demo outputs")
    demo.add_argument("--records", type=int, default=1000, help="records to produce")
    demo.add_argument("--partitions", type=int, default=3, help="partitions of each demo topic")
    demo.add_argument("--keep-ui", action="store_true", help="keep Dagster running at the end")
    demo.add_argument(
        "--dagster-home", type=Path, default=Path(".dagster_home"), help="DAGSTER_HOME to use"
    )
    demo.add_argument("--port", type=int, help="Dagster UI port (default: a free one)")
    demo.add_argument(
        "--defs-dir",
        type=Path,
        help="defs folder of the pipelines (default: EOS_DEFS_DIR or eos_pipeline/defs)",
    )
    demo.add_argument(
        "--sensor-interval", type=int, default=3, help="seconds between sensor evaluations"
    )
    demo.add_argument(
        "--timeout", type=float, default=900.0, help="give up if not caught up after this long"
    )
    demo.add_argument("--down", action="store_true", help="stop the stack when done")
    demo.add_argument(
        "--spark",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run Spark work on the stack's Connect server (default: on, or EOS_SPARK); "
        "--no-spark: each Hudi run starts Spark in its own process",
    )
    demo.add_argument(
        "--postgres-url",
        help="keep the Dagster instance in this PostgreSQL database (postgresql://user:pw@host/db)"
        " instead of SQLite files, as in production",
    )


def _add_stack_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, help="data, logs and pid files of the stack")
    parser.add_argument("--zookeeper-port", type=int, help="ZooKeeper client port")
    parser.add_argument("--kafka-port", type=int, help="Kafka broker (PLAINTEXT) port")
    parser.add_argument("--controller-port", type=int, help="Kafka KRaft controller port")
