"""CPU seconds of a process tree by role, sampled from ``/proc`` (Linux): where the CPU of a
``dagster dev`` tree goes in a time window (its daemon, webserver, code servers, run workers).

A process's CPU is read while it lives; one that ends between two samples keeps the value of its
last sample, so the figures are lower bounds by at most one sampling period per process.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

#: Substrings of a command line -> role, first match wins.
ROLES = (
    # the code server starts each run's process with multiprocessing (spawn)
    ("spawn_main", "run worker"),
    ("execute_run", "run worker"),
    ("execute_step", "run worker"),
    ("daemon", "daemon"),
    ("webserver", "webserver"),
    ("grpc", "code server"),
    ("code-server", "code server"),
    (" dev", "dagster dev"),
)
_TICK = os.sysconf("SC_CLK_TCK")


def role_of(cmdline: str) -> str:
    """The role of a command line, judged by its program and arguments before the first option
    or JSON argument (an instance reference names modules such as the daemon's)."""
    head = cmdline.split(" --")[0].split(" {")[0]
    return next((role for needle, role in ROLES if needle in head), "other")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of ``pid``, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


class TreeCpu(threading.Thread):
    """Samples the CPU of ``root`` and every descendant every ``period`` seconds."""

    def __init__(self, root: int, period: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.root, self.period = root, period
        self.samples: list[tuple[float, dict[int, float]]] = []
        self.roles: dict[int, str] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.time(), self._sample()))
            time.sleep(self.period)

    def _sample(self) -> dict[int, float]:
        stats = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (got := _stat(int(entry))) is not None:
                stats[int(entry)] = got
        tree, frontier = {self.root}, [self.root]
        while frontier:
            parent = frontier.pop()
            kids = [p for p, (ppid, _) in stats.items() if ppid == parent and p not in tree]
            tree.update(kids)
            frontier += kids
        for pid in tree - set(self.roles):
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            self.roles[pid] = role_of(raw.replace(b"\0", b" ").decode(errors="replace"))
        return {pid: stats[pid][1] for pid in tree if pid in stats}

    def by_role(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds each role used between ``start`` and ``end`` (epoch seconds)."""
        before = self._at(start)
        after = self._at(end)
        out: dict[str, float] = {}
        for pid, cpu in after.items():
            role = self.roles.get(pid, "other")
            out[role] = out.get(role, 0.0) + cpu - before.get(pid, 0.0)
        return {k: round(v, 2) for k, v in sorted(out.items())}

    def _at(self, moment: float) -> dict[int, float]:
        """Each process's CPU as last seen at or before ``moment``."""
        seen: dict[int, float] = {}
        for t, sample in self.samples:
            if t > moment:
                break
            seen.update(sample)
        return seen
