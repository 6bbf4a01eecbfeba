"""Test-only fault injection: kill the process at a named step boundary.

Fault tests must reach every step boundary of a sink deterministically, not by timing luck. Each
sink calls :func:`fault_point` at its boundaries; when the environment variable ``EOS_FAULT_STEP``
names that step, the process kills itself with SIGKILL, exactly as a lost machine or an OOM kill
would end it (no ``finally`` blocks, no atexit handlers, no flushed buffers).

``EOS_FAULT_STEP`` is unset in normal operation and the check is one dictionary lookup.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

FAULT_ENV: Final = "EOS_FAULT_STEP"

#: Step boundaries of the ClickHouse sink, in the order a batch passes them.
CLICKHOUSE_STEPS: Final = (
    "before_keeper_before",
    "after_keeper_before",
    "after_insert",
    "after_keeper_after",
)
#: Step boundaries of the Hudi sink. ``mid_hudi_write`` fires while Spark is writing: after the
#: commit is requested on the timeline and before it completes.
HUDI_STEPS: Final = (
    "before_hudi_write",
    "mid_hudi_write",
    "after_hudi_commit",
)

FaultHook = Callable[[str], None]


def armed_step() -> str | None:
    return os.environ.get(FAULT_ENV) or None


def kill_now(step: str) -> None:
    log.warning("fault injection: killing the process (SIGKILL) at step %s", step)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def fault_point(step: str) -> None:
    """Kill this process at ``step`` when ``EOS_FAULT_STEP`` names it; otherwise do nothing."""
    if armed_step() == step:
        kill_now(step)


def kill_when_hudi_write_starts(
    table_path: str, step: str = "mid_hudi_write", poll_seconds: float = 0.005
) -> threading.Event | None:
    """If ``step`` is armed, kill the process as soon as a new Hudi write is on the timeline.

    Hudi marks a write ``requested``, then ``inflight``, writes its data files, and only then
    completes the instant. A watcher thread polls the timeline folder and kills the process at
    the first new ``.inflight`` instant, i.e. inside the write. Returns an event that stops the
    watcher (set it once the write returned), or None when the step is not armed.
    """
    if armed_step() != step:
        return None
    root = Path(table_path)
    folders = [root / ".hoodie" / "timeline", root / ".hoodie"]

    def inflight() -> set[str]:
        names: set[str] = set()
        for folder in folders:
            if folder.is_dir():
                names.update(p.name for p in folder.iterdir() if p.name.endswith(".inflight"))
        return names

    before = inflight()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if inflight() - before:
                kill_now(step)
            time.sleep(poll_seconds)

    threading.Thread(target=watch, name="eos-fault-watcher", daemon=True).start()
    return stop


__all__ = [
    "CLICKHOUSE_STEPS",
    "FAULT_ENV",
    "HUDI_STEPS",
    "FaultHook",
    "armed_step",
    "fault_point",
    "kill_when_hudi_write_starts",
]
