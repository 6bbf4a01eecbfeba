"""A private ZooKeeper + Kafka (+ Spark Connect) on free ports for one benchmark, never a stack
the user runs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from eos_dev.stack.services import Stack, StackConfig, free_port


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


__all__ = ["private_stack"]
