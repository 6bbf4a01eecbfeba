"""Dagster resources: Kafka (one per pipeline), the keeper, ClickHouse and Spark.

Resources hold settings only; connections are opened inside a run, by the code that uses them:
the code server and the sensor daemon must never open a chDB path (one process per path) nor
start a JVM. Secrets (``{env: NAME}``) become ``dg.EnvVar`` (resolved in the run's process, shown
by name only); Kafka client settings keep the variable's name and read it when the client is built.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from eos_pipeline.adapters.clickhouse import ClickHouseSink, parse_url
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.components.config import (
    EnvRef,
    Pipeline,
    Secret,
    Settings,
)


class MissingSecretError(RuntimeError):
    """A setting refers to an environment variable that is not set in this process."""


def _with_secrets(plain: dict[str, str], secrets: dict[str, str], what: str) -> dict[str, Any]:
    """``plain`` and each of ``secrets`` (setting -> environment variable) read now."""
    out: dict[str, Any] = dict(plain)
    for key, name in secrets.items():
        out[key] = os.environ.get(name)
        if not out[key]:
            raise MissingSecretError(
                f"{what} {key!r} comes from environment variable {name}, which is unset"
            )
    return out


class KafkaResource(dg.ConfigurableResource):
    """The Kafka cluster one pipeline reads (its topic and dead-letter topic): the ClickHouse
    sink reads it with confluent-kafka, the Hudi sink with Spark's Kafka source, the sensors
    and checks ask it for end offsets and records. Secrets are named by environment variable."""

    bootstrap_servers: str = Field(description="Kafka bootstrap servers, host:port[,host:port]")
    client_config: dict[str, str] = Field(
        default_factory=dict,
        description="librdkafka client settings (security.protocol, sasl.mechanisms, ...)",
    )
    client_secrets: dict[str, str] = Field(
        default_factory=dict,
        description="librdkafka setting -> environment variable holding its secret value",
    )
    spark_options: dict[str, str] = Field(
        default_factory=dict,
        description="Java client properties for Spark's Kafka source (kafka.* options)",
    )
    spark_secrets: dict[str, str] = Field(
        default_factory=dict,
        description="Spark Kafka option -> environment variable holding its secret value",
    )
    request_timeout_s: float = Field(
        default=10.0, description="seconds a metadata or offsets request waits for an answer"
    )

    def settings(self) -> KafkaSettings:
        config = _with_secrets(self.client_config, self.client_secrets, "Kafka client setting")
        return KafkaSettings(self.bootstrap_servers, config, self.request_timeout_s)

    def spark_kafka_options(self) -> dict[str, str]:
        return _with_secrets(self.spark_options, self.spark_secrets, "Spark Kafka option")


def _split(values: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Plain settings as strings (librdkafka takes only strings; YAML may have parsed true/1 as
    bool/int), and the secrets' variable names."""
    plain = {
        k: str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in values.items()
        if not isinstance(v, EnvRef)
    }
    return plain, {k: v.env for k, v in values.items() if isinstance(v, EnvRef)}


class KeeperResource(dg.ConfigurableResource):
    """ZooKeeper or ClickHouse Keeper: the ClickHouse sink's position per topic-partition
    (BEFORE/AFTER range, fencing epoch), replay journals and the failover state. Runs, sensors
    and checks read it; only runs write it, each write a compare-and-set."""

    hosts: str = Field(
        default="127.0.0.1:2181", description="connection string, host:port[,host:port][/chroot]"
    )
    root: str = Field(default="/eos_pipeline", description="znode under which all state lives")
    username: str | None = Field(default=None, description="digest auth user (optional)")
    password: str | None = Field(default=None, description="digest auth password (optional)")
    connect_timeout_s: float = Field(
        default=10.0, description="seconds to wait for a connection before it is unreachable"
    )

    def settings(self) -> KeeperSettings:
        auth = (self.username, self.password) if self.username and self.password else None
        return KeeperSettings(
            hosts=self.hosts, root=self.root, auth=auth, connect_timeout_s=self.connect_timeout_s
        )

    def store(self) -> KeeperStateStore:
        """A keeper session, opened by ``with``."""
        return KeeperStateStore(self.settings())


class ClickHouseResource(dg.ConfigurableResource):
    """The ClickHouse the ClickHouse tables live in: ``chdb:///path`` (the real engine embedded
    in the run's process; one process per path, so runs on it are serialized by the ``chdb``
    pool) or a server, ``http(s)://user:password@host:port/db``. Opened only inside runs."""

    url: str = Field(
        default="chdb://.state/demo/chdb",
        description="chdb:///path (embedded) or http(s)://user:password@host:port/database",
    )

    @contextmanager
    def sink(self) -> Iterator[ClickHouseSink]:
        sink = ClickHouseSink.connect(self.url)
        try:
            yield sink
        finally:
            sink.close()


