"""The stack's long-lived Spark: a Spark Connect server, optionally on a standalone cluster.

Why a server: a Spark JVM started per Dagster run pays the session start and a cold first write
(~20 s here) before any work. One server started by ``stack up`` stays warm, and runs talk to
it over ``sc://`` as thin clients. With ``spark_workers`` > 0 the server is the driver of a real
standalone cluster (a master and N workers on this machine), which shows the product's jobs run
on a distributed engine and not only inside one JVM.

The JVMs are launched through PySpark's own scripts (:mod:`eos_dev.stack.spark_cluster`,
which also starts the standalone master and workers). The Connect server is ready when a query
sent from an ``sc://`` client has run a Spark job and returned the right answer, not when a port
opens.

The server carries the same jars and Hudi settings as an in-process session (the Hudi bundle,
Spark's Kafka connector, the checkpoint fencing strategy; Hudi's SQL extension, catalog and Kryo
registrator), plus the Connect plugin pinned in ``jvm_artifacts.json``. Spark 3.5's Connect
plugin has no bind-address setting, so its gRPC port listens on every interface: the stack's
``LoopbackOnlyInterceptor`` (:mod:`eos_dev.stack.connect_auth`) then refuses every peer that is
not loopback, unless ``spark_connect_remote``. The driver, its block manager and the standalone
daemons are bound to the stack's host (loopback by default).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from eos_dev.stack.config import StackConfig, StackError
from eos_dev.stack.connect_auth import JAR_STEM, LOOPBACK_INTERCEPTOR_CLASS, interceptor_jar
from eos_dev.stack.processes import log_tail, wait_ready
from eos_dev.stack.spark_cluster import (
    MASTER,
    WORKER_PREFIX,
    launch,
    port_open,
    spark_env,
    spark_home,
    spark_master,
    start_master,
    start_worker,
    worker_names,
)
from eos_pipeline.adapters.jvm_artifacts import default_cache_dir, ensure_bundle

if TYPE_CHECKING:
    from eos_dev.stack.services import Stack

CONNECT_BUNDLE = "spark-connect"
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
CONNECT = "spark-connect"

#: Answer of the readiness query: a real Spark job of two tasks (executors must run them).
_PROBE_SQL = "SELECT count(*) AS n FROM range(0, 1000, 1, 2)"
_PROBE_ANSWER = 1000

# ------------------------------------------------------------------------------- naming


def spark_services(stack: Stack) -> list[str]:
    """Spark's services in start order: those the config asks for, and any left running.

    Services found through a pid file are kept so that ``down`` and ``status`` still cover a
    server or cluster started with other settings (say ``--spark-workers 2``, then plain down).
    """
    cfg = stack.config
    on_disk = {
        path.parent.name
        for pattern in (f"{WORKER_PREFIX}*/pid", f"{MASTER}/pid", f"{CONNECT}/pid")
        for path in cfg.state_dir.glob(pattern)
    }
    wanted = set(on_disk)
    if cfg.spark:
        wanted.add(CONNECT)
        if cfg.spark_workers > 0:
            wanted.update([MASTER, *worker_names(cfg.spark_workers)])
    workers = sorted(
        (n for n in wanted if n.startswith(WORKER_PREFIX)),
        key=lambda n: int(n.removeprefix(WORKER_PREFIX) or 0),
    )
    return [n for n in (MASTER, *workers, CONNECT) if n in wanted]


def spark_endpoint(config: StackConfig, name: str) -> str:
    if name == CONNECT:
        return config.spark_connect_url
    if name == MASTER:
        return config.spark_master_url
    return f"-> {config.spark_master_url}"


# ------------------------------------------------------------------------------- probes


def _host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url.replace("sc://", "http://", 1))
    return parsed.hostname or "127.0.0.1", parsed.port or 15002


def connect_ready(url: str, errors: list[str] | None = None) -> bool:
    """True once the server at ``url`` answers a query that runs a Spark job.

    Talks through PySpark's low-level Connect client, not ``SparkSession.builder.remote``:
    the builder switches the whole process into Connect mode (an environment variable every
    ``pyspark.sql.functions`` call checks) and refuses to start next to a classic session, and
    ``stack up`` may run inside a process that has one (the test session). Why a probe failed
    once the port is open is appended to ``errors``.
    """
    host, port = _host_port(url)
    if not port_open(host, port):
        return False
    from pyspark.sql.connect.client import SparkConnectClient
    from pyspark.sql.connect.plan import SQL

    client = SparkConnectClient(url, retry_policy={"max_retries": 0})
    try:
        table, _ = client.to_table(SQL(_PROBE_SQL).to_proto(client))
        answer = table.column(0).to_pylist()
        if answer != [_PROBE_ANSWER]:
            raise RuntimeError(f"{_PROBE_SQL!r} returned {answer}, not [{_PROBE_ANSWER}]")
        return True
    except Exception as exc:
        if errors is not None:
            errors.append(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
        return False
    finally:
        client.close()


def server_version(url: str) -> str:
    """The Spark version of the server at ``url`` (one AnalyzePlan call)."""
    from pyspark.sql.connect.client import SparkConnectClient

    client = SparkConnectClient(url, retry_policy={"max_retries": 0})
    try:
        return str(client._analyze(method="spark_version").spark_version)
    finally:
        client.close()


# ------------------------------------------------------------------------------- commands


def server_jars(
    cache_dir: Path | None = None, progress: Callable[[str], None] | None = None
) -> list[Path]:
    """The Connect plugin, the Hudi bundle, Spark's Kafka connector and the fencing strategy."""
    from eos_pipeline.adapters.spark import fencing_jar

    cache = cache_dir or default_cache_dir()
    jars = [
        *ensure_bundle(CONNECT_BUNDLE, cache, progress),
        *ensure_bundle("hudi", cache, progress),
        *ensure_bundle("spark-kafka", cache, progress),
    ]
    hudi = [j for j in jars if "hudi-spark" in j.name]
    return jars + [fencing_jar(h, cache) for h in hudi[:1]]


