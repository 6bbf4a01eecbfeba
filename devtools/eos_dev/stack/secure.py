"""The secured, replicated stack: 3 KRaft brokers behind SASL_SSL and ACLs, a 3-server ZooKeeper.

What production looks like, on one machine: replication factor 3 with ``min.insync.replicas=2``,
SCRAM-SHA-512 over TLS for clients (users made at format time, ``--add-scram``), mutual TLS
between brokers and controllers, the StandardAuthorizer with the pipeline's principal limited to
its own topics, dead-letter topics and ids (:func:`~eos_dev.stack.secure_config.pipeline_acls`);
ZooKeeper as an ensemble whose servers authenticate each other with SASL, refusing any client that
has not authenticated, with the keeper root owned by the pipeline's digest user.

The processes reuse :class:`~eos_dev.stack.services.Stack` (launch, pid files, shutdown), one
service per node (``kafka-1``.. ``zookeeper-3``). All JVMs are launched together, then waited for:
a quorum needs a majority up before any node is ready. Used by the secured tests (a session
fixture) and by ``eos-pipeline stack up --secure``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

from eos_dev.stack.certs import TlsFiles, ensure_tls, write_secret
from eos_dev.stack.config import StackError
from eos_dev.stack.kafka_broker import kafka_cluster_id
from eos_dev.stack.processes import find_java, pid_alive, wait_ready
from eos_dev.stack.secure_config import (
    ADMIN,
    KEEPER_PIPELINE,
    MECHANISM,
    SCRAM_USERS,
    KafkaNode,
    KeeperNode,
    PipelineAcl,
    SecureStackConfig,
    broker_properties,
    pipeline_acls,
    zoo_cfg,
    zookeeper_jaas,
)
from eos_dev.stack.services import Stack
from eos_dev.stack.zookeeper import zookeeper_ready


def _kafka(node: KafkaNode) -> str:
    return f"kafka-{node.node_id}"


def _zookeeper(node: KeeperNode) -> str:
    return f"zookeeper-{node.server_id}"


class SecureStack(Stack):
    """Start, check, stop (and, for fault tests, kill and restart) the secured stack's nodes."""

    config: SecureStackConfig

    def __init__(self, config: SecureStackConfig, say: Callable[[str], None] = print) -> None:
        super().__init__(config, say)

    def services(self) -> list[str]:
        cfg = self.config
        return [_zookeeper(n) for n in cfg.keeper_nodes] + [_kafka(n) for n in cfg.kafka_nodes]

    def _endpoint(self, name: str) -> str:
        kind, _, index = name.partition("-")
        i = int(index) - 1
        if kind == "zookeeper":
            return f"{self.config.host}:{self.config.keeper_nodes[i].client_port}"
        return f"{self.config.host}:{self.config.kafka_nodes[i].client_port}"

    # ------------------------------------------------------------------------------ clients

    def admin_config(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.config.kafka_bootstrap,
            **self.config.client_config(ADMIN),
        }

    def kafka_ready(self) -> bool:
        """True once the cluster answers the admin over SASL_SSL with every broker listed."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.admin_config(), "socket.timeout.ms": 2000, "log_level": 0})
        try:
            meta = admin.list_topics(timeout=2.0)
        except Exception:
            return False
        return len(meta.brokers) >= len(self.config.kafka_nodes)

    # ------------------------------------------------------------------------------ up/down

    def up(self) -> None:
        cfg = self.config
        java = find_java()
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        if all(self._running_pid(name) for name in self.services()):
            if not self.kafka_ready():
                raise StackError(
                    f"the secured stack runs but Kafka does not answer; see {cfg.state_dir}"
                )
            self.say("secured stack already running")
            return
        started = time.monotonic()
        tls = ensure_tls(cfg.tls_dir)
        provider = cfg.tls_dir / "keystore.properties"
        if not provider.exists():
            write_secret(provider, f"password={tls.keystore_password}\n")
        launched: list[tuple[str, int, Callable[[], bool]]] = []
        for node in cfg.keeper_nodes:
            launched += self._launch_zookeeper(java, node)
        for node in cfg.kafka_nodes:
            launched += self._launch_broker(java, node, tls)
        for name, pid, probe in launched:
            wait_ready(name, probe, pid, self.log_path(name), timeout=120.0)
        wait_ready(
            "kafka cluster", self.kafka_ready, launched[-1][1], self.log_path(launched[-1][0])
        )
        self.grant(pipeline_acls(cfg))
        if cfg.keeper_nodes:
            self._make_keeper_root()
        self.say(
            f"secured stack ready in {time.monotonic() - started:.1f}s: kafka "
            f"{cfg.kafka_bootstrap} (SASL_SSL {MECHANISM})"
            + (f", zookeeper {cfg.zookeeper_hosts}" if cfg.keeper_nodes else "")
        )

    def _launch_zookeeper(
        self, java: str, node: KeeperNode
    ) -> list[tuple[str, int, Callable[[], bool]]]:
        name = _zookeeper(node)
        if pid := self._running_pid(name):
            return [(name, pid, lambda: True)]
        self._check_ports(name, {"zookeeper": node.client_port, "peer": node.peer_port,
                                 "election": node.election_port})  # fmt: skip
        home = self._dir(name)
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{node.server_id}\n")
        conf = home / "zoo.cfg"
        conf.write_text(zoo_cfg(self.config, node, data))
        jaas = home / "jaas.conf"
        write_secret(jaas, zookeeper_jaas(self.config))
        pid = self._launch(
            name,
            java,
            [
                f"-Djava.security.auth.login.config={jaas}",
                # ZooKeeper 3.9 defaults to FIPS mode, which rules out DIGEST-MD5 (its quorum
                # learners then fail with a NullPointerException and no quorum ever forms).
                "-Dzookeeper.fips-mode=false",
                "-Dzookeeper.admin.enableServer=false",
                "-cp",
                self._classpath("zookeeper"),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(conf),
            ],
            self.config.zookeeper_heap,
        )
        self.say(f"starting {name} (pid {pid})")
        host, port = self.config.host, node.client_port
        return [(name, pid, lambda: zookeeper_ready(host, port))]

    def _launch_broker(
        self, java: str, node: KafkaNode, tls: TlsFiles
    ) -> list[tuple[str, int, Callable[[], bool]]]:
        cfg = self.config
        name = _kafka(node)
        if pid := self._running_pid(name):
            return [(name, pid, lambda: True)]
        self._check_ports(name, {"client": node.client_port, "internal": node.internal_port,
                                 "controller": node.controller_port})  # fmt: skip
        home = self._dir(name)
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        props = home / "server.properties"
        props.write_text(broker_properties(cfg, node, tls, data))
        classpath = self._classpath("kafka")
        if not (data / "meta.properties").exists():
            self._format(java, classpath, props)
        pid = self._launch(
            name,
            java,
            [
                # Only the file provider the configs name may be instantiated (CVE-2024-31141).
                "-Dorg.apache.kafka.automatic.config.providers="
                "org.apache.kafka.common.config.provider.FileConfigProvider",
                "-cp",
                classpath,
                "kafka.Kafka",
                str(props),
            ],
            cfg.kafka_heap,
        )
        self.say(f"starting {name} (pid {pid})")
        return [(name, pid, lambda: True)]

    def _format(self, java: str, classpath: str, props: os.PathLike[str]) -> None:
        """Format one node's storage with the cluster's id and every SCRAM user."""
        cfg = self.config
        id_file = cfg.state_dir / "cluster.id"
        if not id_file.exists():
            id_file.write_text(kafka_cluster_id())
        scram: list[str] = []
        for user in SCRAM_USERS:
            scram += ["--add-scram", f"{MECHANISM}=[name={user},password={cfg.password(user)}]"]
        done = subprocess.run(
            [java, "-cp", classpath, "kafka.tools.StorageTool", "format", "--ignore-formatted",
             "-t", id_file.read_text().strip(), "-c", str(props), *scram],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            out = done.stdout + done.stderr
            for user in SCRAM_USERS:  # the tool may echo its arguments
                out = out.replace(cfg.password(user), "***")
            raise StackError(f"formatting Kafka storage failed:\n{out}")

    def down(self, timeout: float = 20.0) -> None:
        """Stop the brokers together, then the ZooKeeper servers together.

        One by one, the last broker would wait out its controlled shutdown for a quorum that is
        already gone (30 s, then a kill): stopped together, they all leave in a few seconds.
        """
        cfg = self.config
        for group in (
            [_kafka(n) for n in cfg.kafka_nodes],
            [_zookeeper(n) for n in cfg.keeper_nodes],
        ):
            pids = {name: pid for name in group if (pid := self._running_pid(name))}
            for name, pid in pids.items():
                self.say(f"stopping {name} (pid {pid})")
                self._signal_group(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while any(pid_alive(p) for p in pids.values()) and time.monotonic() < deadline:
                time.sleep(0.1)
            for name, pid in pids.items():
                if pid_alive(pid):
                    self.say(f"{name} did not stop within {timeout:.0f}s; killing it")
                    self._signal_group(pid, signal.SIGKILL)
                    while pid_alive(pid):
                        time.sleep(0.05)
            for name in group:
                self._pidfile(name).unlink(missing_ok=True)

    # ------------------------------------------------------------------------------ ACLs

    def grant(self, acls: list[PipelineAcl]) -> None:
        """Create ALLOW ``acls`` (as the admin super user); existing ones are left as they are."""
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            AdminClient,
            ResourcePatternType,
            ResourceType,
        )

        admin = AdminClient(self.admin_config())
        bindings = [
            AclBinding(
                ResourceType[a.resource],
                a.name,
                ResourcePatternType[a.pattern],
                a.principal,
                "*",
                AclOperation[a.operation],
                AclPermissionType.ALLOW,
            )
            for a in acls
        ]
        for future in admin.create_acls(bindings, request_timeout=30).values():
            future.result()

    def create_topic(self, name: str, partitions: int) -> None:
        """``name`` with the cluster's replication factor (as the admin); an existing one stays."""
        from eos_pipeline.adapters.kafka import KafkaSettings, create_topic

        settings = KafkaSettings(self.config.kafka_bootstrap, self.config.client_config(ADMIN))
        create_topic(settings, name, partitions, self.config.replication_factor)

    def _make_keeper_root(self) -> None:
        """The keeper root, owned by the pipeline's digest user: nobody else may read or write."""
        from kazoo.client import KazooClient
        from kazoo.security import make_digest_acl

        cfg = self.config
        user, password = KEEPER_PIPELINE, cfg.password(f"keeper-{KEEPER_PIPELINE}")
        client = KazooClient(
            hosts=cfg.zookeeper_hosts, auth_data=[("digest", f"{user}:{password}")]
        )
        client.start(timeout=30)
        try:
            client.ensure_path(cfg.keeper_root, acl=[make_digest_acl(user, password, all=True)])
        finally:
            client.stop()
            client.close()

    # ------------------------------------------------------------------------------ faults

    def pid(self, name: str) -> int | None:
        return self._running_pid(name)

    def kill(self, name: str) -> None:
        """SIGKILL one node (``kafka-2``, ``zookeeper-1``...) and wait until it is gone."""
        pid = self._running_pid(name)
        if pid is None:
            return
        self._signal_group(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.05)
        self._pidfile(name).unlink(missing_ok=True)

    def restart(self, name: str) -> None:
        """Start a killed node again and wait until the cluster lists every broker."""
        java = find_java()
        kind, _, index = name.partition("-")
        i = int(index) - 1
        if kind == "zookeeper":
            [(n, pid, probe)] = self._launch_zookeeper(java, self.config.keeper_nodes[i])
        else:
            tls = ensure_tls(self.config.tls_dir)
            [(n, pid, probe)] = self._launch_broker(java, self.config.kafka_nodes[i], tls)
            probe = self.kafka_ready
        wait_ready(n, probe, pid, self.log_path(n), timeout=120.0)

    def processes(self) -> list[int]:
        return [pid for name in self.services() if (pid := self._running_pid(name))]
