"""Two KRaft Kafka clusters with MirrorMaker 2 replicating both ways: the failover stack.

MirrorMaker 2 runs in dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``) with the
default replication policy, so topic ``T`` of cluster A appears on B as ``A.T`` and ``T`` of B on A
as ``B.T``. Exactly-once source support is on for both target clusters (a replica holds each
record once; see PLATFORM.md for why each property is set the way it is).

The brokers reuse :class:`~eos_dev.stack.services.Stack` (same launch, pid files, readiness
and shutdown), each in its own state directory. One cluster may be an already running broker that
this stack does not own (``eos-pipeline stack up --mirror`` mirrors the main stack's Kafka); it is
then neither started nor stopped here. Readiness proves replication: a record produced on each
cluster must be read back from its replica on the other, never a sleep.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from eos_dev.stack.config import ServiceStatus, StackConfig, StackError
from eos_dev.stack.kafka_broker import kafka_ready
from eos_dev.stack.mirror_config import (
    CONFIG_FILE,
    MIRROR_MAIN_CLASS,
    MM2_LOG4J2,
    PROBE_TOPIC,
    MirrorCluster,
    MirrorConfig,
    mirror_config,
    mm2_properties,
)
from eos_dev.stack.processes import find_java, wait_ready
from eos_dev.stack.services import Stack


class _KafkaOnly(Stack):
    """A single KRaft broker (no ZooKeeper), with the main stack's launch and shutdown code."""

    SERVICES = ("kafka",)

    def services(self) -> list[str]:
        return list(self.SERVICES)  # never the main stack's optional extras

    def up(self) -> None:
        java = find_java()
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        self._start_kafka(java)


class _MirrorMakerProcess(Stack):
    """The MM2 JVM, managed like the other services (pid file, own session, log file)."""

    SERVICES = ("mirrormaker",)

    def services(self) -> list[str]:
        return list(self.SERVICES)

    def __init__(self, mirror: MirrorConfig, say: Callable[[str], None]) -> None:
        super().__init__(
            StackConfig(state_dir=mirror.state_dir, host=mirror.host, cache_dir=mirror.cache_dir),
            say,
        )
        self.mirror = mirror

    def _endpoint(self, name: str) -> str:
        return self.mirror.rest_url

    def start(self, probe: Callable[[], bool], timeout: float) -> None:
        java = find_java()
        home = self._dir("mirrormaker")
        home.mkdir(parents=True, exist_ok=True)
        props = home / "mm2.properties"
        props.write_text(mm2_properties(self.mirror))
        log4j = home / "log4j2.properties"
        log4j.write_text(MM2_LOG4J2)
        self._check_ports("mirrormaker", {"--mirror-rest-port": self.mirror.rest_port})
        pid = self._launch(
            "mirrormaker",
            java,
            [
                f"-Dlog4j2.configurationFile={log4j}",
                "-cp",
                self._classpath("mirror"),
                MIRROR_MAIN_CLASS,
                str(props),
            ],
            self.mirror.mirror_heap,
        )
        self.say(f"starting mirrormaker (pid {pid}) ...")
        wait_ready("mirrormaker", probe, pid, self.log_path("mirrormaker"), timeout=timeout)


#: Java source run by :meth:`MirrorStack.close_open_transactions` (the JDK's source launcher).
TRANSACTIONS_TOOL = Path(__file__).parent / "java" / "MirrorTransactions.java"
#: Seconds a stopping MM2 gets before SIGKILL: its graceful stop takes 3-4 when it works, and
#: when it fails it never ends by itself (its interrupted ``KafkaBasedLog`` threads were seen
#: spinning on "Error polling: InterruptException" until the kill). With exactly-once source a
#: kill loses nothing; what it leaves open, the next start closes (``close_open_transactions``).
STOP_GRACE_SECONDS = 8.0


