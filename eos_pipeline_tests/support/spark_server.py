"""One Spark Connect server for the whole test session, started by the stack's own code.

Spark-heavy tests whose subject is not "a JVM of its own" (a kill must take the driver down, a
task-retry master, a fresh JVM per run) send their work to this server as thin clients instead
of each paying a Spark start and a cold first Hudi write. The server is what ``eos-pipeline
stack up`` starts (same code, jars, fence, Hudi settings), on a free port in a temporary state
dir; ``EOS_TEST_SPARK_WORKERS=1`` puts it on a standalone master and one worker.

Its JVM boots for 15-25 s. When the collected tests need it, the session launches it at once
(:class:`SessionServer`) and waits for it only where the first such test asks for it, so it
boots while the tests before run, as ``stack up`` lets it boot while ZooKeeper and Kafka start.

PySpark launches a classic session's JVM with a ``fork`` that gRPC's fork handlers can break
while channels are live: the launch opens no channel (the readiness probe does, in the wait),
the session fixture starts the in-process session before it waits, and the modules that open
Connect sessions in the test process close them when they end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from eos_dev.stack.services import Stack, StackConfig, free_port, pid_alive
from eos_dev.stack.spark_connect import launch_spark

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


class SessionServer:
    """A Connect server launched now and waited for on first use; :meth:`stop` must leave
    none of its processes."""

    def __init__(self, state_dir: Path, workers: int = WORKERS) -> None:
        self.config = StackConfig(
            state_dir=state_dir,
            spark=True,
            spark_connect_port=free_port(),
            spark_master_port=free_port(),
            spark_memory="1g",
            spark_workers=workers,
        )
        self.stack = Stack(self.config, say=lambda line: print(f"[stack] {line}"))
        self.began = time.monotonic()
        self._wait: Callable[[], None] | None = None
        self._members: dict[int, set[int]] = {}
        try:
            self._wait = launch_spark(self.stack)
        except BaseException:
            self.stack.down()
            raise

    def ready(self) -> StackConfig:
        """The running server's config, once it answered a query (waits the first time)."""
        if self._wait is not None:
            try:
                self._wait()
            except BaseException:
                self.stop()
                raise
            self._wait = None
            print(
                f"[timing] spark connect server ready {time.monotonic() - self.began:.1f}s "
                "after its launch"
            )
            running = [s.pid for s in self.stack.status() if s.running and s.pid]
            self._members = {pid: session_members(pid) for pid in running}
        return self.config

    def stop(self) -> None:
        self.stack.down()
        left = {p: {m for m in group if pid_alive(m)} for p, group in self._members.items()}
        assert not any(left.values()), f"processes left after stack down: {left}"
