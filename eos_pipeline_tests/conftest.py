"""Session fixtures: one real local stack (ZooKeeper + Kafka), one in-process Spark session and
one Spark Connect server (launched at the start when a collected test uses it, waited for on
first use) for the whole test run.

The stack is started by the same code as ``eos-pipeline stack up``, on free ports and in a
temporary state directory, so tests never collide with a stack a developer has running.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import clickhouse_connect
import dagster as dg
import pytest
from clickhouse_connect.driver.client import Client
from dagster_pyspark import PySparkResource
from pyspark.sql import SparkSession

from eos_dev.stack.services import Stack, StackConfig, find_java, free_port
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.spark import spark_conf
from eos_pipeline_tests.mirror_fixtures import stop_mirror_stack
from eos_pipeline_tests.support.spark_server import SessionServer

#: Every JVM a test starts lives minutes: the quick JIT tier and the serial collector spend far
#: less CPU starting up on CI's two cores than C2 and G1 (set before any stack is configured;
#: child processes inherit it).
os.environ.setdefault("EOS_STACK_JVM_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# The two-cluster MirrorMaker 2 stack: started only by the failover tests that ask for it.
pytest_plugins = ["eos_pipeline_tests.mirror_fixtures"]


def _signals_as_in_a_terminal() -> None:
    """Give SIGINT and SIGTERM their default meaning if this run inherited them ignored.

    A run started in the background of a non-interactive shell (``cmd &`` in a script, as the
    test lock is used) starts with SIGINT ignored; Dagster then gives SIGTERM SIGINT's handler,
    so both are ignored, and every JVM the tests launch inherits that: each ``stack down``
    waited its full 30 s grace per service for a SIGTERM the JVM never saw, then killed it
    (60 s for the session stack, 90 s for the mirror stack, 30 s for the registry).
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


