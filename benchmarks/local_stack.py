"""A private ZooKeeper + Kafka (+ Spark Connect) on free ports for one benchmark, never a stack
the user runs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from eos_dev.stack.services import Stack, StackConfig, find_java, free_port


@contextlib.contextmanager
def private_stack(
    workdir: Path, say: Callable[[str], None] | None = None, *, spark: bool = False
) -> Iterator[StackConfig]:
    """Start the stack under ``workdir / "stack"``, yield its config, always stop it.

    ``spark``: the Spark Connect server of ``eos-pipeline stack up`` too, on a free port.
    """
    connect: dict[str, Any] = {"spark": True, "spark_connect_port": free_port()} if spark else {}
    config = StackConfig(
        state_dir=Path(workdir) / "stack",
        zookeeper_port=free_port(),
        kafka_port=free_port(),
        controller_port=free_port(),
        **connect,
    )
    stack = Stack(config, say=say or (lambda _line: None))
    try:
        stack.up()  # inside: a half-started stack is stopped too
        yield config
    finally:
        stack.down()


@contextlib.contextmanager
def private_registry(workdir: Path, say: Callable[[str], None] | None = None) -> Iterator[str]:
    """The stack's schema registry alone under ``workdir / "registry"`` on a free port: its
    Confluent-compatible URL; always stopped."""
    config = StackConfig(
        state_dir=Path(workdir) / "registry", registry=True, registry_port=free_port()
    )
    stack = Stack(config, say=say or (lambda _line: None))
    try:
        stack._start_registry(find_java())
        yield config.registry_url
    finally:
        stack.down()


__all__ = ["private_registry", "private_stack"]
