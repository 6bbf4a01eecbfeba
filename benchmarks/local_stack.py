"""A private ZooKeeper + Kafka on free ports for one benchmark, never a stack the user runs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from eos_pipeline.stack.services import Stack, StackConfig, free_port


@contextlib.contextmanager
def private_stack(workdir: Path, say: Callable[[str], None] | None = None) -> Iterator[StackConfig]:
    """Start the stack under ``workdir / "stack"``, yield its config, always stop it."""
    config = StackConfig(
        state_dir=Path(workdir) / "stack",
        zookeeper_port=free_port(),
        kafka_port=free_port(),
        controller_port=free_port(),
    )
    stack = Stack(config, say=say or (lambda _line: None))
    try:
        stack.up()  # inside: a half-started stack is stopped too
        yield config
    finally:
        stack.down()


__all__ = ["private_stack"]
