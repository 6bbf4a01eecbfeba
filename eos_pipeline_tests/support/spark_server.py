"""One Spark Connect server for the whole test session, started by the stack's own code.

Spark-heavy tests whose subject is not "a JVM of its own" (a kill must take the driver down, a
task-retry master, a fresh JVM per run) send their work to this server as thin clients instead
of each paying a Spark start and a cold first Hudi write. The server is what ``eos-pipeline
stack up`` starts (same jars, fence, Hudi settings), on a free port in a temporary state dir;
``EOS_TEST_SPARK_WORKERS=1`` puts it on a standalone master and one worker.

PySpark launches a classic session's JVM with a ``fork`` that gRPC's fork handlers can break
while channels are live: the session fixture therefore starts the in-process session first, and
the modules that open Connect sessions in the test process close them when they end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eos_pipeline.stack.services import Stack, StackConfig, free_port, pid_alive
from eos_pipeline.stack.spark_connect import start_spark

WORKERS = int(os.environ.get("EOS_TEST_SPARK_WORKERS", "0"))


def session_members(pid: int) -> set[int]:
    """Processes of the OS session led by ``pid`` (a launched JVM and what it spawned)."""
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == pid:
                    members.add(int(entry.name))
            except OSError:
                continue
    return members


@contextmanager
def connect_server(state_dir: Path, workers: int = WORKERS) -> Iterator[StackConfig]:
    """A running Connect server; on exit ``down`` must leave none of its processes."""
    config = StackConfig(
        state_dir=state_dir,
        spark=True,
        spark_connect_port=free_port(),
        spark_master_port=free_port(),
        spark_memory="1g",
        spark_workers=workers,
    )
    stack = Stack(config, say=lambda line: print(f"[stack] {line}"))
    started = time.monotonic()
    try:
        start_spark(stack)
    except BaseException:
        stack.down()
        raise
    print(f"[timing] spark connect server ready in {time.monotonic() - started:.1f}s")
    running = [s.pid for s in stack.status() if s.running and s.pid]
    members = {pid: session_members(pid) for pid in running}
    try:
        yield config
    finally:
        stack.down()
        left = {pid: {m for m in group if pid_alive(m)} for pid, group in members.items()}
        assert not any(left.values()), f"processes left after stack down: {left}"
