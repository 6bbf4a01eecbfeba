"""The checkout's half of ``eos-pipeline``: the local stack and the demo (not in the product)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

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
