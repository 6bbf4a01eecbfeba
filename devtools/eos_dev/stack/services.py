"""The local development stack: ZooKeeper and a KRaft Kafka broker as background JVM processes.

With ``registry=True`` (``stack up`` sets it) also a schema registry, Apicurio's
Confluent-compatible API (see :mod:`eos_dev.stack.registry`).

On request (``spark=True``, ``stack up --spark``) also a long-lived Spark: a Spark Connect server
and, with ``spark_workers`` > 0, a standalone master and workers behind it (see
:mod:`eos_dev.stack.spark_connect`).

Everything lives under one state directory (data, logs, pid files, the rendered configs), so
``stack down`` plus deleting that directory returns the machine to where it was. The processes run
in their own session, outlive the command that started them, and are found again through their pid
files; ``up`` on a running stack only checks it. Readiness is probed through each service's own
protocol (ZooKeeper's ``srvr``, Kafka metadata through librdkafka), never by sleeping.

Tests use the same code on free ports and a temporary state directory.

This module is the orchestration (pid files, start order, shutdown); the parts live beside it:
:mod:`~eos_dev.stack.config` (what to run), :mod:`~eos_dev.stack.processes` (Java,
ports, pids, readiness waits), :mod:`~eos_dev.stack.zookeeper` and
:mod:`~eos_dev.stack.kafka_broker` (each service's config, probe and start).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from eos_dev.stack.config import ServiceStatus, StackConfig, StackError
from eos_dev.stack.kafka_broker import kafka_ready, start_kafka
from eos_dev.stack.processes import (
    MIN_JAVA,
    find_java,
    free_port,
    pid_alive,
    port_in_use,
)
from eos_dev.stack.registry import start_registry
from eos_dev.stack.zookeeper import start_zookeeper, zookeeper_ready
from eos_pipeline.adapters.jvm_artifacts import default_cache_dir, ensure_bundle

__all__ = [
    "MIN_JAVA",
    "ServiceStatus",
    "Stack",
    "StackConfig",
    "StackError",
    "find_java",
    "free_port",
    "kafka_ready",
    "pid_alive",
    "port_in_use",
    "zookeeper_ready",
]


class Stack:
    """Start, check and stop the local ZooKeeper and Kafka broker."""

    SERVICES = ("zookeeper", "kafka")

    def __init__(self, config: StackConfig, say: Callable[[str], None] = print) -> None:
        self.config = config
        self.say = say

    # paths ---------------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        return self.config.state_dir / name

    def _pidfile(self, name: str) -> Path:
        return self._dir(name) / "pid"

    def log_path(self, name: str) -> Path:
        return self._dir(name) / f"{name}.log"

    def _read_pid(self, name: str) -> int | None:
        try:
            return int(self._pidfile(name).read_text().strip())
        except (OSError, ValueError):
            return None

    def _running_pid(self, name: str) -> int | None:
        pid = self._read_pid(name)
        return pid if pid is not None and pid_alive(pid) else None

    def _endpoint(self, name: str) -> str:
        if name == "registry":
            return self.config.registry_url
        if name.startswith("spark-"):
            from eos_dev.stack.spark_connect import spark_endpoint

            return spark_endpoint(self.config, name)
        return self.config.zookeeper_hosts if name == "zookeeper" else self.config.kafka_bootstrap

    def services(self) -> list[str]:
        """Services in start order: the two base ones, the registry if asked for or running, then
        Spark's if asked for or running."""
        from eos_dev.stack.spark_connect import spark_services

        registry = ["registry"] if self.config.registry or self._read_pid("registry") else []
        return [*self.SERVICES, *registry, *spark_services(self)]

    # public --------------------------------------------------------------------------------
    def status(self) -> list[ServiceStatus]:
        return [
            ServiceStatus(
                name,
                self._running_pid(name) is not None,
                self._running_pid(name),
                self._endpoint(name),
                self.log_path(name),
            )
            for name in self.services()
        ]

    def up(self) -> None:
        java = find_java()
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        (self.config.state_dir / "stack.json").write_text(
            json.dumps(asdict(self.config), default=str, indent=1)
        )
        spark_ready = None
        if self.config.spark:  # launched first: its JVM boots while ZooKeeper and Kafka start
            from eos_dev.stack.spark_connect import launch_spark

            spark_ready = launch_spark(self, java)
        self._start_zookeeper(java)
        self._start_kafka(java)
        if self.config.registry:
            self._start_registry(java)
        if spark_ready is not None:
            spark_ready()

    def down(self, timeout: float = 30.0) -> None:
        # Spark first (its jobs read Kafka), then Kafka: it holds client connections and a
        # data log to flush.
        for name in reversed(self.services()):
            pid = self._running_pid(name)
            if pid is None:
                self._pidfile(name).unlink(missing_ok=True)
                continue
            self.say(f"stopping {name} (pid {pid})")
            self._signal_group(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid_alive(pid):
                self.say(f"{name} did not stop within {timeout:.0f}s; killing it")
                self._signal_group(pid, signal.SIGKILL)
                while pid_alive(pid):
                    time.sleep(0.05)
            self._pidfile(name).unlink(missing_ok=True)

    # internals -----------------------------------------------------------------------------
    @staticmethod
    def _signal_group(pid: int, sig: int) -> None:
        try:
            os.killpg(pid, sig)  # started with start_new_session: its pid is its group id
        except ProcessLookupError:
            pass
        except PermissionError:
            os.kill(pid, sig)

    def _check_ports(self, name: str, ports: dict[str, int]) -> None:
        for flag, port in ports.items():
            if port_in_use(self.config.host, port):
                raise StackError(
                    f"cannot start {name}: port {port} on {self.config.host} is taken by another "
                    f"process. Stop that process or choose another port with {flag}."
                )

    def _launch(self, name: str, java: str, args: list[str], heap: str) -> int:
        log = self.log_path(name)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [java, f"-Xmx{heap}", *self.config.jvm_options, "-Djava.awt.headless=true", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self._dir(name),
            )
        self._pidfile(name).write_text(str(proc.pid))
        return proc.pid

    def _classpath(self, bundle: str) -> str:
        jars = ensure_bundle(bundle, self.config.cache_dir or default_cache_dir(), self.say)
        return os.pathsep.join(str(j) for j in jars)

    # Methods, not just the functions: subclasses (mirror's Kafka-only stack) and the fault tests
    # restart one service through them.
    def _start_zookeeper(self, java: str) -> None:
        start_zookeeper(self, java)

    def _start_kafka(self, java: str) -> None:
        start_kafka(self, java)

    def _start_registry(self, java: str) -> None:
        start_registry(self, java)
