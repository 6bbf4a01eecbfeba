"""The local development stack: ZooKeeper and a KRaft Kafka broker as background JVM processes.

On request (``spark=True``, ``stack up --spark``) also a long-lived Spark: a Spark Connect server
and, with ``spark_workers`` > 0, a standalone master and workers behind it (see
:mod:`eos_pipeline.stack.spark_connect`).

Everything lives under one state directory (data, logs, pid files, the rendered configs), so
``stack down`` plus deleting that directory returns the machine to where it was. The processes run
in their own session, outlive the command that started them, and are found again through their pid
files; ``up`` on a running stack only checks it. Readiness is probed through each service's own
protocol (ZooKeeper's ``ruok``, Kafka metadata through librdkafka), never by sleeping.

Tests use the same code on free ports and a temporary state directory.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eos_pipeline.stack.artifacts import default_cache_dir, ensure_bundle

MIN_JAVA = 17


class StackError(RuntimeError):
    """The stack could not be started, checked or stopped; the message says what to do."""


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
    def spark_master_url(self) -> str:
        return f"spark://{self.host}:{self.spark_master_port}"


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    endpoint: str
    log: Path


# --------------------------------------------------------------------------------------- helpers


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


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait(what: str, probe: Callable[[], bool], pid: int, log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            raise StackError(f"{what} exited while starting. Last lines of {log}:\n{_tail(log)}")
        if probe():
            return
        time.sleep(0.2)
    raise StackError(
        f"{what} was not ready after {timeout:.0f}s. Last lines of {log}:\n{_tail(log)}"
    )


def zookeeper_ready(host: str, port: int) -> bool:
    """True once ZooKeeper serves requests.

    ``ruok`` is not enough: it answers ``imok`` while the server is still (or never) coming up;
    ``srvr`` reports the server's version only once it is serving.
    """
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"srvr")
            return sock.recv(256).startswith(b"Zookeeper version")
    except OSError:
        return False


def kafka_ready(bootstrap: str) -> bool:
    """True once the broker answers a metadata request and lists itself."""
    from confluent_kafka.admin import AdminClient

    # log_level 0: refused connections while the broker boots are expected, not worth a line each.
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    try:
        meta = admin.list_topics(timeout=2.0)
    except Exception:
        return False
    return bool(meta.brokers)


def _kafka_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid form).

    Like Kafka's own ``Uuid.randomUuid``, ids starting with ``-`` are drawn again: the storage
    tool's command line would read one as an option and refuse to format (1 start in 64).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


# --------------------------------------------------------------------------------------- the stack


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
        if name.startswith("spark-"):
            from eos_pipeline.stack.spark_connect import spark_endpoint

            return spark_endpoint(self.config, name)
        return self.config.zookeeper_hosts if name == "zookeeper" else self.config.kafka_bootstrap

    def services(self) -> list[str]:
        """Services in start order: the two base ones, then Spark's if asked for or running."""
        from eos_pipeline.stack.spark_connect import spark_services

        return [*self.SERVICES, *spark_services(self)]

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
        self._start_zookeeper(java)
        self._start_kafka(java)
        if self.config.spark:
            from eos_pipeline.stack.spark_connect import start_spark

            start_spark(self, java)

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
                [java, f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true", *args],
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

    def _start_zookeeper(self, java: str) -> None:
        cfg = self.config
        if pid := self._running_pid("zookeeper"):
            if not zookeeper_ready(cfg.host, cfg.zookeeper_port):
                raise StackError(
                    f"zookeeper (pid {pid}) is running but does not answer on "
                    f"{cfg.zookeeper_hosts}; see {self.log_path('zookeeper')} or run `stack down`."
                )
            self.say(f"zookeeper already running (pid {pid}) at {cfg.zookeeper_hosts}")
            return
        self._check_ports("zookeeper", {"--zookeeper-port": cfg.zookeeper_port})
        home = self._dir("zookeeper")
        (home / "data").mkdir(parents=True, exist_ok=True)
        conf = home / "zoo.cfg"
        conf.write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={home / 'data'}",
                    f"clientPort={cfg.zookeeper_port}",
                    f"clientPortAddress={cfg.host}",
                    "maxClientCnxns=200",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,mntr",
                    # Sessions as short as 2 s: lets tests expire a session quickly.
                    "minSessionTimeout=2000",
                    "maxSessionTimeout=60000",
                    "",
                ]
            )
        )
        pid = self._launch(
            "zookeeper",
            java,
            [
                "-Dzookeeper.admin.enableServer=false",
                "-cp",
                self._classpath("zookeeper"),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(conf),
            ],
            cfg.zookeeper_heap,
        )
        self.say(f"starting zookeeper (pid {pid}) ...")
        _wait(
            "zookeeper",
            lambda: zookeeper_ready(cfg.host, cfg.zookeeper_port),
            pid,
            self.log_path("zookeeper"),
        )
        self.say(f"zookeeper ready at {cfg.zookeeper_hosts}")

    def _start_kafka(self, java: str) -> None:
        cfg = self.config
        if pid := self._running_pid("kafka"):
            if not kafka_ready(cfg.kafka_bootstrap):
                raise StackError(
                    f"kafka (pid {pid}) is running but does not answer on {cfg.kafka_bootstrap}; "
                    f"see {self.log_path('kafka')} or run `stack down`."
                )
            self.say(f"kafka already running (pid {pid}) at {cfg.kafka_bootstrap}")
            return
        self._check_ports(
            "kafka",
            {"--kafka-port": cfg.kafka_port, "--controller-port": cfg.controller_port},
        )
        home = self._dir("kafka")
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        props = home / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@{cfg.host}:{cfg.controller_port}",
                    f"listeners=PLAINTEXT://{cfg.host}:{cfg.kafka_port},"
                    f"CONTROLLER://{cfg.host}:{cfg.controller_port}",
                    f"advertised.listeners=PLAINTEXT://{cfg.host}:{cfg.kafka_port}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={data}",
                    "num.partitions=1",
                    "auto.create.topics.enable=false",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "transaction.state.log.num.partitions=4",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    # Let tests see log cleaning and retention act within seconds.
                    "log.retention.check.interval.ms=5000",
                    "log.cleaner.backoff.ms=2000",
                    "",
                ]
            )
        )
        classpath = self._classpath("kafka")
        if not (data / "meta.properties").exists():
            fmt = subprocess.run(
                [
                    java,
                    "-cp",
                    classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    "--ignore-formatted",
                    "-t",
                    _kafka_cluster_id(),
                    "-c",
                    str(props),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if fmt.returncode != 0:
                raise StackError(f"formatting Kafka storage failed:\n{fmt.stdout}{fmt.stderr}")
        pid = self._launch(
            "kafka",
            java,
            ["-cp", classpath, "kafka.Kafka", str(props)],
            cfg.kafka_heap,
        )
        self.say(f"starting kafka (pid {pid}) ...")
        _wait("kafka", lambda: kafka_ready(cfg.kafka_bootstrap), pid, self.log_path("kafka"))
        self.say(f"kafka ready at {cfg.kafka_bootstrap}")
