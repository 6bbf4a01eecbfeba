"""The secured, replicated stack, brought up once per test session for every secured test.

Three KRaft brokers behind SASL_SSL (SCRAM-SHA-512) with ACLs, replication factor 3 and
``min.insync.replicas=2``, and a three-server ZooKeeper ensemble that refuses clients without
credentials (:mod:`eos_dev.stack.secure`). Tests reach it as the pipeline's principal, with
secrets passed the way a user passes them: ``{env: NAME}`` in the pipelines file.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from eos_dev.stack.processes import free_port, pid_alive
from eos_dev.stack.secure import SecureStack
from eos_dev.stack.secure_config import KEEPER_PIPELINE, PIPELINE, SecureStackConfig
from eos_dev.stack.secure_mirror import SecureMirror
from eos_pipeline.adapters.kafka import KafkaSettings, idempotent_producer, produce_all
from eos_pipeline.adapters.keeper import KeeperSettings
from eos_pipeline.components.assets import clickhouse_key, hudi_key
from eos_pipeline.components.config import Pipeline

#: Where the tests put the pipeline's secrets: read by the product through ``{env: NAME}``.
KAFKA_PASSWORD_ENV = "EOS_TEST_SECURE_KAFKA_PASSWORD"
KEEPER_PASSWORD_ENV = "EOS_TEST_SECURE_KEEPER_PASSWORD"
#: Spark's Java Kafka client takes its password inside ``sasl.jaas.config``: a secret as a whole.
KAFKA_JAAS_ENV = "EOS_TEST_SECURE_KAFKA_JAAS"


#: Package scope: the six JVMs stop when the last secured test has run, not at the end of the
#: worker's session (idle, each broker takes a tenth of a core or more from the tests after them).
@pytest.fixture(scope="package")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    config = SecureStackConfig.on_ports(
        tmp_path_factory.mktemp("secure"), [free_port() for _ in range(18)]
    )
    stack = SecureStack(config, say=lambda line: print(f"[secure] {line}"))
    started = time.monotonic()
    try:
        stack.up()
        print(f"[timing] secured stack up in {time.monotonic() - started:.1f}s")
        os.environ[KAFKA_PASSWORD_ENV] = config.password(PIPELINE)
        os.environ[KEEPER_PASSWORD_ENV] = config.password(f"keeper-{KEEPER_PIPELINE}")
        os.environ[KAFKA_JAAS_ENV] = config.java_client_config(PIPELINE)["sasl.jaas.config"]
        yield stack
    finally:
        pids = stack.processes()
        stack.down()
        os.environ.pop(KAFKA_PASSWORD_ENV, None)
        os.environ.pop(KEEPER_PASSWORD_ENV, None)
        os.environ.pop(KAFKA_JAAS_ENV, None)
        left = [pid for pid in pids if pid_alive(pid)]
        assert not left, f"secured stack down left processes {left}"


@dataclass
class Secured:
    """One test's names on the secured stack, and its clients."""

    stack: SecureStack
    topic: str
    dead_letter_topic: str
    pipeline: str

    @property
    def config(self) -> SecureStackConfig:
        return self.stack.config

    def kafka(self, password: str | None = None) -> KafkaSettings:
        """The pipeline principal's settings (its own password unless another is given)."""
        return KafkaSettings(
            self.config.kafka_bootstrap, self.config.client_config(PIPELINE, password)
        )

    def admin(self) -> KafkaSettings:
        return KafkaSettings(self.config.kafka_bootstrap, self.config.client_config("eos-admin"))

    def keeper(self, user: str = KEEPER_PIPELINE, password: str | None = None) -> KeeperSettings:
        secret = self.config.password(f"keeper-{KEEPER_PIPELINE}") if password is None else password
        return KeeperSettings(
            self.config.zookeeper_hosts, self.config.keeper_root, auth=(user, secret)
        )

    def create_topics(self, partitions: int, *names: str) -> None:
        admin = AdminClient(self.stack.admin_config())
        new = [NewTopic(n, partitions, self.config.replication_factor) for n in names]
        for future in admin.create_topics(new, operation_timeout=30).values():
            future.result()

    def produce(self, per_partition: dict[int, int], bad_every: int = 0) -> None:
        """Records with unique ids (as the admin: producers are other principals); every
        ``bad_every``-th does not decode."""
        records = []
        n = 0
        for partition, count in per_partition.items():
            for _ in range(count):
                n += 1
                value = (
                    b'{"id": "not a number"}'
                    if bad_every and n % bad_every == 0
                    else json.dumps({"id": n, "name": f"n{n}"}).encode()
                )
                records.append((partition, None, value))
        produce_all(idempotent_producer(self.admin()), self.topic, records)

    def pipelines_yaml(
        self,
        chdb_path: str,
        database: str,
        hudi_path: str | None = None,
        clusters: dict[str, str] | None = None,
    ) -> str:
        """The demo's pipelines file shape, secured: every secret is an ``{env: NAME}``.
        ``clusters``: alias -> bootstrap servers of a pipeline that can fail over (the same
        login and CA on each)."""
        cfg = self.config
        hudi = (
            f"    hudi: {{path: '{hudi_path}', table: {self.pipeline}_events}}\n"
            if hudi_path
            else ""
        )
        failover = (
            "      clusters: {"
            + ", ".join(f"{alias}: '{servers}'" for alias, servers in clusters.items())
            + "}\n"
            if clusters
            else ""
        )
        return f"""
keeper: {{hosts: '{cfg.zookeeper_hosts}', root: '{cfg.keeper_root}', username: {KEEPER_PIPELINE},
          password: {{env: {KEEPER_PASSWORD_ENV}}}}}
clickhouse: {{url: 'chdb://{chdb_path}'}}
spark: {{quick_start: true}}
sensor_interval_seconds: 1
pipelines:
  - name: {self.pipeline}
    kafka:
      bootstrap_servers: '{cfg.kafka_bootstrap}'
      topics: [{self.topic}]
{failover}      dead_letter_topic: {self.dead_letter_topic}
      client:
        security.protocol: SASL_SSL
        sasl.mechanisms: SCRAM-SHA-512
        sasl.username: {PIPELINE}
        sasl.password: {{env: {KAFKA_PASSWORD_ENV}}}
        ssl.ca.location: '{cfg.tls_dir / "ca.pem"}'
      spark_client:
        security.protocol: SASL_SSL
        sasl.mechanism: SCRAM-SHA-512
        sasl.jaas.config: {{env: {KAFKA_JAAS_ENV}}}
        ssl.truststore.type: PEM
        ssl.truststore.location: '{cfg.tls_dir / "ca.pem"}'
    schema: {{id: Int64, name: String}}
    batch: {{max_records: 1000}}
    clickhouse: {{database: {database}, table: events}}
{hudi}"""


