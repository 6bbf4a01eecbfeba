"""Plain process and port helpers every stack service shares (ZooKeeper, Kafka, Spark, MM2).

Finding a usable Java, telling whether a port is free or a pid still runs, and waiting for a
service's readiness probe while watching that its process has not died: nothing here knows which
service it is serving.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from eos_dev.stack.config import StackError

MIN_JAVA = 17


def find_java() -> str:
    """Path of a ``java`` of version 17 or newer, or a StackError saying how to get one."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise StackError(
            "Java not found: the local stack runs Kafka and ZooKeeper on a JVM. Install a Java "
            f"{MIN_JAVA}+ runtime (e.g. `apt-get install openjdk-17-jre-headless`) and put `java` "
            "on PATH or set JAVA_HOME."
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise StackError(f"could not read the version of {java}: {out.stderr.strip()[:200]}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise StackError(f"{java} is Java {major}; the stack needs Java {MIN_JAVA} or newer.")
    return java


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


#: Lowest port :func:`free_port` picks; below it sit the well-known and registered services.
_LOWEST_PICK = 10_000


def _ephemeral_start() -> int:
    """First port of the kernel's ephemeral range (Linux's default: 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, picked at random *below* the kernel's ephemeral range.

    ``bind(0)`` would hand out an ephemeral port, the kind the kernel also gives to outgoing
    connections: a service stopped for a while (a broker restarted on its own port) could find
    its port taken by some client's connection when it comes back. Ports below the range are
    never assigned that way, and a random pick keeps parallel callers (two pytest workers) apart.
    """
    top = _ephemeral_start()
    if top - _LOWEST_PICK >= 1_000:
        rng = random.SystemRandom()
        for _ in range(200):
            port = rng.randrange(_LOWEST_PICK, top)
            if not port_in_use(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not a running service, unless it is
    # the main thread of a process whose other threads are still exiting: a JVM killed under
    # load shows its main thread as a zombie while the rest still hold its sockets, so its
    # port is not free yet.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return True


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a service's log, quoted in errors so the cause is on screen."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


#: Log lines that say why a JVM service is stuck: its own warnings and errors, without the
#: clients' per-connection chatter (thousands of "could not be established" while a peer is down).
_FINDING = re.compile(r"\b(WARN|ERROR|FATAL)\b")
_CHATTER = re.compile(r"\((NetworkClient|Plugins)\)|could not be established|disconnected")


def log_findings(path: Path, lines: int = 12) -> str:
    """The last warnings and errors of a service's log (not the clients' connection chatter):
    when a service is up but not working, its tail is routine progress and the cause is earlier."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    found = [line[:400] for line in text if _FINDING.search(line) and not _CHATTER.search(line)]
    return "\n".join(found[-lines:]) or "(no warning or error logged)"


def wait_ready(
    what: str, probe: Callable[[], bool], pid: int, log: Path, timeout: float = 90.0
) -> None:
    """Poll ``probe`` until it says ready; fail early if ``pid`` dies, or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            raise StackError(f"{what} exited while starting. Last lines of {log}:\n{log_tail(log)}")
        if probe():
            return
        time.sleep(0.2)
    raise StackError(
        f"{what} was not ready after {timeout:.0f}s. Last warnings and errors of {log}:\n"
        f"{log_findings(log)}\nLast lines:\n{log_tail(log, 6)}"
    )
