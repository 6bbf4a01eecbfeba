"""What the secured, replicated stack runs: its ports, principals, secrets and rendered configs.

Kept apart from the process code (:mod:`eos_dev.stack.secure`) so tests and the CLI can build a
configuration and read the client settings without starting anything.

Secrets: every password is taken from ``EOS_SECURE_<NAME>_PASSWORD`` when set, else made once
at random and kept in ``<state_dir>/secrets/<name>.password`` (mode 0600). The rendered broker
configs name the keystore password through Kafka's ``FileConfigProvider`` (``${file:...}``), so
no properties file holds it in clear; the JAAS files of ZooKeeper necessarily do, and are 0600.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from eos_dev.stack.certs import BROKER_SUBJECT, TlsFiles, write_secret
from eos_dev.stack.config import StackConfig

#: SCRAM users made at format time: the super user the stack itself uses (topics, ACLs), the
#: pipeline's principal and MirrorMaker 2's.
ADMIN = "eos-admin"
PIPELINE = "eos-pipeline"
MIRROR = "eos-mirror"
SCRAM_USERS = (ADMIN, PIPELINE, MIRROR)
#: Keeper (ZooKeeper digest) users: the pipeline's, and the quorum's own SASL login.
KEEPER_PIPELINE = "eos-pipeline"
QUORUM_USER = "eos-quorum"
MECHANISM = "SCRAM-SHA-512"


def secret(state_dir: Path, name: str) -> str:
    """``EOS_SECURE_<NAME>_PASSWORD``, else the stack's own random one (made on first use)."""
    var = "EOS_SECURE_" + name.upper().replace("-", "_") + "_PASSWORD"
    if os.environ.get(var):
        return os.environ[var]
    path = state_dir / "secrets" / f"{name}.password"
    if not path.exists():
        write_secret(path, secrets.token_urlsafe(18))
    return path.read_text().strip()


@dataclass(frozen=True)
class KafkaNode:
    node_id: int
    client_port: int  # SASL_SSL, SCRAM-SHA-512: the clients' listener
    internal_port: int  # SSL with client certificates: broker to broker
    controller_port: int  # SSL with client certificates: the KRaft quorum


@dataclass(frozen=True)
class KeeperNode:
    server_id: int
    client_port: int
    peer_port: int
    election_port: int


@dataclass(frozen=True)
class SecureStackConfig(StackConfig):
    """Three KRaft brokers (combined broker+controller) and a three-server ZooKeeper ensemble."""

    kafka_nodes: tuple[KafkaNode, ...] = ()
    keeper_nodes: tuple[KeeperNode, ...] = ()
    kafka_heap: str = "256m"
    zookeeper_heap: str = "64m"
    #: The pipeline's principal may read (and describe) topics starting with this ...
    topic_prefix: str = "eos."
    #: ... and write dead letters to (and read back) topics starting with this.
    dead_letter_prefix: str = "eos-dlq."
    #: Its consumer group and transactional ids start with this.
    id_prefix: str = "eos-pipeline"
    #: The keeper root only the pipeline's digest user may write.
    keeper_root: str = "/eos_pipeline"
    replication_factor: int = 3
    min_insync_replicas: int = 2
    #: Where the CA and the secrets live: this state dir, or the first cluster's when a second
    #: cluster (the failover peer) shares its CA and its users' passwords.
    shared_dir: Path | None = None

    @classmethod
    def on_ports(cls, state_dir: Path, ports: list[int], **kw: object) -> SecureStackConfig:
        """A config on 18 given ports: 3 per broker, then 3 per ZooKeeper server."""
        if len(ports) != 18:
            raise ValueError("the secured stack needs 18 ports (3 brokers, 3 ZooKeepers x 3)")
        kafka = tuple(KafkaNode(i + 1, *ports[3 * i : 3 * i + 3]) for i in range(3))
        keeper = tuple(KeeperNode(i + 1, *ports[9 + 3 * i : 12 + 3 * i]) for i in range(3))
        return cls(state_dir=state_dir, kafka_nodes=kafka, keeper_nodes=keeper, **kw)  # type: ignore[arg-type]

    @classmethod
    def peer_on_ports(
        cls, state_dir: Path, ports: list[int], first: SecureStackConfig, **kw: object
    ) -> SecureStackConfig:
        """A one-broker cluster beside ``first`` (its failover peer) on 3 given ports: same CA,
        same users and passwords, replication factor 1, no ZooKeeper."""
        if len(ports) != 3:
            raise ValueError("the peer cluster needs 3 ports (client, internal, controller)")
        return cls(
            state_dir=state_dir,
            host=first.host,
            cache_dir=first.cache_dir,
            kafka_nodes=(KafkaNode(1, *ports),),
            shared_dir=first.secrets_home,
            replication_factor=1,
            min_insync_replicas=1,
            **kw,  # type: ignore[arg-type]
        )

    @classmethod
    def default(cls, state_dir: Path, **kw: object) -> SecureStackConfig:
        """Fixed ports 19101-19118 for ``stack up --secure`` (below the ephemeral range)."""
        return cls.on_ports(state_dir, list(range(19101, 19119)), **kw)

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"{self.host}:{n.client_port}" for n in self.kafka_nodes)

    @property
    def zookeeper_hosts(self) -> str:
        return ",".join(f"{self.host}:{n.client_port}" for n in self.keeper_nodes)

    @property
    def secrets_home(self) -> Path:
        return self.shared_dir or self.state_dir

    @property
    def tls_dir(self) -> Path:
        return self.secrets_home / "tls"

    @property
    def secrets_dir(self) -> Path:
        """The folder of the ``<name>.password`` files (made on first use, mode 0600)."""
        return self.secrets_home / "secrets"

    def password(self, name: str) -> str:
        return secret(self.secrets_home, name)

    def client_config(self, user: str, password: str | None = None) -> dict[str, str]:
        """librdkafka settings of ``user`` (its own password unless another is given)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.password(user) if password is None else password,
            "ssl.ca.location": str(self.tls_dir / "ca.pem"),
        }

    def java_client_config(self, user: str) -> dict[str, str]:
        """The same for a Java client (MirrorMaker 2, Spark's Kafka source)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{user}" password="{self.password(user)}";'
            ),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls_dir / "ca.pem"),
        }