def names(prefix: str) -> tuple[str, str, str]:
    """A fresh (topic, dead-letter topic, pipeline) under ``prefix`` (``eos.`` is readable)."""
    suffix = uuid.uuid4().hex[:8]
    return f"{prefix}t{suffix}", f"eos-dlq.t{suffix}", f"p_{suffix}"


@pytest.fixture(scope="package")
def secure_mirror(
    secure_stack: SecureStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureMirror]:
    """A second secured cluster (one broker) and MirrorMaker 2 both ways over SASL_SSL, beside
    the session's secured stack: started only for the tests that ask for it."""
    mirror = SecureMirror(
        secure_stack,
        [free_port() for _ in range(3)],
        free_port(),
        tmp_path_factory.mktemp("secure-failover"),
        say=lambda line: print(f"[secure-mirror] {line}"),
    )
    started = time.monotonic()
    try:
        mirror.up()
        print(f"[timing] secured mirror up in {time.monotonic() - started:.1f}s")
        yield mirror
    finally:
        pids = mirror.processes()
        mirror.down()
        left = [pid for pid in pids if pid_alive(pid)]
        assert not left, f"secured mirror down left processes {left}"


@pytest.fixture
def secured(secure_stack: SecureStack) -> Secured:
    topic, dlq, pipeline = names(secure_stack.config.topic_prefix)
    return Secured(secure_stack, topic, dlq, pipeline)


def materialize_clickhouse(
    defs: dg.Definitions, instance: dg.DagsterInstance, key: str, pipeline: Pipeline
) -> dg.ExecuteInProcessResult:
    """One run of ``pipeline``'s ClickHouse asset on partition ``key`` (failures returned)."""
    return dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=dg.AssetSelection.assets(clickhouse_key(pipeline)),
        partition_key=key,
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )


def materialize_hudi(
    defs: dg.Definitions, instance: dg.DagsterInstance, keys: list[str], pipeline: Pipeline
) -> dg.ExecuteInProcessResult:
    """One run of ``pipeline``'s Hudi asset over the partition range ``keys`` (one commit)."""
    return dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=dg.AssetSelection.assets(hudi_key(pipeline)),
        tags={
            "dagster/asset_partition_range_start": keys[0],
            "dagster/asset_partition_range_end": keys[-1],
        },
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )


def secrets_of(config: SecureStackConfig) -> list[str]:
    """Every secret of the secured stack: none may show in any output."""
    return [config.password(u) for u in ("eos-admin", "eos-pipeline", "eos-mirror")] + [
        config.password("keeper-eos-pipeline"),
        config.tls_dir.joinpath("keystore.password").read_text().strip(),
    ]


def outputs_of(*paths: Path) -> str:
    """Every file under ``paths`` as text (logs, run storage, configs): for the secret greps."""
    chunks = []
    for root in paths:
        for path in [root] if root.is_file() else root.rglob("*"):
            try:
                chunks.append(path.read_bytes().decode("utf-8", "replace"))
            except (IsADirectoryError, FileNotFoundError):
                continue  # a directory, or a file removed while walking
    return "\n".join(chunks)