class ReplicationProbe:
    """Proof that both flows replicate: a fresh record on each cluster, read from its replica.

    The probe topic exists on both clusters; a unique payload is produced to it on each, and
    :meth:`__call__` is true once each payload was read (``read_committed``) from the remote
    topic on the other cluster. Until MM2 has discovered the topic, the remote topic is absent
    and the call is simply false.
    """

    def __init__(self, config: MirrorConfig, topic: str = PROBE_TOPIC) -> None:
        from confluent_kafka import Consumer, Producer

        from eos_pipeline.adapters.kafka import KafkaSettings, create_topic

        self.config = config
        self.topic = topic
        self.token = uuid.uuid4().hex.encode()
        self.pending: set[str] = set(config.aliases)  # source aliases not yet seen on the peer
        self._consumers: dict[str, Any] = {}
        self._assigned: set[str] = set()
        for alias in config.aliases:
            # Warnings and errors only: librdkafka's notices about purged admin events are noise.
            client = config.client_config(alias)  # empty unless the cluster is secured
            settings = KafkaSettings(config.bootstrap(alias), {"log_level": 4, **client})
            create_topic(settings, topic, partitions=1)
            producer = Producer(
                {"bootstrap.servers": config.bootstrap(alias), "acks": "all", **client}
            )
            producer.produce(topic, key=alias.encode(), value=self.token)
            if producer.flush(30.0):
                raise StackError(f"could not produce the replication probe to cluster {alias}")
            self._consumers[alias] = Consumer(
                {
                    "bootstrap.servers": config.bootstrap(alias),
                    "group.id": "eos-mirror-probe",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    "log_level": 0,
                    **client,
                }
            )

    def remote(self, source: str) -> tuple[str, str]:
        """(cluster to read, topic to read) where ``source``'s probe record is replicated."""
        peer = next(a for a in self.config.aliases if a != source)
        return peer, f"{source}.{self.topic}"

    def _seen(self, source: str) -> bool:
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        peer, remote = self.remote(source)
        consumer = self._consumers[peer]
        if source not in self._assigned:
            meta = consumer.list_topics(remote, timeout=2.0).topics.get(remote)
            if meta is None or meta.error is not None or not meta.partitions:
                return False
            consumer.assign([KafkaTopicPartition(remote, 0, 0)])
            self._assigned.add(source)
        for msg in consumer.consume(num_messages=100, timeout=0.5):
            if msg.error() is None and msg.value() == self.token and msg.key() == source.encode():
                return True
        return False

    def __call__(self) -> bool:
        for source in sorted(self.pending):
            if self._seen(source):
                self.pending.discard(source)
        return not self.pending

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()


