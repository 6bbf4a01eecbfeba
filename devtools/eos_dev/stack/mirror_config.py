"""The failover stack's configuration: two clusters, MirrorMaker 2's properties, its state file.

Kept apart from the processes (:mod:`eos_dev.stack.mirror`) so the CLI and the tests can
build and read a configuration without starting anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eos_dev.stack.config import StackError

MIRROR_MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
#: Topic produced on every cluster to prove that both flows replicate (no dot: MM2's default
#: policy reads the part before the first dot as a cluster alias).
PROBE_TOPIC = "eos-mirror-probe"
CONFIG_FILE = "mirror.json"


#: The JAAS login module of SCRAM, for MM2's clients of a secured cluster.
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class ClusterSecurity:
    """How MirrorMaker 2, and the stack's replication probe, log in to a SASL_SSL cluster.

    Passwords are never held here (this lands in the stack's state file): each sits alone in a
    0600 file. MM2's properties name its password with Kafka's ``DirectoryConfigProvider``
    (``${dir:<folder>:<file>}``), resolved inside MM2; the probe (the stack's administrator)
    reads its own when it connects.
    """

    ca_pem: str
    mirror_user: str
    mirror_password_file: str
    probe_user: str
    probe_password_file: str
    mechanism: str = "SCRAM-SHA-512"

    def probe_client(self) -> dict[str, str]:
        """librdkafka settings of the probe's user."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": self.mechanism,
            "sasl.username": self.probe_user,
            "sasl.password": Path(self.probe_password_file).read_text().strip(),
            "ssl.ca.location": self.ca_pem,
        }

    def java_client(self) -> dict[str, str]:
        """Java client settings of the probe's user (the stack's own JVM tools log in as it)."""
        password = Path(self.probe_password_file).read_text().strip()
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": self.mechanism,
            "sasl.jaas.config": f'{SCRAM_LOGIN} required username="{self.probe_user}" '
            f'password="{password}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.ca_pem,
        }

    def mm2_lines(self, alias: str) -> list[str]:
        """MM2's client settings for cluster ``alias`` (every client of it, and the worker)."""
        secret = Path(self.mirror_password_file)
        password = f"${{dir:{secret.parent}:{secret.name}}}"
        return [
            f"{alias}.security.protocol=SASL_SSL",
            f"{alias}.sasl.mechanism={self.mechanism}",
            f'{alias}.sasl.jaas.config={SCRAM_LOGIN} required username="{self.mirror_user}" '
            f'password="{password}";',
            f"{alias}.ssl.truststore.type=PEM",
            f"{alias}.ssl.truststore.location={self.ca_pem}",
        ]


@dataclass(frozen=True)
class MirrorCluster:
    """One Kafka cluster of the pair, by its MM2 alias.

    ``managed`` clusters are started and stopped by :class:`MirrorStack`; an unmanaged one is an
    existing broker reached at ``host:kafka_port`` (its controller port is then unused), or at
    ``bootstrap_servers`` when given (a cluster of several brokers). ``security``: how to log in
    to a SASL_SSL cluster (None: PLAINTEXT). ``replication_factor``: of the topics MM2 makes
    there; above 1, MM2 takes each cluster's default instead of setting one.
    """

    alias: str
    kafka_port: int
    controller_port: int
    managed: bool = True
    bootstrap_servers: str = ""
    security: ClusterSecurity | None = None
    replication_factor: int = 1


