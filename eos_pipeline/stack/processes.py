"""Plain process and port helpers every stack service shares (ZooKeeper, Kafka, Spark, MM2).

Finding a usable Java, telling whether a port is free or a pid still runs, and waiting for a
service's readiness probe while watching that its process has not died: nothing here knows which
service it is serving.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from eos_pipeline.stack.config import StackError

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


def free_port(host: str = "127.0.0.1") -> int:
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
    # A zombie (exited, not yet reaped by its parent) is not a running service.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a service's log, quoted in errors so the cause is on screen."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


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
        f"{what} was not ready after {timeout:.0f}s. Last lines of {log}:\n{log_tail(log)}"
    )
