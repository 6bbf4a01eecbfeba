"""Fault injection for the fault suite: kill the process at a named step boundary.

Fault tests must reach every step boundary of a sink deterministically, not by timing luck. Each
sink calls its ``fault`` hook at its boundaries (:mod:`eos_pipeline.sinks.hooks`; the product's
hook does nothing); the hooks here call :func:`fault_point`, and when the environment variable
``EOS_FAULT_STEP`` names that step, the process kills itself with SIGKILL, exactly as a lost
machine or an OOM kill would end it (no ``finally`` blocks, no atexit handlers, no flushed
buffers). Child processes of the suite pass these hooks to the sinks they build; Dagster runs
get them from the test code location :mod:`eos_pipeline_tests.support.fault_definitions`.

``EOS_FAULT_STEP`` is unset in normal operation and the check is one dictionary lookup.

Two forms:

* ``EOS_FAULT_STEP=<step>``: every process with this environment dies at ``step`` (the fault
  suite's children, started one by one with their own environment).
* ``EOS_FAULT_STEP=@<path>``: the armed faults are in files, so a test can arm one fault at a
  time for processes whose environment it does not control (Dagster run processes inherit the
  code server's). ``<path>`` is one file, or a folder where each file is one fault. A file holds
  ``<step> [skip]``: the first ``skip`` passes of the step in a process go through. The process
  that fires a fault renames its file (``<name>.fired-<pid>``, atomic: of two processes racing
  for it exactly one wins) before killing itself, so each armed fault kills exactly one process.

A step may be written ``<scope>:<step>`` to fire only where the caller names that scope (both
assets call ``before_materialization_event``; ``clickhouse:before_materialization_event`` picks
one of them).

Two steps are not boundaries the sinks pass but watchers started here: ``mid_insert`` (inside
ClickHouse's INSERT) and ``mid_hudi_write`` (a Hudi commit in flight); and two Hudi steps fail
Spark tasks instead of killing (:mod:`eos_pipeline_tests.support.spark_faults`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from eos_pipeline.sinks.hooks import FaultHook

log = logging.getLogger(__name__)

FAULT_ENV: Final = "EOS_FAULT_STEP"
#: ``EOS_FAULT_STEP=@<path>``: the armed faults are read from files (see the module docstring).
FILE_PREFIX: Final = "@"
FIRED_MARK: Final = ".fired-"

#: Step boundaries of the ClickHouse sink, in the order a batch passes them (its ``fault`` hook
#: is called with each).
CLICKHOUSE_STEPS: Final = (
    "before_keeper_before",
    "after_keeper_before",
    "after_insert",
    "after_keeper_after",
)
#: The ClickHouse sink's boundary between a schema evolution's ``ALTER TABLE`` and the insert
#: of the step that asked for it (only a registry subject's tables pass it).
AFTER_ALTER_STEP: Final = "after_alter"
#: Fires while Spark is writing: after the commit is requested on the timeline and before it
#: completes (:func:`kill_when_hudi_write_starts`, started by :func:`hudi_fault`).
MID_HUDI_WRITE_STEP: Final = "mid_hudi_write"
#: Steps of the Hudi sink: its two boundaries and, between them, ``mid_hudi_write``.
HUDI_STEPS: Final = (
    "before_hudi_write",
    MID_HUDI_WRITE_STEP,
    "after_hudi_commit",
)
#: Fires while ClickHouse writes a part (a ``tmp_insert_*`` folder exists), inside the INSERT, on
#: an embedded chDB path (:func:`kill_when_clickhouse_inserts`, started by the fault child and by
#: :func:`clickhouse_fault`).
MID_INSERT_STEP: Final = "mid_insert"
#: Fires in both assets after the sink finished and before Dagster records the materialization;
#: scope it (``clickhouse:`` / ``hudi:``) to pick one asset.
BEFORE_MATERIALIZATION_STEP: Final = "before_materialization_event"

#: Hudi sink steps that fail Spark tasks instead of killing: every task reading Kafka raises on
#: its first attempt only (Spark's task retry must absorb it), or on every attempt
#: (:mod:`eos_pipeline_tests.support.spark_faults`).
SPARK_TASK_STEPS: Final = ("hudi_task_fails_once", "hudi_task_always_fails")


@dataclass(frozen=True)
class Arm:
    """One armed fault: its step, how many passes go through first, and its file (if any)."""

    step: str
    skip: int = 0
    file: Path | None = None

    def matches(self, step: str, scope: str | None) -> bool:
        return self.step == step or (scope is not None and self.step == f"{scope}:{step}")

    def claim(self) -> bool:
        """Take this fault for this process; False if another process fired it first."""
        if self.file is None:
            return True
        fired = self.file.with_name(f"{self.file.name}{FIRED_MARK}{os.getpid()}")
        try:
            os.rename(self.file, fired)
        except FileNotFoundError:
            return False
        return True


#: Passes of each step in this process (for the ``skip`` of file arms).
_passes: dict[str, int] = {}


def parse_arm(text: str, file: Path | None = None) -> Arm:
    """``<step> [skip]`` as written in a fault file."""
    parts = text.split()
    if not parts or len(parts) > 2:
        raise ValueError(f"fault file {file}: expected '<step> [skip]', got {text!r}")
    return Arm(parts[0], int(parts[1]) if len(parts) == 2 else 0, file)


def arms() -> list[Arm]:
    """The faults armed for this process now (read again on every call for the file form)."""
    raw = os.environ.get(FAULT_ENV)
    if not raw:
        return []
    if not raw.startswith(FILE_PREFIX):
        return [Arm(raw)]
    root = Path(raw[len(FILE_PREFIX) :])
    files = sorted(root.iterdir()) if root.is_dir() else [root]
    out = []
    for file in files:
        if FIRED_MARK in file.name or file.name.startswith("."):
            continue
        try:
            text = file.read_text()
        except (FileNotFoundError, IsADirectoryError):
            continue  # fired meanwhile, or not armed
        if text.strip():
            out.append(parse_arm(text, file))
    return out


def armed_step() -> str | None:
    """The first armed step (the plain form's value), or None."""
    found = arms()
    return found[0].step if found else None


def kill_now(step: str) -> None:
    log.warning("fault injection: killing the process (SIGKILL) at step %s", step)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _armed_for(step: str, scope: str | None) -> Arm | None:
    """The arm that fires at this pass of ``step``, if any (counts the pass)."""
    found = [a for a in arms() if a.matches(step, scope)]
    if not found:
        return None
    _passes[step] = _passes.get(step, 0) + 1
    for arm in found:
        if _passes[step] > arm.skip:
            return arm
    return None


def fault_point(step: str, scope: str | None = None) -> None:
    """Kill this process at ``step`` when ``EOS_FAULT_STEP`` arms it; otherwise do nothing.

    ``scope`` lets a fault armed as ``<scope>:<step>`` fire here and nowhere else.
    """
    if FAULT_ENV not in os.environ:
        return
    arm = _armed_for(step, scope)
    if arm is not None and arm.claim():
        kill_now(arm.step)


def _kill_on(step: str, condition: Callable[[], bool], poll_seconds: float) -> threading.Event:
    """A watcher thread: kill the process (claiming ``step``'s arm) once ``condition`` holds."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if condition():
                arm = _armed_for(step, None)
                if arm is not None and arm.claim():
                    kill_now(step)
                return  # fired elsewhere or disarmed: stop watching
            time.sleep(poll_seconds)

    threading.Thread(target=watch, name=f"eos-fault-{step}", daemon=True).start()
    return stop


def _peek(step: str) -> bool:
    """Whether ``step`` is armed, without counting a pass."""
    return FAULT_ENV in os.environ and any(a.matches(step, None) for a in arms())


def kill_when_hudi_write_starts(
    table_path: str, step: str = MID_HUDI_WRITE_STEP, poll_seconds: float = 0.005
) -> threading.Event | None:
    """If ``step`` is armed, kill the process as soon as a new Hudi write is on the timeline.

    Hudi marks a write ``requested``, then ``inflight``, writes its data files, and only then
    completes the instant. A watcher thread polls the timeline folder and kills the process at
    the first new ``.inflight`` instant, i.e. inside the write. Returns an event that stops the
    watcher (set it once the write returned), or None when the step is not armed.
    """
    if not _peek(step):
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
    return _kill_on(step, lambda: bool(inflight() - before), poll_seconds)


def kill_when_clickhouse_inserts(
    chdb_path: str, step: str = MID_INSERT_STEP, poll_seconds: float = 0.0005
) -> threading.Event | None:
    """If ``step`` is armed, kill the process while embedded ClickHouse writes a part.

    A MergeTree insert writes the part into a ``tmp_insert_*`` folder, renames it into place and
    only then returns: a watcher kills at the first such folder, inside the INSERT, where no
    step boundary in Python can reach. Returns an event that stops the watcher, or None.
    """
    if not _peek(step):
        return None
    root = Path(chdb_path) / "store"

    def writing() -> bool:
        for dirpath, dirnames, _ in os.walk(root):
            if any(name.startswith("tmp_insert") for name in dirnames):
                return True
            if dirpath.count(os.sep) - str(root).count(os.sep) >= 2:
                dirnames[:] = [d for d in dirnames if d.startswith("tmp")]
        return False

    return _kill_on(step, writing, poll_seconds)


# ------------------------------------------------------------------------------ sink hooks
def hudi_fault(table_path: str, inner: FaultHook = fault_point) -> FaultHook:
    """The Hudi sink's ``fault`` hook: ``inner`` at each boundary, plus ``mid_hudi_write``.

    After ``before_hudi_write`` passed, a watcher (:func:`kill_when_hudi_write_starts`) kills
    the process at the first new inflight instant if ``mid_hudi_write`` is armed; it stops when
    the write returned, at ``after_hudi_commit``.
    """
    watching: list[threading.Event] = []

    def hook(step: str) -> None:
        if step == "after_hudi_commit":
            while watching:
                watching.pop().set()
        inner(step)
        if step == "before_hudi_write":
            stop = kill_when_hudi_write_starts(table_path)
            if stop is not None:
                watching.append(stop)

    return hook


def scoped_fault(scope: str) -> FaultHook:
    """:func:`fault_point` for one sink's steps: a step armed plain or as ``<scope>:<step>``."""
    return lambda step: fault_point(step, scope)


def clickhouse_fault(chdb_path: str | None, scope: str = "clickhouse") -> FaultHook:
    """A ClickHouse run's ``fault`` hook: :func:`scoped_fault`, plus ``mid_insert``.

    On an embedded chDB path the insert watcher (:func:`kill_when_clickhouse_inserts`) starts at
    the first step the run passes, before its first insert; once per process, which is once per
    Dagster run.
    """
    started = False

    def hook(step: str) -> None:
        nonlocal started
        if chdb_path and not started:
            started = True
            kill_when_clickhouse_inserts(chdb_path)
        fault_point(step, scope)

    return hook


__all__ = [
    "BEFORE_MATERIALIZATION_STEP",
    "CLICKHOUSE_STEPS",
    "FAULT_ENV",
    "FILE_PREFIX",
    "HUDI_STEPS",
    "MID_HUDI_WRITE_STEP",
    "MID_INSERT_STEP",
    "SPARK_TASK_STEPS",
    "Arm",
    "FaultHook",
    "armed_step",
    "arms",
    "clickhouse_fault",
    "fault_point",
    "hudi_fault",
    "kill_when_clickhouse_inserts",
    "kill_when_hudi_write_starts",
    "parse_arm",
    "scoped_fault",
]