_signals_as_in_a_terminal()


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackConfig]:
    config = StackConfig(
        state_dir=tmp_path_factory.mktemp("stack"),
        zookeeper_port=free_port(),
        kafka_port=free_port(),
        controller_port=free_port(),
    )
    stack = Stack(config, say=lambda line: print(f"[stack] {line}"))
    stack.up()
    try:
        yield config
    finally:
        stack.down()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a real schema registry (the stack's Apicurio, Confluent-compatible API),
    started by the same code as ``eos-pipeline stack up`` on a free port."""
    config = StackConfig(
        state_dir=tmp_path_factory.mktemp("registry"), registry=True, registry_port=free_port()
    )
    stack = Stack(config, say=lambda line: print(f"[registry] {line}"))
    stack._start_registry(find_java())
    try:
        yield config.registry_url
    finally:
        stack.down()


@pytest.fixture(scope="session")
def kafka_settings(local_stack: StackConfig) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=local_stack.kafka_bootstrap)


@pytest.fixture(scope="session")
def zookeeper_hosts(local_stack: StackConfig) -> str:
    return local_stack.zookeeper_hosts


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test (Kafka allows [A-Za-z0-9._-])."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")
    return f"t-{name}"[:200]


@pytest.fixture(scope="session")
def chdb_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The data path of the session's one chDB engine (see :func:`chdb_client`)."""
    return str(tmp_path_factory.mktemp("chdb"))


@pytest.fixture(scope="session")
def chdb_client(chdb_path: str) -> Iterator[Client]:
    """One embedded ClickHouse engine (chDB) for the whole session.

    chDB allows one data path per process: while a client is open, a client on another path
    fails. Every test shares this engine and isolates itself with its own database.
    """
    client = clickhouse_connect.get_client(interface="chdb", path=chdb_path)
    yield client
    client.close()


@pytest.fixture(scope="session", autouse=True)
def _spark_connect_launch(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SessionServer | None]:
    """Launch the session's Connect server at the start when a collected test will use it:
    its JVM boots while the tests before that one run (see ``support.spark_server``)."""
    if not any("spark_connect" in getattr(i, "fixturenames", ()) for i in request.session.items):
        yield None
        return
    server = SessionServer(tmp_path_factory.mktemp("spark-connect"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark_connect(_spark_connect_launch: SessionServer | None, spark: SparkSession) -> StackConfig:
    """The session's one Spark Connect server, ready (see ``support.spark_server``).

    Depends on ``spark`` so that the in-process JVM is forked before any gRPC channel opens.
    """
    assert _spark_connect_launch is not None, "spark_connect was not collected as used"
    return _spark_connect_launch.ready()


@pytest.fixture(scope="session")
def spark_config() -> dict[str, str]:
    return spark_conf("local[2]", quick_start=True)


@pytest.fixture(scope="session")
def spark(spark_config: dict[str, str]) -> Iterator[SparkSession]:
    """The one Spark session of the test run, built through the Dagster resource."""
    started = time.monotonic()
    with dg.build_resources({"pyspark": PySparkResource(spark_config=spark_config)}) as res:
        session: SparkSession = res.pyspark.spark_session
        session.sparkContext.setLogLevel("ERROR")
        print(f"[timing] spark session created in {time.monotonic() - started:.1f}s")
        try:
            yield session
        finally:
            session.stop()


#: Groups that take minutes (measured in CI), started first under xdist so that no worker is
#: left with one of them at the end while the other idles.
_LONGEST_FIRST = (
    # seconds from the per-group summary of the full run of 2026-11-27 (2 workers)
    "mirror-stack",  # 288 s
    "eos_pipeline_tests/faults/test_dagster_kills.py",  # 189 s
    "eos_pipeline_tests/test_demo.py",  # 201 s then; ~30 s less since (the UI walk)
    "eos_pipeline_tests/test_ui_faults.py",  # 166 s
    "secured-stack",  # 151 s: with its failover peer and MM2
    "eos_pipeline_tests/faults/test_hudi_faults.py",  # 119 s
    "eos_pipeline_tests/faults/test_chaos.py",  # 118 s
    "eos_pipeline_tests/sinks/test_hudi_sink.py",  # 83 s
    "eos_pipeline_tests/faults/test_connect_faults.py",  # 81 s
    "eos_pipeline_tests/faults/test_schema_evolution_kills.py",  # 70 s (3 Spark children)
    "eos_pipeline_tests/defs/test_hudi_asset.py",  # 58 s
    "eos_pipeline_tests/faults/test_infrastructure.py",  # 57 s
    "eos_pipeline_tests/adapters/test_spark_connect_hudi.py",  # under 57 s
    "eos_pipeline_tests/adapters/test_hudi_metadata_table.py",  # under 57 s
    # defs/test_named_faults.py (135 s) left the list: 1 s timeouts against its stopped
    # endpoints made it ~25 s
)
_ROOT = Path(__file__).resolve().parent.parent
_MIRROR_FIXTURES = re.compile(r"\b(?:mirror_stack|cluster_settings)\b")


@functools.cache
def _uses_mirror_stack(path: str) -> bool:
    try:
        return bool(_MIRROR_FIXTURES.search((_ROOT / path).read_text()))
    except OSError:
        return False


def xdist_group(nodeid: str) -> str:
    """The unit ``make test`` sends to one pytest-xdist worker: a test file, or one group of
    every file that uses the two-cluster MirrorMaker 2 stack (three JVMs: started once per run,
    not once per worker)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("eos_pipeline_tests/secured/"):
        return "secured-stack"  # six JVMs, started once per run (secured/conftest.py)
    return "mirror-stack" if _uses_mirror_stack(path) else path


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups of :func:`xdist_group`. (xdist's own ``xdist_group``
    marks do not work under pytest 9, which no longer lets xdist rename a test's node id.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class _Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return _Groups(config, log)


#: Last in their group: a stop of cluster A's broker under a running MM2 twice left MM2's B->A
#: flow unable to start again, and every later test of the two-cluster group failed with it. The
#: cause, a transaction left open on its offsets topic, is closed before each MM2 start now
#: (stack/test_mirror_restart.py); the test stays last, the roughest one of the group.
_LAST_IN_GROUP = ("eos_pipeline_tests/defs/test_failover_outage.py",)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Under xdist a group runs whole on one worker: once the mirror group's last test there is
    done, its stack stops (without xdist, later files may still use it: it stays up)."""
    if nextitem is None or not hasattr(item.config, "workerinput"):
        return
    if xdist_group(item.nodeid) == "mirror-stack" != xdist_group(nextitem.nodeid):
        stop_mirror_stack()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist the longest groups go first (each worker reports this order and the
    scheduler hands groups out in it); without xdist the order is pytest's."""
    if getattr(config.option, "dist", "no") == "no" and not hasattr(config, "workerinput"):
        return
    rank = {group: i for i, group in enumerate(_LONGEST_FIRST)}
    items.sort(
        key=lambda item: (
            rank.get(xdist_group(item.nodeid), len(rank)),
            item.nodeid.startswith(_LAST_IN_GROUP),
        )
    )


#: Seconds per xdist group (setup + call + teardown of its tests) and per worker, gathered on
#: the controller: CI prints them so the grouping and ``_LONGEST_FIRST`` can follow the numbers.
_GROUP_SECONDS: dict[str, float] = {}
_WORKER_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    worker = getattr(getattr(report, "node", None), "gateway", None)
    if worker is None:
        return  # not the xdist controller
    group = xdist_group(report.nodeid)
    _GROUP_SECONDS[group] = _GROUP_SECONDS.get(group, 0.0) + report.duration
    _WORKER_SECONDS[worker.id] = _WORKER_SECONDS.get(worker.id, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _GROUP_SECONDS:
        return
    terminalreporter.section("seconds per worker and per xdist group (longest 15)")
    for worker, seconds in sorted(_WORKER_SECONDS.items()):
        terminalreporter.write_line(f"{seconds:8.1f}s  worker {worker}")
    longest = sorted(_GROUP_SECONDS.items(), key=lambda kv: -kv[1])[:15]
    for group, seconds in longest:
        terminalreporter.write_line(f"{seconds:8.1f}s  {group}")
