"""The two-cluster MirrorMaker 2 stack, started once per session for the tests that ask for it.

Only failover tests request ``mirror_stack``; every other test keeps the single-cluster session
stack of ``conftest.py``. Like that one, it runs on free ports in a temporary state directory, and
its teardown checks that ``down`` left no process behind.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from eos_dev.stack.mirror import MirrorStack, ReplicationProbe, mirror_config
from eos_dev.stack.services import free_port, pid_alive
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.failover import FailoverPipeline, read_window
from eos_pipeline.adapters.kafka import (
    KafkaReadError,
    KafkaSettings,
    create_topic,
    idempotent_producer,
)
from eos_pipeline.core.failover import ClusterSet, MirroredRecord, Window
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.sinks.clickhouse import ClickHouseTableSpec

#: The session's mirror stack once started: :func:`stop_mirror_stack` stops it early.
_STARTED: list[MirrorStack] = []


@pytest.fixture(scope="session")
def mirror_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MirrorStack]:
    config = mirror_config(
        tmp_path_factory.mktemp("mirror"),
        [(free_port(), free_port()), (free_port(), free_port())],
        rest_port=free_port(),
    )
    stack = MirrorStack(config, say=lambda line: print(f"[mirror] {line}"))
    started = time.monotonic()
    try:
        _STARTED.append(stack)
        stack.up()
        print(f"[timing] mirror stack up in {time.monotonic() - started:.1f}s")
        yield stack
    finally:
        pids = stack.processes()
        # SIGKILL at once: the clusters' data dies with the session, and a graceful stop of MM2
        # and both brokers cost ~5 s of every run (after the outage test, up to MM2's 8 s grace).
        stack.down(timeout=0.0)
        left = [pid for pid in pids if pid_alive(pid)]
        assert not left, f"mirror stack down left processes {left}"
        _STARTED.clear()


def stop_mirror_stack() -> None:
    """SIGKILL the session's mirror stack before the session ends (its group is done): its three
    JVMs otherwise idle on, slowing every test after them. The fixture's teardown then finds
    nothing running."""
    for stack in _STARTED:
        stack.down(timeout=0.0)


@pytest.fixture(scope="session")
def cluster_settings(mirror_stack: MirrorStack) -> dict[str, KafkaSettings]:
    """Client settings per cluster alias of the mirror stack."""
    return {
        alias: KafkaSettings(mirror_stack.bootstrap(alias)) for alias in mirror_stack.config.aliases
    }


# --------------------------------------------------------------------------------------- helpers


@contextmanager
def mirror_paused(stack: MirrorStack) -> Iterator[None]:
    """MM2 frozen (SIGSTOP to its process group): replication falls behind until the block ends.

    A cheaper stand-in for ``stop_mirror()`` + ``up()`` when MM2 only has to be behind: resuming
    takes seconds, where a restart and its readiness probe take most of a minute on a busy runner.
    """
    [pid] = [s.pid for s in stack.status() if s.name == "mirrormaker" and s.running and s.pid]
    os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(pid, signal.SIGCONT)
        _replicating_again(stack)


def produce_events(
    settings: KafkaSettings,
    topic: str,
    partitions: int,
    count: int,
    *,
    prefix: str,
    batch: int = 25,
    pause: float = 0.02,
) -> dict[int, list[tuple[int, str]]]:
    """Produce ``count`` events round-robin over the partitions, in small paced batches.

    Each event carries its id (``<prefix>-<n>``) in the value and in a header, plus a header
    without value, so that tests can follow a record across clusters by payload. Pacing makes
    MirrorMaker 2 copy them in many transactions, as live traffic would. Returns, per partition,
    the (offset, event id) of each record in offset order.
    """
    producer = idempotent_producer(settings)
    placed: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    for first in range(0, count, batch):
        records = []
        for n in range(first, min(count, first + batch)):
            event_id = f"{prefix}-{n}"
            records.append((n % partitions, event_id))
        for (partition, event_id), (_, offset) in zip(
            records, _send(producer, topic, records), strict=True
        ):
            placed[partition].append((offset, event_id))
        time.sleep(pause)
    return {p: sorted(v) for p, v in placed.items()}


def _send(producer: Any, topic: str, records: list[tuple[int, str]]) -> list[tuple[int, int]]:
    delivered: dict[int, tuple[int, int]] = {}
    for index, (partition, event_id) in enumerate(records):
        producer.produce(
            topic,
            key=event_id.encode(),
            value=f'{{"id": "{event_id}"}}'.encode(),
            partition=partition,
            headers=[("event-id", event_id.encode()), ("no-value", None)],
            on_delivery=lambda err, msg, i=index: delivered.__setitem__(
                i, (msg.partition(), msg.offset()) if err is None else (-1, -1)
            ),
        )
    assert producer.flush(30.0) == 0, "records not delivered"
    assert all(delivered[i][0] >= 0 for i in range(len(records))), "a record failed"
    return [delivered[i] for i in range(len(records))]


def event_id(record: MirroredRecord) -> str:
    return dict(record.headers)["event-id"].decode()  # type: ignore[union-attr]


def wait_for_records(
    settings: KafkaSettings, tp: TopicPartition, count: int, timeout: float = 60.0
) -> list[MirroredRecord]:
    """All records of ``tp`` once it holds ``count`` (MM2 copies asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            records = read_window(settings, tp, Window(0, None))
        except KafkaReadError:
            records = []  # the replica topic is not created yet
        if len(records) >= count or time.monotonic() > deadline:
            assert len(records) == count, f"{tp}: {len(records)} records, expected {count}"
            return records
        time.sleep(0.3)


@contextmanager
def cluster_frozen(stack: MirrorStack, alias: str) -> Iterator[None]:
    """Cluster ``alias``'s broker frozen (SIGSTOP): its port still accepts connections, but
    nothing answers, as with a hung broker, until the block ends."""
    [pid] = [s.pid for s in stack.status() if s.name == f"kafka-{alias}" and s.running and s.pid]
    os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(pid, signal.SIGCONT)
        _wait_answering(KafkaSettings(stack.bootstrap(alias)), alias)
        _replicating_again(stack)


#: How soon MM2 must replicate both ways again by itself after a broker restart. The failure
#: this guards against is Kafka Connect's rebalance delay, 300 s by default (issue 29); idle,
#: this machine measures 2-3 s, and a loaded CI machine once took just over 30 s (stop 33), so
#: the bound is a fraction of the stall, not of the idle figure.
MIRROR_RESUMES_WITHIN = 90.0


def wait_until_replicating(stack: MirrorStack) -> float:
    """Seconds until a fresh record on each cluster is read from its replica on the other, with
    MM2 left alone; fails past :data:`MIRROR_RESUMES_WITHIN`."""
    probe = ReplicationProbe(stack.config)
    try:
        started = time.monotonic()
        while not probe():
            waited = time.monotonic() - started
            assert waited < MIRROR_RESUMES_WITHIN, f"MM2 still not replicating after {waited:.0f} s"
            time.sleep(0.5)
        waited = time.monotonic() - started
        print(f"MM2 replicating both ways again after {waited:.1f} s")
        return waited
    finally:
        probe.close()


def _replicating_again(stack: MirrorStack) -> None:
    """Both flows proven to replicate again after a freeze, as the runbook has an operator check
    (``stack up --mirror``: a probe record each way, MM2 restarted if it stalled): the session
    shares one MM2, and a flow left stalled by one test must not fail every later one."""
    stack.up(timeout=180.0, stalled_after=45.0)


def _wait_answering(settings: KafkaSettings, alias: str, timeout: float = 90.0) -> None:
    """Wait until a thawed cluster creates a topic again: its broker, frozen past its own
    session timeout, fences and re-registers itself first, and the next test must not pay."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            create_topic(settings, f"thaw-probe-{uuid.uuid4().hex[:8]}", 1, timeout=5.0)
            return
        except Exception as exc:  # any admin failure: not answering yet
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"cluster {alias} did not answer {timeout:.0f}s after SIGCONT"
                ) from exc
            time.sleep(0.5)


def two_cluster_topic(settings: dict[str, KafkaSettings], prefix: str) -> tuple[str, str]:
    """A fresh topic of one partition created on every cluster; ``(suffix, topic)``."""
    suffix = uuid.uuid4().hex[:8]
    topic = f"{prefix}-{suffix}"
    for cluster in settings.values():
        create_topic(cluster, topic, partitions=1)
    return suffix, topic


def clickhouse_failover_rig(
    stack: MirrorStack, settings: dict[str, KafkaSettings], client: Any, name: str, topic: str
) -> tuple[FailoverPipeline, ClickHouseTableSpec, ClickHouseSink]:
    """A ClickHouse-only pipeline over both clusters (starting on A) and its fresh table."""
    from eos_pipeline.core.schema import TableSchema

    fp = FailoverPipeline(
        name=name,
        topics=(topic,),
        sinks=("clickhouse",),
        clusters=ClusterSet.both_ways(stack.config.aliases),
        settings=settings,
        initial="A",
        offset_syncs_location=stack.config.offset_syncs_location,
    )
    schema = TableSchema.from_mapping({"id": "String"})
    spec = ClickHouseTableSpec(pipeline=name, database=f"db_{name}", table="events", schema=schema)
    sink = ClickHouseSink(client)
    sink.ensure_table(spec.database, spec.table, schema)
    return fp, spec, sink


def clickhouse_pipeline_yaml(
    zookeeper_hosts: str, chdb_path: str, settings: dict[str, KafkaSettings], name: str, topic: str
) -> str:
    """A pipelines file naming one ClickHouse pipeline over both clusters (keeper root per name)."""
    a, b = settings["A"].bootstrap_servers, settings["B"].bootstrap_servers
    return f"""
keeper: {{hosts: '{zookeeper_hosts}', root: /eos_{name}}}
clickhouse: {{url: 'chdb://{chdb_path}'}}
pipelines:
  - name: {name}
    kafka:
      bootstrap_servers: '{a}'
      topics: [{topic}]
      clusters: {{A: '{a}', B: '{b}'}}
    schema: {{id: String}}
    clickhouse: {{database: db_{name}, table: events}}
"""
