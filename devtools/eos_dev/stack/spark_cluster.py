"""Spark's processes on this machine: JVMs launched through PySpark's own scripts, and the
standalone cluster (a master and its workers) that the Connect server can run its jobs on.

The PySpark wheel carries a whole Spark runtime but not ``sbin/start-*.sh``, so every service
is started with ``bin/spark-class`` or ``bin/spark-submit``. Those scripts ``exec`` the JVM: the
recorded pid is the JVM itself, and its session (process group) holds everything it spawns
(executors, Python workers), so ``stack down`` signals that group and leaves nothing. The
Connect server itself is :mod:`eos_dev.stack.spark_connect`'s.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from eos_dev.stack.config import StackConfig
from eos_dev.stack.processes import wait_ready

if TYPE_CHECKING:
    from eos_dev.stack.services import Stack

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

MASTER = "spark-master"
WORKER_PREFIX = "spark-worker-"

#: Heap of the standalone master and worker daemons (they only schedule; executors do the work).
_DAEMON_HEAP = "256m"
#: Environment that would turn a launched JVM's Python workers into Connect clients.
_CLIENT_ONLY_ENV = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")


def spark_home() -> Path:
    """PySpark's Spark runtime: ``bin/spark-submit``, ``bin/spark-class``, ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def worker_names(count: int) -> list[str]:
    """The service names of ``count`` workers (their state folders and pid files)."""
    return [f"{WORKER_PREFIX}{i}" for i in range(1, count + 1)]


def spark_master(config: StackConfig) -> str:
    """Where the Connect server runs its jobs: ``local[N]``, or the stack's standalone master."""
    if config.spark_workers > 0:
        return config.spark_master_url
    return f"local[{config.spark_cores}]"


def port_open(host: str, port: int) -> bool:
    """Something accepts connections on ``host:port`` (a daemon's readiness)."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def log_has(log: Path, since: int, text: str) -> bool:
    """``text`` was logged after byte ``since`` (logs are appended to across restarts)."""
    try:
        with log.open("rb") as f:
            f.seek(since)
            return text.encode() in f.read()
    except OSError:
        return False


def spark_env(config: StackConfig, *, daemon: bool = False) -> dict[str, str]:
    """The environment of a Spark JVM launched by the stack (never a Connect client's)."""
    env = {k: v for k, v in os.environ.items() if k not in _CLIENT_ONLY_ENV}
    env.pop("SPARK_DAEMON_MEMORY", None)
    env.update(
        {
            "SPARK_HOME": str(spark_home()),
            # Python UDFs run in workers the server starts: the same interpreter (and so the
            # same pyspark and cloudpickle) as the clients of this checkout.
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": config.host,
        }
    )
    if daemon:
        # Only for master and worker: Spark's launcher also sizes the Connect server (as it
        # does the Thrift server) by this variable, ahead of --driver-memory.
        env["SPARK_DAEMON_MEMORY"] = _DAEMON_HEAP
        from eos_pipeline.adapters.spark_cds import java_options as cds_options

        env["SPARK_DAEMON_JAVA_OPTS"] = " ".join([*config.jvm_options, *cds_options()])
    return env


def launch(stack: Stack, name: str, command: list[str], env: dict[str, str]) -> int:
    """Start ``command`` as service ``name`` (own session, log and pid file); its pid."""
    home = stack._dir(name)
    home.mkdir(parents=True, exist_ok=True)
    with stack.log_path(name).open("ab") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=home,
            env=env,
        )
    stack._pidfile(name).write_text(str(proc.pid))
    return proc.pid


def start_master(stack: Stack) -> None:
    cfg = stack.config
    if pid := stack._running_pid(MASTER):
        stack.say(f"{MASTER} already running (pid {pid}) at {cfg.spark_master_url}")
        return
    stack._check_ports(MASTER, {"--spark-master-port": cfg.spark_master_port})
    command = [
        str(spark_home() / "bin" / "spark-class"),
        MASTER_CLASS,
        "--host",
        cfg.host,
        "--port",
        str(cfg.spark_master_port),
        "--webui-port",
        "0",  # any free port: the UI is not needed and must not collide
    ]
    pid = launch(stack, MASTER, command, spark_env(cfg, daemon=True))
    stack.say(f"starting {MASTER} (pid {pid}) ...")
    log = stack.log_path(MASTER)
    wait_ready(MASTER, lambda: port_open(cfg.host, cfg.spark_master_port), pid, log, timeout=120)
    stack.say(f"{MASTER} ready at {cfg.spark_master_url}")


def start_worker(stack: Stack, name: str) -> None:
    cfg = stack.config
    if pid := stack._running_pid(name):
        stack.say(f"{name} already running (pid {pid})")
        return
    work = stack._dir(name) / "work"
    work.mkdir(parents=True, exist_ok=True)
    command = [
        str(spark_home() / "bin" / "spark-class"),
        WORKER_CLASS,
        "--host",
        cfg.host,
        "--webui-port",
        "0",
        "--cores",
        str(cfg.spark_cores),
        "--memory",
        cfg.spark_memory,
        "--work-dir",
        str(work),
        cfg.spark_master_url,
    ]
    log = stack.log_path(name)
    since = log.stat().st_size if log.exists() else 0
    pid = launch(stack, name, command, spark_env(cfg, daemon=True))
    stack.say(f"starting {name} (pid {pid}) ...")
    wait_ready(
        name,
        lambda: log_has(log, since, "Successfully registered with master"),
        pid,
        log,
        timeout=120,
    )
    stack.say(f"{name} registered with {cfg.spark_master_url}")