class SparkResource(dg.ConfigurableResource):
    """Spark for the Hudi asset and its check, made on first use (loading the code location
    never fetches jars nor starts a JVM): a Spark Connect client of ``remote``, or a ``master``
    session in this process (PySpark allows one of the two modes per process)."""

    remote: str | None = Field(
        default=None, description="Spark Connect URL sc://host:port (None: Spark in-process)"
    )
    token: str | None = Field(default=None, description="Spark Connect bearer token (optional)")
    master: str = Field(
        default="local[2]", description="master of an in-process session (without remote)"
    )
    quick_start: bool = Field(
        default=False, description="small-machine settings for an in-process session"
    )
    spark_config: dict[str, str] = Field(
        default_factory=dict,
        description="Spark settings (runtime SQL settings only, over Spark Connect)",
    )
    _session: Any = PrivateAttr(default=None)

    @property
    def spark_session(self) -> Any:
        """The run's Spark session, made on first use (dagster-pyspark's name for it).

        Over Spark Connect every run with the same settings joins one server session: a Connect
        3.5 server keeps a Python worker daemon per session (~55 MB) until it stops. Runs that
        share it never meet: cached rows sit under random view names, and every Hudi write
        carries its own options."""
        if self._session is None:
            self._session = self._remote_session() if self.remote else self._local_session()
        return self._session

    def _remote_session(self) -> Any:
        from eos_pipeline.adapters.spark_remote import connect, stable_session_id

        assert self.remote
        # settings are per session: runs with other settings must not join it
        session = connect(
            self.remote,
            self.token,
            session_id=stable_session_id(str(sorted(self.spark_config.items()))),
        )
        for key, value in self.spark_config.items():
            session.conf.set(key, value)
        return session

    def _local_session(self) -> Any:
        from dagster_pyspark import LazyPySparkResource

        from eos_pipeline.adapters.spark import spark_conf
        from eos_pipeline.adapters.spark_remote import SparkModeConflict, in_connect_mode

        if in_connect_mode():
            raise SparkModeConflict(
                "this process is a Spark Connect client; an in-process Spark session cannot "
                "start next to it (PySpark allows one mode per process)"
            )
        # dagster-pyspark's resource makes the session; the settings (jars, Hudi) resolve now
        conf = spark_conf(self.master, self.spark_config, quick_start=self.quick_start)
        return LazyPySparkResource(spark_config=conf).spark_session

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        # A Connect session holds state on the server until released; an in-process session
        # is left to its JVM's owner (a shared test session, or the process's exit).
        if self._session is not None and self.remote:
            self._session.stop()
            self._session = None


def _secret(value: Secret | None) -> Any:
    if isinstance(value, EnvRef):
        return dg.EnvVar(value.env)
    return value


def chdb_path(url: str) -> str | None:
    """The data path of an embedded chDB URL (runs on one path must be serialized), else None."""
    try:
        target = parse_url(url)
    except Exception:
        return None
    return target.path if target.embedded else None


def shared_resources(settings: Settings) -> dict[str, Any]:
    """The resources every pipeline shares: keeper, ClickHouse server, Spark."""
    return {
        "keeper": KeeperResource(
            **settings.keeper.model_dump(exclude={"password"}),
            password=_secret(settings.keeper.password),
        ),
        "clickhouse": ClickHouseResource(url=_secret(settings.clickhouse.url)),
        "spark": SparkResource(
            remote=_secret(settings.spark.remote),
            token=_secret(settings.spark.token),
            spark_config=dict(settings.spark.conf),
            master=settings.spark.master,
            quick_start=settings.spark.quick_start,
        ),
    }


def pipeline_resources(pipeline: Pipeline) -> KafkaResource:
    """``pipeline``'s Kafka cluster, keyed :func:`kafka_resource_key`."""
    source = pipeline.kafka
    client, client_secrets = _split(source.client)
    spark, spark_secrets = _split(source.spark_client)
    return KafkaResource(
        bootstrap_servers=source.bootstrap_servers,
        client_config=client,
        client_secrets=client_secrets,
        spark_options=spark,
        spark_secrets=spark_secrets,
        request_timeout_s=source.request_timeout_s,
    )


def kafka_resource_key(pipeline: str) -> str:
    """The resource key of ``pipeline``'s Kafka cluster (``kafka_<name>``), built only here."""
    return f"kafka_{pipeline}"


def kafka_resource(context: Any, pipeline: str) -> KafkaResource:
    """``pipeline``'s Kafka resource from any context. Not a typed resource parameter: its key
    depends on the pipeline, and Dagster refuses a definition naming resources both in
    ``required_resource_keys`` and as parameters."""
    return getattr(context.resources, kafka_resource_key(pipeline))