def server_conf(config: StackConfig, log_dir: Path) -> dict[str, str]:
    """Spark settings of the Connect server: Hudi's, loopback, and small-batch sizing."""
    from eos_pipeline.adapters.spark import HUDI_SPARK_CONF, PYTHON_WORKER_CONF
    from eos_pipeline.adapters.spark_cds import java_options as cds_options

    java_options = " ".join(
        ["-Djdk.attach.allowAttachSelf=true", "-Djol.skipHotspotSAAttach=true", *config.jvm_options]
    )
    # The driver's class path is Spark's own, as in the archive; executors' may differ.
    driver_options = " ".join([java_options, *cds_options()])
    width = str(config.spark_cores * max(config.spark_workers, 1))
    conf = {
        "spark.app.name": "eos_pipeline Spark Connect",
        "spark.connect.grpc.binding.port": str(config.spark_connect_port),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.host": config.host,
        "spark.driver.bindAddress": config.host,
        "spark.driver.extraJavaOptions": driver_options,
        "spark.executor.extraJavaOptions": java_options,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Spark's default of 200 tasks per shuffle costs seconds on small incremental batches.
        "spark.sql.shuffle.partitions": width,
        "spark.default.parallelism": width,
        # Scratch space (shuffle, spills) inside the state dir, removed with it.
        "spark.local.dir": str(log_dir / "tmp"),
        **HUDI_SPARK_CONF,
        **PYTHON_WORKER_CONF,
    }
    if config.spark_workers > 0:
        conf.update(
            {
                "spark.executor.memory": config.spark_memory,
                "spark.executor.cores": str(config.spark_cores),
            }
        )
    return conf


def connect_command(
    config: StackConfig, jars: list[Path], home: Path, interceptors: Sequence[str] = ()
) -> list[str]:
    """``spark-submit`` of the Connect server (the class alone: no application jar needed).

    With the stack's interceptor jar among ``jars``, the server serves loopback peers only
    (unless ``config.spark_connect_remote``); ``interceptors`` (classes of that jar, such as the
    bearer-token check) are loaded too."""
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        spark_master(config),
        "--driver-memory",
        config.spark_memory,
        "--jars",
        ",".join(str(j) for j in jars),
        "--class",
        CONNECT_SERVER_CLASS,
        "--name",
        "eos_pipeline Spark Connect",
    ]
    from eos_pipeline.adapters.spark import FENCING_JAR_STEM, HUDI_CLASS_INIT_PLUGIN

    conf = server_conf(config, home)
    if any(FENCING_JAR_STEM in j.name for j in jars):  # the plugin ships in the fencing jar
        conf["spark.plugins"] = HUDI_CLASS_INIT_PLUGIN
    classes = list(interceptors)
    if any(j.name.startswith(JAR_STEM) for j in jars) and not config.spark_connect_remote:
        classes.insert(0, LOOPBACK_INTERCEPTOR_CLASS)
    if classes:
        conf["spark.connect.grpc.interceptor.classes"] = ",".join(classes)
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return command