def broker_properties(cfg: SecureStackConfig, node: KafkaNode, tls: TlsFiles, data: Path) -> str:
    """``server.properties`` of one combined broker/controller of the secured cluster."""
    h = cfg.host
    voters = ",".join(f"{n.node_id}@{h}:{n.controller_port}" for n in cfg.kafka_nodes)
    rf, isr = cfg.replication_factor, cfg.min_insync_replicas
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node.node_id}",
            f"controller.quorum.voters={voters}",
            f"listeners=CLIENT://{h}:{node.client_port},INTERNAL://{h}:{node.internal_port},"
            f"CONTROLLER://{h}:{node.controller_port}",
            f"advertised.listeners=CLIENT://{h}:{node.client_port},"
            f"INTERNAL://{h}:{node.internal_port},CONTROLLER://{h}:{node.controller_port}",
            "listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL",
            "inter.broker.listener.name=INTERNAL",
            "controller.listener.names=CONTROLLER",
            # Brokers and controllers prove who they are with the stack's certificate.
            "listener.name.internal.ssl.client.auth=required",
            "listener.name.controller.ssl.client.auth=required",
            f"sasl.enabled.mechanisms={MECHANISM}",
            "listener.name.client.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "config.providers=file",
            "config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider",
            "ssl.keystore.type=PKCS12",
            f"ssl.keystore.location={tls.keystore}",
            f"ssl.keystore.password=${{file:{tls.keystore_password_file.with_suffix('.properties')}"
            ":password}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={tls.ca_pem}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            f"super.users=User:{BROKER_SUBJECT};User:{ADMIN}",
            "allow.everyone.if.no.acl.found=false",
            f"log.dirs={data}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            f"default.replication.factor={rf}",
            f"min.insync.replicas={isr}",
            f"offsets.topic.replication.factor={rf}",
            "offsets.topic.num.partitions=4",
            f"transaction.state.log.replication.factor={rf}",
            f"transaction.state.log.min.isr={isr}",
            "transaction.state.log.num.partitions=4",
            f"share.coordinator.state.topic.replication.factor={rf}",
            f"share.coordinator.state.topic.min.isr={isr}",
            "group.initial.rebalance.delay.ms=0",
            # A SIGKILLed broker's partitions move within seconds, not the default 9-18 s.
            "broker.session.timeout.ms=6000",
            "broker.heartbeat.interval.ms=1000",
            "",
        ]
    )


def zoo_cfg(cfg: SecureStackConfig, node: KeeperNode, data: Path) -> str:
    """``zoo.cfg`` of one ensemble server: quorum SASL required, clients must authenticate."""
    servers = [
        f"server.{n.server_id}={cfg.host}:{n.peer_port}:{n.election_port}" for n in cfg.keeper_nodes
    ]
    return "\n".join(
        [
            "tickTime=1000",
            "initLimit=20",
            "syncLimit=5",
            f"dataDir={data}",
            f"clientPort={node.client_port}",
            f"clientPortAddress={cfg.host}",
            *servers,
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,stat,mntr",
            "minSessionTimeout=2000",
            "maxSessionTimeout=60000",
            # Servers admit each other only after SASL DIGEST-MD5 with the quorum login.
            "quorum.auth.enableSasl=true",
            "quorum.auth.learnerRequireSasl=true",
            "quorum.auth.serverRequireSasl=true",
            "quorum.auth.learner.saslLoginContext=QuorumLearner",
            "quorum.auth.server.saslLoginContext=QuorumServer",
            "quorum.cnxn.threads.size=6",
            # Clients: SASL (Java clients) or digest (kazoo); a client that has authenticated
            # with neither is refused every request.
            "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
            "enforce.auth.enabled=true",
            "enforce.auth.schemes=sasl,digest",
            "",
        ]
    )


