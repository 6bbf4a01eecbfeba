"""``eos-pipeline``: the project's command line (local stack, artifact fetch, the demo job)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from eos_pipeline.adapters.jvm_artifacts import ArtifactError, default_cache_dir, ensure_all

EPILOG = """\
environment variables (flags win over them):
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
  EOS_ARTIFACT_CACHE         where fetched JVM jars are kept (default: ./.cache/jvm)
  EOS_MAVEN_REPOSITORY       Maven Central mirror to fetch from
  EOS_DEFS_DIR               defs folder of the code location (default: eos_pipeline/defs)

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
  eos-pipeline failover --pipeline P --to B   switch pipeline P to cluster B (and back: --to A)
  eos-pipeline failover status --pipeline P  active cluster, switch in flight, MM2's lag both ways
  eos-pipeline replay --pipeline P --sink clickhouse --partition 0 --from 100 --to 200
                                         show what a replay of offsets [100, 200) would do
  eos-pipeline replay ... --yes          ... and do it
  eos-pipeline migrate-config pipelines.yaml   an old pipelines file as defs.yaml folders
"""


DEFS_HELP = "defs folder of the pipelines (default: EOS_DEFS_DIR, else eos_pipeline/defs)"


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

    fetch = commands.add_parser(
        "fetch",
        help="download the pinned JVM jars into the local cache, build Spark's class archive",
        description="Fetch Kafka, ZooKeeper, Spark's Kafka connector and the Hudi bundle from "
        "Maven Central, verified by SHA-256. Jars already cached are reused. Then build the "
        "class-data archive Spark's JVMs start from (once per Spark version, 20-45 s).",
    )
    fetch.add_argument("--cache-dir", type=Path, help=f"default: {default_cache_dir()}")

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

    failover = commands.add_parser(
        "failover",
        help="switch a pipeline to another Kafka cluster (MirrorMaker 2 replica) or back",
        description="Make cluster TO the one PIPELINE reads: positions move through MM2's offset "
        "syncs, and the sinks resume exactly after the last record they wrote (found by "
        "fingerprint). Safe to rerun after any crash; refuses (changing nothing) an unknown "
        "alias, a cluster MM2 does not replicate to, a switch while another is in flight, and a "
        "last-written record missing where its copy must be.",
    )
    failover.add_argument(
        "action",
        nargs="?",
        choices=("status",),
        help="status: show the active cluster, any switch in flight and, per direction, "
        "MirrorMaker 2's lag per partition and whether it is copying now (reads only)",
    )
    failover.add_argument("--pipeline", required=True, help="pipeline name (its defs.yaml)")
    failover.add_argument("--to", help="alias of the cluster to switch to")
    failover.add_argument(
        "--sample-seconds",
        type=float,
        default=1.0,
        help="status: how long to watch each replica's end for movement (default: 1)",
    )
    failover.add_argument(
        "--fresh-seconds",
        type=float,
        default=60.0,
        help="status: an offset sync younger than this shows MM2 at work (default: 60)",
    )
    failover.add_argument("--defs", type=Path, help=DEFS_HELP)
    replay = commands.add_parser(
        "replay",
        help="re-process a range of one partition on purpose (after a fix or a repair)",
        description="Re-process offsets [FROM, TO) of one partition into one sink, on purpose: "
        "ClickHouse deletes the range's rows and inserts it again, Hudi upserts it again; the "
        "sink's position does not move and dead letters of the range are judged anew. Without "
        "--yes only the plan is printed and nothing is written. Safe to rerun after a crash "
        "(an interrupted replay must be finished before another range of the partition). Runs "
        "the Dagster job <pipeline>_replay_<sink>, recorded in DAGSTER_HOME's instance if set.",
    )
    replay.add_argument("--pipeline", required=True, help="pipeline name (its defs.yaml)")
    replay.add_argument("--sink", required=True, choices=("clickhouse", "hudi"))
    replay.add_argument("--partition", required=True, type=int, help="Kafka partition number")
    replay.add_argument(
        "--from", dest="start", required=True, type=int, help="first offset to replay"
    )
    replay.add_argument(
        "--to", dest="end", type=int, help="offset after the last one (default: sink's position)"
    )
    replay.add_argument("--topic", help="topic (default: the pipeline's first)")
    replay.add_argument("--yes", action="store_true", help="replay (default: dry run)")
    replay.add_argument("--defs", type=Path, help=DEFS_HELP)
    migrate = commands.add_parser(
        "migrate-config",
        help="move an old pipelines.yaml into defs.yaml folders (once)",
        description="Write one folder per pipeline (type: eos_pipeline.KafkaTablesComponent) and "
        "shared/ (keeper, ClickHouse, Spark) into the defs folder; ${NAME:-default} becomes "
        "{{ env.NAME or 'default' }}, {env: NAME} secrets stay. Validates first; writes nothing "
        "over an existing folder. Comments are not carried over.",
    )
    migrate.add_argument("pipelines_yaml", type=Path, help="the old pipelines file")
    migrate.add_argument("--defs", type=Path, help=DEFS_HELP)
    return parser


def _run_replay(args: argparse.Namespace) -> int:
    """Run the replay job in this process: the CLI and the UI share one code path."""
    import dagster as dg

    from eos_pipeline.components.config import ConfigError
    from eos_pipeline.components.project import load_project
    from eos_pipeline.components.replay import replay_job_name
    from eos_pipeline.core.replay import ReplayRefused

    try:
        defs = load_project(args.defs).definitions()
        name = replay_job_name(args.pipeline, args.sink)
        try:
            job = defs.get_job_def(name)
        except dg.DagsterInvariantViolationError:
            print(f"error: no job {name}: no such pipeline or sink", file=sys.stderr)
            return 1
        op = f"{args.pipeline}_replay_{args.sink}_range"
        config = {"partition": args.partition, "start": args.start, "dry_run": not args.yes}
        if args.end is not None:
            config["end"] = args.end
        if args.topic:
            config["topic"] = args.topic
        instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else None
        result = job.execute_in_process(
            run_config={"ops": {op: {"config": config}}},
            instance=instance,
            raise_on_error=False,
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not result.success:
        failure = next((e for e in result.all_events if e.is_step_failure), None)
        data = failure.step_failure_data if failure else None
        cause = data.error.cause if data and data.error and data.error.cause else None
        message = (cause or (data.error if data else None)).message if data else "run failed"
        kind = "refused" if cause and cause.cls_name == ReplayRefused.__name__ else "error"
        print(f"{kind}: {message.strip()}", file=sys.stderr)
        return 1
    out = result.output_for_node(op)
    for line in out.pop("plan"):
        print(line)
    if out.pop("dry_run"):
        print("dry run: nothing was written; add --yes to replay")
        return 0
    for key, value in out.items():
        print(f"{key}: {value}")
    return 0


def _run_failover(args: argparse.Namespace) -> int:
    from eos_pipeline.adapters.failover import read_status, switch
    from eos_pipeline.adapters.kafka import KafkaReadError
    from eos_pipeline.adapters.keeper import (
        KeeperSettings,
        KeeperStateStore,
        KeeperUnavailableError,
    )
    from eos_pipeline.components.config import ConfigError, EnvRef
    from eos_pipeline.components.project import load_project
    from eos_pipeline.components.source import describe, failover_pipeline, find_pipeline
    from eos_pipeline.core.failover import FailoverError

    if (args.action == "status") == (args.to is not None):
        print("error: give either --to ALIAS (switch) or `status`", file=sys.stderr)
        return 2
    try:
        config = load_project(args.defs).config
        fp = failover_pipeline(find_pipeline(config, args.pipeline))
        password = config.keeper.password
        if isinstance(password, EnvRef):
            password = os.environ.get(password.env)
        auth = (config.keeper.username, password) if config.keeper.username and password else None
        with KeeperStateStore(KeeperSettings(config.keeper.hosts, config.keeper.root, auth)) as st:
            if args.action == "status":
                status = read_status(
                    st, fp, sample_s=args.sample_seconds, fresh_s=args.fresh_seconds
                )
                print("\n".join(status.lines()))
                return 0
            report = switch(st, fp, args.to)
    except (ConfigError, FailoverError, KeeperUnavailableError, KafkaReadError) as exc:
        # the expected faults, named with their endpoint (a cluster or ZooKeeper not answering)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, value in describe(report).items():
        print(f"{name}: {value.value}")
    return 0


def _run_migrate(args: argparse.Namespace) -> int:
    from eos_pipeline.components.config import ConfigError, migrate
    from eos_pipeline.components.project import defs_dir

    target = args.defs.resolve() if args.defs else defs_dir()
    try:
        written = migrate(args.pipelines_yaml, target)
    except (ConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    print(
        f"check them with `dg check yaml` (or EOS_DEFS_DIR={target} eos-pipeline ...); "
        f"then delete {args.pipelines_yaml}"
    )
    return 0


def _run_dev_tool(args: argparse.Namespace) -> int:
    """`stack` and `demo` live in the checkout's dev tools (devtools/), not in the product."""
    try:
        from eos_dev.cli import run
    except ImportError:
        print(
            f"error: `eos-pipeline {args.command}` needs the dev tools of a checkout: "
            "pip install -e devtools (make demo / make test install them)",
            file=sys.stderr,
        )
        return 1
    return run(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command in ("stack", "demo"):
            return _run_dev_tool(args)
        if args.command == "fetch":
            from concurrent.futures import ThreadPoolExecutor

            from eos_pipeline.adapters.spark import build_fencing_jar
            from eos_pipeline.adapters.spark_cds import ensure_archive

            with ThreadPoolExecutor(1) as pool:  # CPU-bound, beside the network-bound downloads
                archive = pool.submit(ensure_archive, args.cache_dir, progress=print)
                for name, jars in ensure_all(args.cache_dir, progress=print).items():
                    print(f"{name}: {len(jars)} jars in {jars[0].parent}")
                    for hudi in (j for j in jars if name == "hudi" and "hudi-spark" in j.name):
                        print(f"fencing: {build_fencing_jar(hudi, args.cache_dir)}")
                archive.result()  # Spark's JVMs start faster with it; None: they start as before
            return 0
        if args.command == "failover":
            return _run_failover(args)
        if args.command == "migrate-config":
            return _run_migrate(args)
        if args.command == "replay":
            return _run_replay(args)
    except ArtifactError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 2  # pragma: no cover - argparse rejects unknown commands before this


if __name__ == "__main__":
    sys.exit(main())