@dataclass(frozen=True)
class MirrorConfig:
    """Where the two clusters and MirrorMaker 2 run, and how MM2 replicates between them.

    ``offset_lag_max`` is MM2's ``offset.lag.max``: the most records a translated position can
    be behind; ``offset_syncs_location`` is MM2's ``offset-syncs.topic.location`` (``source``,
    MM2's default, keeps flow A->B's syncs on A; ``target`` keeps them on B, readable while A is
    down). ``topics`` is the regex of topics replicated by both flows.
    ``rebalance_delay_ms`` is Kafka Connect's ``scheduled.rebalance.max.delay.ms`` for MM2's
    workers: after a broker restart a worker that left its group gets its tasks back after this
    delay; Connect's default, five minutes, stalls replication that long.
    """

    state_dir: Path
    clusters: tuple[MirrorCluster, MirrorCluster]
    rest_port: int
    host: str = "127.0.0.1"
    topics: str = ".*"
    offset_lag_max: int = 100
    offset_syncs_location: str = "source"
    refresh_seconds: int = 1
    exactly_once: bool = True
    kafka_heap: str = "512m"
    mirror_heap: str = "512m"
    cache_dir: Path | None = None
    rebalance_delay_ms: int = 5000
    extra_properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        aliases = self.aliases
        if len(set(aliases)) != 2:
            raise StackError(f"the two clusters need distinct aliases, got {aliases}")
        for alias in aliases:
            if not alias or not alias.replace("_", "").replace("-", "").isalnum():
                raise StackError(
                    f"cluster alias {alias!r} must be letters, digits, '-' or '_' (no '.': MM2 "
                    "separates the alias from the topic name with a dot)"
                )
        if self.offset_syncs_location not in ("source", "target"):
            raise StackError(
                f"offset_syncs_location must be 'source' or 'target', got "
                f"{self.offset_syncs_location!r}"
            )
        if self.offset_lag_max < 0:
            raise StackError(f"offset_lag_max must be >= 0, got {self.offset_lag_max}")

    @property
    def aliases(self) -> tuple[str, str]:
        return (self.clusters[0].alias, self.clusters[1].alias)

    def cluster(self, alias: str) -> MirrorCluster:
        for cluster in self.clusters:
            if cluster.alias == alias:
                return cluster
        raise StackError(f"unknown cluster alias {alias!r}; this stack has {self.aliases}")

    def bootstrap(self, alias: str) -> str:
        cluster = self.cluster(alias)
        return cluster.bootstrap_servers or f"{self.host}:{cluster.kafka_port}"

    def client_config(self, alias: str) -> dict[str, str]:
        """librdkafka settings the stack's own clients (readiness, probe) need for ``alias``."""
        security = self.cluster(alias).security
        return security.probe_client() if security is not None else {}

    @property
    def rest_url(self) -> str:
        return f"http://{self.host}:{self.rest_port}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str, indent=1)

    @classmethod
    def from_json(cls, text: str) -> MirrorConfig:
        raw: dict[str, Any] = json.loads(text)
        raw["state_dir"] = Path(raw["state_dir"])
        raw["cache_dir"] = Path(raw["cache_dir"]) if raw.get("cache_dir") else None
        raw["clusters"] = tuple(
            MirrorCluster(**{**c, "security": ClusterSecurity(**c["security"])})
            if c.get("security")
            else MirrorCluster(**c)
            for c in raw["clusters"]
        )
        return cls(**raw)

    @classmethod
    def load(cls, state_dir: Path) -> MirrorConfig | None:
        """The config a previous ``up`` left in ``state_dir``, or None if there is none."""
        path = Path(state_dir) / CONFIG_FILE
        try:
            return cls.from_json(path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise StackError(
                f"{path} is unreadable ({exc}); remove it or run `stack down`"
            ) from exc


def mm2_properties(config: MirrorConfig) -> str:
    """The dedicated-mode MM2 properties file for ``config`` (both flows enabled)."""
    a, b = config.aliases
    # A single-broker cluster can hold no more than one replica of anything; with a replicated
    # cluster in the pair, each cluster's default (-1) is the factor of MM2's topics there.
    rf = 1 if all(c.replication_factor == 1 for c in config.clusters) else -1
    lines = [
        f"clusters={a},{b}",
        f"{a}.bootstrap.servers={config.bootstrap(a)}",
        f"{b}.bootstrap.servers={config.bootstrap(b)}",
        "replication.policy.class=org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
        "tasks.max=1",
        f"replication.factor={rf}",
        f"checkpoints.topic.replication.factor={rf}",
        f"heartbeats.topic.replication.factor={rf}",
        f"offset-syncs.topic.replication.factor={rf}",
        f"offset.storage.replication.factor={rf}",
        f"status.storage.replication.factor={rf}",
        f"config.storage.replication.factor={rf}",
        # Short intervals: a new topic is mirrored within seconds, not MM2's ten minutes.
        f"refresh.topics.interval.seconds={config.refresh_seconds}",
        f"refresh.groups.interval.seconds={config.refresh_seconds}",
        f"emit.checkpoints.interval.seconds={config.refresh_seconds}",
        f"emit.heartbeats.interval.seconds={config.refresh_seconds}",
        f"sync.group.offsets.interval.seconds={config.refresh_seconds}",
        "offset.flush.interval.ms=1000",
        f"offset.lag.max={config.offset_lag_max}",
        f"offset-syncs.topic.location={config.offset_syncs_location}",
        # KRaft here runs without an authorizer: syncing ACLs would only log errors.
        "sync.topic.acls.enabled=false",
    ]
    for source, target in ((a, b), (b, a)):
        lines += [
            f"{source}->{target}.enabled=true",
            f"{source}->{target}.topics={config.topics}",
        ]
    # The workers' internal REST server: exactly-once source needs it to fence zombie tasks,
    # and it keeps MM2 off the default port 8083.
    lines += [
        "dedicated.mode.enable.internal.rest=true",
        f"listeners=http://{config.host}:{config.rest_port}",
    ]
    if config.exactly_once:
        # Per target cluster: the unprefixed key is silently ignored.
        lines += [
            f"{a}.exactly.once.source.support=enabled",
            f"{b}.exactly.once.source.support=enabled",
            f"{a}->{b}.consumer.isolation.level=read_committed",
            f"{b}->{a}.consumer.isolation.level=read_committed",
        ]
    # Recovery from a broker restart in seconds: a worker that lost its group (its poll timed
    # out while the broker was down) gets its tasks back after this delay, not Connect's five
    # minutes; client reconnects back off at most 1 s. Worker settings are per target cluster
    # in dedicated mode (as exactly.once.source.support): set for both, and unprefixed.
    # Every plugin on the classpath ships a ServiceLoader manifest: skipping the reflective
    # classpath scan saves seconds of CPU per herder at start (each herder builds its plugins
    # from its target's settings, so the unprefixed key alone is ignored).
    # A worker that cannot read its config topic to the end within worker.sync.timeout.ms (3 s;
    # e.g. its target's broker just restarted, under load) leaves its group for
    # worker.unsync.backoff.ms: Connect's five minutes again, one second here.
    for alias in ("", f"{a}.", f"{b}."):
        lines += [
            f"{alias}plugin.discovery=service_load",
            f"{alias}scheduled.rebalance.max.delay.ms={config.rebalance_delay_ms}",
            f"{alias}worker.unsync.backoff.ms=1000",
            f"{alias}reconnect.backoff.max.ms=1000",
            f"{alias}retry.backoff.ms=500",
        ]
    lines += _security_lines(config)
    lines += [f"{k}={v}" for k, v in sorted(config.extra_properties.items())]
    return "\n".join(lines) + "\n"


def _security_lines(config: MirrorConfig) -> list[str]:
    """Per-cluster SASL_SSL settings, and the provider that resolves their password files."""
    secured = [(c.alias, c.security) for c in config.clusters if c.security is not None]
    if not secured:
        return []
    lines = [
        "config.providers=dir",
        "config.providers.dir.class=org.apache.kafka.common.config.provider.DirectoryConfigProvider",
    ]
    for alias, security in secured:
        lines += security.mm2_lines(alias)
    return lines


#: MirrorMaker 2's log4j2 settings: info for its own progress, warn for chatty client internals.
MM2_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
# A cap on the whole log, so that no spin can fill the disk: an MM2 whose stop failed was seen
# logging 4.5 M lines in 4 s (3.2 GB). Past a burst of 20,000 lines, at most 200 a second get
# through (FATAL always does); a normal start logs about 300.
appender.out.filter.burst.type = BurstFilter
appender.out.filter.burst.level = ERROR
appender.out.filter.burst.rate = 200
appender.out.filter.burst.maxBurst = 20000
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
# Client config dumps and per-record chatter: thousands of lines that say nothing new.
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
logger.common.name = org.apache.kafka.common
logger.common.level = warn
logger.jetty.name = org.eclipse.jetty
logger.jetty.level = warn
logger.reflections.name = org.reflections
logger.reflections.level = error
logger.isolation.name = org.apache.kafka.connect.runtime.isolation
logger.isolation.level = warn
# Its work thread, interrupted by a stop, logged "Error polling: InterruptException" in a loop:
# a few lines of that say everything.
logger.kbl.name = org.apache.kafka.connect.util.KafkaBasedLog
logger.kbl.filter.burst.type = BurstFilter
logger.kbl.filter.burst.level = ERROR
logger.kbl.filter.burst.rate = 2
logger.kbl.filter.burst.maxBurst = 50
"""


def mirror_config(
    state_dir: Path,
    ports: Sequence[tuple[int, int]],
    rest_port: int,
    aliases: tuple[str, str] = ("A", "B"),
    **options: Any,
) -> MirrorConfig:
    """A config with both clusters managed, from ``(kafka_port, controller_port)`` per alias."""
    clusters = tuple(
        MirrorCluster(alias, kafka, controller)
        for alias, (kafka, controller) in zip(aliases, ports, strict=True)
    )
    return MirrorConfig(
        state_dir=Path(state_dir).resolve(),
        clusters=clusters,  # type: ignore[arg-type]
        rest_port=rest_port,
        **options,
    )


__all__ = [
    "CONFIG_FILE",
    "MIRROR_MAIN_CLASS",
    "MM2_LOG4J2",
    "PROBE_TOPIC",
    "ClusterSecurity",
    "MirrorCluster",
    "MirrorConfig",
    "mirror_config",
    "mm2_properties",
]
