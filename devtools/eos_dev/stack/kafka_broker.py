"""The stack's Kafka broker: one KRaft node (broker and controller), its storage and readiness.

Everything a single-node broker needs to start from nothing: ``server.properties`` with
replication factors of 1, a formatted log directory (Kafka's ``StorageTool`` with a fresh
cluster id), and a readiness probe that asks the broker for metadata as clients will.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from eos_dev.stack.config import StackConfig, StackError
from eos_dev.stack.processes import wait_ready

if TYPE_CHECKING:
    from eos_dev.stack.services import Stack


def kafka_ready(bootstrap: str, client_config: Mapping[str, str] | None = None) -> bool:
    """True once the broker answers a metadata request and lists itself (``client_config``:
    how to log in to a secured cluster)."""
    from confluent_kafka.admin import AdminClient

    # log_level 0: refused connections while the broker boots are expected, not worth a line each.
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0}
        | dict(client_config or {})
    )
    try:
        meta = admin.list_topics(timeout=2.0)
    except Exception:
        return False
    return bool(meta.brokers)


def kafka_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid form).

    Like Kafka's own ``Uuid.randomUuid``, ids starting with ``-`` are drawn again: the storage
    tool's command line would read one as an option and refuse to format (1 start in 64).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def server_properties(cfg: StackConfig, data: Path) -> str:
    """``server.properties`` of a single combined broker/controller logging to ``data``."""
    return "\n".join(
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


def start_kafka(stack: Stack, java: str) -> None:
    """Start the broker (formatting its storage the first time) and wait until it answers."""
    cfg = stack.config
    if pid := stack._running_pid("kafka"):
        if not kafka_ready(cfg.kafka_bootstrap):
            raise StackError(
                f"kafka (pid {pid}) is running but does not answer on {cfg.kafka_bootstrap}; "
                f"see {stack.log_path('kafka')} or run `stack down`."
            )
        stack.say(f"kafka already running (pid {pid}) at {cfg.kafka_bootstrap}")
        return
    stack._check_ports(
        "kafka",
        {"--kafka-port": cfg.kafka_port, "--controller-port": cfg.controller_port},
    )
    home = stack._dir("kafka")
    data = home / "data"
    data.mkdir(parents=True, exist_ok=True)
    props = home / "server.properties"
    props.write_text(server_properties(cfg, data))
    classpath = stack._classpath("kafka")
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
                kafka_cluster_id(),
                "-c",
                str(props),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if fmt.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{fmt.stdout}{fmt.stderr}")
    pid = stack._launch(
        "kafka",
        java,
        ["-cp", classpath, "kafka.Kafka", str(props)],
        cfg.kafka_heap,
    )
    stack.say(f"starting kafka (pid {pid}) ...")
    wait_ready("kafka", lambda: kafka_ready(cfg.kafka_bootstrap), pid, stack.log_path("kafka"))
    stack.say(f"kafka ready at {cfg.kafka_bootstrap}")