# ------------------------------------------------------------------------------- start


def start_spark(stack: Stack, java: str | None = None) -> None:
    """Start (or check) the standalone cluster if asked for, then the Connect server."""
    launch_spark(stack, java)()


def launch_spark(stack: Stack, java: str | None = None) -> Callable[[], None]:
    """Start the Spark services, but return before the Connect server is ready: the returned
    function waits for it (and must be called).

    The server's JVM is the slowest start of the stack (15-25 s here, mostly loading classes
    and the Hudi bundle) and needs nothing else of the stack to boot, so ``stack up`` launches
    it first and lets it boot while ZooKeeper and Kafka start. A standalone master and its
    workers are started and waited for here: the server registers with them as it boots.
    """
    del java  # PySpark's scripts find Java themselves (JAVA_HOME, else java on PATH)
    cfg = stack.config
    if cfg.spark_workers > 0:
        start_master(stack)
        for name in worker_names(cfg.spark_workers):
            start_worker(stack, name)
    return _launch_connect(stack)


def _launch_connect(stack: Stack) -> Callable[[], None]:
    """Launch the Connect server (or check a running one); return the wait for its readiness."""
    cfg = stack.config
    url = cfg.spark_connect_url
    if pid := stack._running_pid(CONNECT):
        if not connect_ready(url):
            raise StackError(
                f"{CONNECT} (pid {pid}) is running but does not answer a query on {url}; see "
                f"{stack.log_path(CONNECT)} or run `eos-pipeline stack down`."
            )
        stack.say(f"{CONNECT} already running (pid {pid}) at {url}")
        return lambda: None
    stack._check_ports(CONNECT, {"--spark-connect-port": cfg.spark_connect_port})
    home = stack._dir(CONNECT)
    home.mkdir(parents=True, exist_ok=True)
    jars = server_jars(cfg.cache_dir, stack.say)
    if not any("eos-hudi-fencing" in j.name for j in jars):
        stack.say(f"warning: {CONNECT} starts without the Hudi checkpoint fence (no javac)")
    if not cfg.spark_connect_remote:
        try:
            jars.append(interceptor_jar(cfg.cache_dir))
        except StackError as exc:
            stack.say(f"warning: {CONNECT} serves every interface ({exc})")
    began = time.monotonic()
    pid = launch(stack, CONNECT, connect_command(cfg, jars, home), spark_env(cfg))
    stack.say(f"starting {CONNECT} (pid {pid}, Spark on {spark_master(cfg)}) ...")

    def wait() -> None:
        log = stack.log_path(CONNECT)
        errors: list[str] = []
        try:
            wait_ready(CONNECT, lambda: connect_ready(url, errors), pid, log, timeout=300)
        except StackError as exc:
            if errors:
                raise StackError(f"{exc}\nLast answer of the probe query: {errors[-1]}") from None
            raise
        except Exception as exc:  # a client-side failure: say where the server's log is
            raise StackError(f"{CONNECT}: readiness probe failed: {exc}\n{log_tail(log)}") from exc
        stack.say(f"{CONNECT} ready at {url} in {time.monotonic() - began:.1f}s")

    return wait


__all__ = [
    "CONNECT",
    "CONNECT_SERVER_CLASS",
    "MASTER",
    "WORKER_PREFIX",
    "connect_command",
    "connect_ready",
    "launch_spark",
    "server_conf",
    "server_jars",
    "server_version",
    "spark_endpoint",
    "spark_home",
    "spark_master",
    "spark_services",
    "start_spark",
    "worker_names",
]
