"""What the local stack is asked to run: hosts, ports, heaps and where its state lives.

Kept apart from the process code so the CLI, the demo and the tests can build and read a
configuration (defaults, then ``EOS_*`` variables, then flags) without starting anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


class StackError(RuntimeError):
    """The stack could not be started, checked or stopped; the message says what to do."""


#: The stack's JVM options unless ``EOS_STACK_JVM_OPTIONS`` says otherwise.
DEFAULT_JVM_OPTIONS = ("-XX:+UseG1GC",)


def default_jvm_options() -> tuple[str, ...]:
    """``EOS_STACK_JVM_OPTIONS`` split on spaces, else :data:`DEFAULT_JVM_OPTIONS`."""
    value = os.environ.get("EOS_STACK_JVM_OPTIONS", "").split()
    return tuple(value) if value else DEFAULT_JVM_OPTIONS


@dataclass(frozen=True)
class StackConfig:
    state_dir: Path = field(default_factory=lambda: Path(".state/stack").resolve())
    host: str = "127.0.0.1"
    zookeeper_port: int = 2181
    kafka_port: int = 9092
    controller_port: int = 9093
    cache_dir: Path | None = None
    kafka_heap: str = "768m"
    zookeeper_heap: str = "256m"
    #: Start the Spark Connect server too (off by default: most callers need only Kafka).
    spark: bool = False
    spark_connect_port: int = 15002
    #: Heap of the Connect server's driver (and of each executor on a standalone cluster).
    spark_memory: str = "2g"
    #: Cores of ``local[N]``, or of each standalone worker.
    spark_cores: int = 2
    #: 0: the Connect server runs Spark in local mode; N: a standalone master and N workers.
    spark_workers: int = 0
    spark_master_port: int = 7077
    #: Serve Spark Connect clients of other machines too (off: loopback peers only, as Spark
    #: Connect 3.5 cannot bind to one address; ``EOS_SPARK_CONNECT_REMOTE=1``).
    spark_connect_remote: bool = False
    #: Start the schema registry (Apicurio, Confluent-compatible API) too; ``stack up`` does.
    registry: bool = False
    registry_port: int = 8081
    registry_heap: str = "384m"
    #: JVM options of every JVM the stack starts (ZooKeeper, Kafka, MirrorMaker 2, the Connect
    #: server), from ``EOS_STACK_JVM_OPTIONS`` when set. Long-lived stacks keep the default;
    #: short-lived ones (tests, CI) can trade peak speed for less start-up CPU.
    jvm_options: tuple[str, ...] = field(default_factory=default_jvm_options)

    @classmethod
    def from_env(cls, **overrides: object) -> StackConfig:
        """Defaults, then ``EOS_*`` environment variables, then explicit overrides (CLI flags)."""
        env = os.environ
        values: dict[str, object] = {}
        if "EOS_STACK_DIR" in env:
            values["state_dir"] = Path(env["EOS_STACK_DIR"]).resolve()
        for key, var in (
            ("zookeeper_port", "EOS_ZOOKEEPER_PORT"),
            ("kafka_port", "EOS_KAFKA_PORT"),
            ("controller_port", "EOS_KAFKA_CONTROLLER_PORT"),
            ("spark_connect_port", "EOS_SPARK_CONNECT_PORT"),
            ("spark_master_port", "EOS_SPARK_MASTER_PORT"),
            ("registry_port", "EOS_REGISTRY_PORT"),
        ):
            if var in env:
                try:
                    values[key] = int(env[var])
                except ValueError:
                    raise StackError(f"{var}={env[var]!r} is not a port number") from None
        for key, var in (
            ("spark_cores", "EOS_SPARK_CORES"),
            ("spark_workers", "EOS_SPARK_WORKERS"),
        ):
            if var in env:
                try:
                    values[key] = int(env[var])
                except ValueError:
                    raise StackError(f"{var}={env[var]!r} is not a whole number") from None
        if "EOS_SPARK_MEMORY" in env:
            values["spark_memory"] = env["EOS_SPARK_MEMORY"]
        if "EOS_SPARK" in env:
            values["spark"] = env["EOS_SPARK"].strip().lower() in ("1", "true", "yes", "on")
        if "EOS_SPARK_CONNECT_REMOTE" in env:
            remote = env["EOS_SPARK_CONNECT_REMOTE"].strip().lower()
            values["spark_connect_remote"] = remote in ("1", "true", "yes", "on")
        if "EOS_REGISTRY" in env:
            values["registry"] = env["EOS_REGISTRY"].strip().lower() in ("1", "true", "yes", "on")
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "state_dir" in values:
            values["state_dir"] = Path(str(values["state_dir"])).resolve()
        return cls(**values)  # type: ignore[arg-type]

    @property
    def zookeeper_hosts(self) -> str:
        return f"{self.host}:{self.zookeeper_port}"

    @property
    def kafka_bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def spark_connect_url(self) -> str:
        return f"sc://{self.host}:{self.spark_connect_port}"

    @property
    def registry_url(self) -> str:
        """The schema registry's Confluent-compatible API (what a client's ``url`` takes)."""
        return f"http://{self.host}:{self.registry_port}/apis/ccompat/v7"

    @property
    def spark_master_url(self) -> str:
        return f"spark://{self.host}:{self.spark_master_port}"


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    endpoint: str
    log: Path