#: How long ``up`` waits for a running MM2 to replicate before restarting it.
STALLED_SECONDS = 20.0


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class MirrorStack:
    """Start, check and stop the two clusters and MirrorMaker 2 of one :class:`MirrorConfig`."""

    def __init__(self, config: MirrorConfig, say: Callable[[str], None] = print) -> None:
        self.config = config
        self.say = say
        self._brokers = {
            c.alias: _KafkaOnly(
                StackConfig(
                    state_dir=config.state_dir / c.alias,
                    host=config.host,
                    kafka_port=c.kafka_port,
                    controller_port=c.controller_port,
                    cache_dir=config.cache_dir,
                    kafka_heap=config.kafka_heap,
                ),
                say=lambda line, alias=c.alias: say(f"[{alias}] {line}"),
            )
            for c in config.clusters
            if c.managed
        }
        self._mirror = _MirrorMakerProcess(config, say)

    @classmethod
    def from_state_dir(cls, state_dir: Path, say: Callable[[str], None] = print) -> MirrorStack:
        """The stack a previous ``up`` wrote to ``state_dir`` (for status and down)."""
        config = MirrorConfig.load(state_dir)
        if config is None:
            raise StackError(f"no mirror stack was started in {state_dir}")
        return cls(config, say)

    def bootstrap(self, alias: str) -> str:
        return self.config.bootstrap(alias)

    def status(self) -> list[ServiceStatus]:
        found = []
        for cluster in self.config.clusters:
            broker = self._brokers.get(cluster.alias)
            if broker is None:
                running = kafka_ready(
                    self.bootstrap(cluster.alias), self.config.client_config(cluster.alias)
                )
                found.append(
                    ServiceStatus(
                        f"kafka-{cluster.alias}",
                        running,
                        None,
                        self.bootstrap(cluster.alias),
                        Path("(not managed by the mirror stack)"),
                    )
                )
            else:
                [service] = broker.status()
                found.append(replace(service, name=f"kafka-{cluster.alias}"))
        found += self._mirror.status()
        return found

    def up(self, timeout: float = 120.0, stalled_after: float = STALLED_SECONDS) -> None:
        """Start what is not running, then prove both flows replicate (idempotent). A running
        MM2 that replicates nothing for ``stalled_after`` seconds is restarted."""
        cfg = self.config
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        (cfg.state_dir / CONFIG_FILE).write_text(cfg.to_json())
        started = time.monotonic()
        # The brokers boot in parallel: each waits for its own readiness.
        with ThreadPoolExecutor(max_workers=2) as pool:
            for future in [pool.submit(b.up) for b in self._brokers.values()]:
                future.result()
        for cluster in cfg.clusters:
            if not cluster.managed and not kafka_ready(
                self.bootstrap(cluster.alias), cfg.client_config(cluster.alias)
            ):
                raise StackError(
                    f"cluster {cluster.alias} at {self.bootstrap(cluster.alias)} is not managed by "
                    "the mirror stack and does not answer: start it first (`eos-pipeline stack up`)"
                )
        probe = ReplicationProbe(cfg)
        try:
            if pid := self._mirror._running_pid("mirrormaker"):
                self.say(f"mirrormaker already running (pid {pid}); checking replication")
                try:
                    wait_ready(
                        "mirrormaker replication",
                        probe,
                        pid,
                        self._mirror.log_path("mirrormaker"),
                        timeout=min(stalled_after, timeout),
                    )
                except StackError as exc:  # stalled or dead: a fresh MM2 resumes from its offsets
                    self.say(f"mirrormaker is not replicating ({_first_line(exc)}); restarting it")
                    self._mirror.down(STOP_GRACE_SECONDS)
                    self._start_mirror(probe, timeout)
            else:
                self._start_mirror(probe, timeout)
        finally:
            probe.close()
        a, b = cfg.aliases
        self.say(
            f"mirrormaker replicating {a}<->{b} ({a}: {self.bootstrap(a)}, {b}: "
            f"{self.bootstrap(b)}), ready in {time.monotonic() - started:.1f}s"
        )

    def restart_mirror(self, timeout: float = 120.0) -> None:
        """Stop MirrorMaker 2 and start it again, then prove both flows replicate. MM2 resumes
        from the offsets it committed, so nothing is skipped; with exactly-once source support
        nothing is written twice either."""
        self.say("stopping mirrormaker ...")
        self._mirror.down(STOP_GRACE_SECONDS)
        self.up(timeout)

    def _start_mirror(self, probe: ReplicationProbe, timeout: float) -> None:
        """Start MM2 and wait for ``probe``; first close what an MM2 that ran here before left
        open (even a graceful stop right after a broker restart left a transaction open)."""
        if (self._mirror._dir("mirrormaker") / "mm2.properties").exists():
            self.close_open_transactions()
        self._mirror.start(probe, timeout)

    def close_open_transactions(self) -> None:
        """Close what a stopped MM2 left open on both clusters (its ongoing transactions fenced,
        hanging ones on its topics aborted; see :file:`java/MirrorTransactions.java`).

        A transaction left open on an internal topic that MM2 reads ``read_committed`` kept a
        new MM2's herder at "Starting KafkaBasedLog" for good. Only while MM2 is stopped: the
        transactions fenced are MM2's own, and a running MM2 would lose its tasks to the fence.
        """
        if self._mirror._running_pid("mirrormaker"):
            raise StackError("close_open_transactions needs MirrorMaker 2 stopped")
        java = find_java()
        if not (Path(java).resolve().parent / "javac").exists():  # the source launcher compiles
            self.say(f"warning: {java} is not a JDK; MM2's open transactions were not checked")
            return
        cfg = self.config
        home = self._mirror._dir("mirrormaker")
        home.mkdir(parents=True, exist_ok=True)
        files = []
        for cluster in cfg.clusters:
            client = {"bootstrap.servers": self.bootstrap(cluster.alias)}
            if cluster.security is not None:
                client |= cluster.security.java_client()
            path = home / f"transactions-{cluster.alias}.properties"
            path.touch(mode=0o600)  # may hold the probe user's password
            path.write_text("".join(f"{k}={v}\n" for k, v in client.items()))
            files.append(path)
        aliases = "|".join(re.escape(a) for a in cfg.aliases)
        ids = f"(connect-cluster-)?({aliases})-mm2.*"  # each herder's group is <source>-mm2
        topics = f"(.*\\.internal|heartbeats|({aliases})\\..*)"  # MM2's topics and replicas
        started = time.monotonic()
        try:
            done = subprocess.run(
                [
                    java,
                    *self._mirror.config.jvm_options,
                    "-cp",
                    self._mirror._classpath("mirror"),
                    str(TRANSACTIONS_TOOL),
                    ids,
                    topics,
                    *map(str, files),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError("closing MirrorMaker 2's open transactions took over 120s") from exc
        finally:
            for path in files:
                path.unlink(missing_ok=True)
        for line in done.stdout.splitlines():
            self.say(line)
        if done.returncode != 0:
            raise StackError(
                f"closing MirrorMaker 2's open transactions failed:\n{done.stderr[-2000:]}"
            )
        self.say(f"open transactions checked in {time.monotonic() - started:.1f}s")

    def stop_mirror(self, timeout: float = STOP_GRACE_SECONDS) -> None:
        """Stop MM2 alone, leaving both clusters up (replication falls behind); ``up`` resumes."""
        self._mirror.down(timeout)

    def down(self, timeout: float = 30.0) -> None:
        """Stop MM2 first (it holds clients of both clusters; at most STOP_GRACE_SECONDS before
        its kill), then the managed brokers."""
        self._mirror.down(min(timeout, STOP_GRACE_SECONDS))
        for broker in self._brokers.values():
            broker.down(timeout)

    def processes(self) -> list[int]:
        """Pids of every process this stack runs now (for tests proving ``down`` left none)."""
        return [s.pid for s in self.status() if s.pid is not None and s.running]


__all__ = [
    "MIRROR_MAIN_CLASS",
    "PROBE_TOPIC",
    "MirrorCluster",
    "MirrorConfig",
    "MirrorStack",
    "ReplicationProbe",
    "mirror_config",
    "mm2_properties",
]