def zookeeper_jaas(cfg: SecureStackConfig) -> str:
    quorum = cfg.password(QUORUM_USER)
    pipeline = cfg.password(f"keeper-{KEEPER_PIPELINE}")
    return (
        "QuorumServer {\n"
        "  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'  user_{QUORUM_USER}="{quorum}";\n}};\n'
        "QuorumLearner {\n"
        "  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'  username="{QUORUM_USER}" password="{quorum}";\n}};\n'
        "Server {\n"
        "  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'  user_{KEEPER_PIPELINE}="{pipeline}";\n}};\n'
    )


@dataclass(frozen=True)
class PipelineAcl:
    """One ACL entry the stack grants, as (resource type, pattern, name, operation)."""

    resource: str
    name: str
    operation: str
    pattern: str = "PREFIXED"
    principal: str = field(default=f"User:{PIPELINE}")


def pipeline_acls(cfg: SecureStackConfig) -> list[PipelineAcl]:
    """The pipeline's rights: read its topics, write (and read back) its dead letters, use its
    group and transactional ids. Nothing else (no cluster rights, no other topic)."""
    acls = [PipelineAcl("TOPIC", cfg.topic_prefix, op) for op in ("READ", "DESCRIBE")]
    acls += [PipelineAcl("TOPIC", cfg.dead_letter_prefix, op) for op in ("WRITE", "DESCRIBE")]
    acls += [PipelineAcl("TOPIC", cfg.dead_letter_prefix, "READ")]
    acls += [PipelineAcl("GROUP", "eos-", "READ")]
    acls += [PipelineAcl("TRANSACTIONAL_ID", cfg.id_prefix, op) for op in ("WRITE", "DESCRIBE")]
    return acls


def mirror_acls(cfg: SecureStackConfig, peer: str, probe: str) -> list[PipelineAcl]:
    """MirrorMaker 2's rights on this cluster, whose failover peer has MM2 alias ``peer``.

    As a source: read (and describe, with configs) the pipeline's topics, the ``probe`` topic
    and ``heartbeats``. As the target of flow ``peer->here``: make and write the replicas
    (``<peer>.eos.``...), its checkpoints, heartbeats, and its Connect worker's internal topics,
    join its worker group ``<peer>-mm2`` and use that group's transactional ids (exactly-once
    source). No cluster right, no other topic, group or id.
    """
    who = f"User:{MIRROR}"

    def topic(name: str, ops: tuple[str, ...], pattern: str = "LITERAL") -> list[PipelineAcl]:
        return [PipelineAcl("TOPIC", name, op, pattern, who) for op in ops]

    read = ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")
    replica = ("CREATE", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER", "ALTER_CONFIGS")
    internal = ("CREATE", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")
    group = f"{peer}-mm2"
    acls = topic(cfg.topic_prefix, read, "PREFIXED") + topic(probe, read)
    acls += topic("heartbeats", internal)
    acls += topic(f"{peer}.{cfg.topic_prefix}", replica, "PREFIXED")
    acls += topic(f"{peer}.{probe}", replica) + topic(f"{peer}.heartbeats", replica)
    kinds = ("offsets", "configs", "status")
    internals = [f"mm2-{kind}.{peer}.internal" for kind in kinds]
    for name in [f"{peer}.checkpoints.internal", f"mm2-offset-syncs.{peer}.internal", *internals]:
        acls += topic(name, internal)
    acls += [PipelineAcl("GROUP", group, "READ", "LITERAL", who)]
    for name, pattern in ((f"{group}-", "PREFIXED"), (f"connect-cluster-{group}", "LITERAL")):
        acls += [
            PipelineAcl("TRANSACTIONAL_ID", name, op, pattern, who) for op in ("WRITE", "DESCRIBE")
        ]
    return acls


def failover_acls(cfg: SecureStackConfig, peer: str) -> list[PipelineAcl]:
    """What the pipeline needs on top of :func:`pipeline_acls` to fail over to and from a peer
    cluster: read the peer's replicas here (``<peer>.eos.``) and MM2's offset syncs of flow
    ``here->peer``, which a switch translates positions with."""
    acls = [PipelineAcl("TOPIC", f"{peer}.{cfg.topic_prefix}", op) for op in ("READ", "DESCRIBE")]
    acls += [
        PipelineAcl("TOPIC", f"mm2-offset-syncs.{peer}.internal", op, "LITERAL")
        for op in ("READ", "DESCRIBE")
    ]
    return acls
