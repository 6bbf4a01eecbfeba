"""``eos-pipeline``: the project's command line (local stack, artifact fetch, the demo job)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from eos_pipeline.adapters.jvm_artifacts import ArtifactError, default_cache_dir, ensure_all

try:  # `stack` and `demo` live in the checkout's dev tools (devtools/), not in the product
    from eos_dev import cli as dev_tools
except ImportError:
    dev_tools = None

EPILOG = """\
environment variables:
  EOS_ARTIFACT_CACHE         where fetched JVM jars are kept (default: ./.cache/jvm)
  EOS_MAVEN_REPOSITORY       Maven Central mirror to fetch from
  EOS_DEFS_DIR               defs folder of the code location (default: eos_pipeline/defs)

examples:
  eos-pipeline failover --pipeline P --to B   switch pipeline P to cluster B (and back: --to A)
  eos-pipeline failover status --pipeline P  active cluster, switch in flight, MM2's lag both ways
  eos-pipeline replay --pipeline P --sink clickhouse --partition 0 --from 100 --to 200
                                         show what a replay of offsets [100, 200) would do
  eos-pipeline replay ... --yes          ... and do it
  eos-pipeline migrate-config pipelines.yaml   an old pipelines file as defs.yaml folders
"""


DEFS_HELP = "defs folder of the pipelines (default: EOS_DEFS_DIR, else eos_pipeline/defs)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eos-pipeline",
        description="Exactly-once Kafka -> ClickHouse / Hudi pipelines: local stack and tools.",
        epilog=EPILOG if dev_tools is None else f"{dev_tools.EPILOG}\n{EPILOG}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    _dev_tool_command(commands, "stack", "the local stack")
    fetch = commands.add_parser(
        "fetch",
        help="download the pinned JVM jars into the local cache, build Spark's class archive",
        description="Fetch Kafka, ZooKeeper, Spark's Kafka connector and the Hudi bundle from "
        "Maven Central, verified by SHA-256. Jars already cached are reused. Then build the "
        "class-data archive Spark's JVMs start from (once per Spark version, 20-45 s).",
    )
    fetch.add_argument("--cache-dir", type=Path, help=f"default: {default_cache_dir()}")

    _dev_tool_command(commands, "demo", "the demo")
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


def _dev_tool_command(commands: Any, name: str, what: str) -> None:
    if dev_tools is not None:
        getattr(dev_tools, f"add_{name}_command")(commands)
    else:  # parsed all the same: _run_dev_tool names the fix
        stub = commands.add_parser(name, help=f"{what} (needs the dev tools of a checkout)")
        stub.add_argument("args", nargs=argparse.REMAINDER)


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
    if dev_tools is None:
        print(
            f"error: `eos-pipeline {args.command}` needs the dev tools of a checkout: "
            "pip install -e devtools (make demo / make test install them)",
            file=sys.stderr,
        )
        return 1
    return dev_tools.run(args)


def _run_fetch(args: argparse.Namespace) -> int:
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


_COMMANDS = {
    "stack": _run_dev_tool,
    "demo": _run_dev_tool,
    "fetch": _run_fetch,
    "failover": _run_failover,
    "migrate-config": _run_migrate,
    "replay": _run_replay,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return _COMMANDS[args.command](args)
    except ArtifactError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
