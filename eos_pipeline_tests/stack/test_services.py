"""The dev stack's process management, on real JVM processes."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from eos_dev.stack import kafka_broker
from eos_dev.stack.config import DEFAULT_JVM_OPTIONS
from eos_dev.stack.services import (
    Stack,
    StackConfig,
    StackError,
    free_port,
    kafka_ready,
    pid_alive,
    zookeeper_ready,
)

pytestmark = pytest.mark.integration


def _fresh_config(tmp_path: Path) -> StackConfig:
    return StackConfig(
        state_dir=tmp_path / "stack",
        zookeeper_port=free_port(),
        kafka_port=free_port(),
        controller_port=free_port(),
    )


def _children(pid: int) -> set[int]:
    """Every process whose session is ``pid`` (the stack starts each service in its own)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == pid:
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def test_session_stack_serves_both_protocols(local_stack: StackConfig) -> None:
    assert zookeeper_ready(local_stack.host, local_stack.zookeeper_port)
    assert kafka_ready(local_stack.kafka_bootstrap)
    statuses = {s.name: s for s in Stack(local_stack).status()}
    assert statuses["zookeeper"].running and statuses["kafka"].running


def test_up_is_idempotent_and_down_leaves_no_process(tmp_path: Path) -> None:
    stack = Stack(_fresh_config(tmp_path), say=lambda _: None)
    stack.up()
    try:
        pids = {s.name: s.pid for s in stack.status()}
        assert all(pid is not None and pid_alive(pid) for pid in pids.values())
        sessions = {pid: _children(pid) for pid in pids.values() if pid}

        stack.up()  # second `up` only checks: same processes, nothing new started
        assert {s.name: s.pid for s in stack.status()} == pids
    finally:
        stack.down()

    for pid, members in sessions.items():
        assert not pid_alive(pid), f"service pid {pid} still alive after down"
        assert not any(pid_alive(p) for p in members), f"stray processes of {pid}: {members}"
    assert all(not s.running for s in stack.status())
    stack.down()  # stopping a stopped stack is fine too


def test_taken_port_is_reported_with_the_flag_to_change(tmp_path: Path) -> None:
    config = _fresh_config(tmp_path)
    with socket.socket() as blocker:
        blocker.bind((config.host, config.zookeeper_port))
        blocker.listen()
        with pytest.raises(StackError) as err:
            Stack(config, say=lambda _: None).up()
    message = str(err.value)
    assert str(config.zookeeper_port) in message
    assert "--zookeeper-port" in message and "taken" in message
    assert all(not s.running for s in Stack(config).status())


def test_missing_java_is_reported_with_how_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk-here"))
    with pytest.raises(StackError, match=r"Java not found.*JAVA_HOME"):
        Stack(_fresh_config(tmp_path), say=lambda _: None).up()


def test_zookeeper_answers_kazoo_create_read_versioned_set(zookeeper_hosts: str) -> None:
    from kazoo.exceptions import BadVersionError

    client = KazooClient(hosts=zookeeper_hosts, timeout=10)
    client.start(timeout=10)
    try:
        client.create("/smoke/node", b"v0", makepath=True)
        value, stat = client.get("/smoke/node")
        assert value == b"v0" and stat.version == 0
        client.set("/smoke/node", b"v1", version=0)
        with pytest.raises(BadVersionError):
            client.set("/smoke/node", b"stale", version=0)
        assert client.get("/smoke/node")[0] == b"v1"
    finally:
        client.delete("/smoke", recursive=True)
        client.stop()


def test_kafka_cluster_ids_never_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage tool reads ``-t -abc...`` as an option; such draws must be redrawn."""
    draws = iter([b"\xf8" + bytes(15), bytes(16)])  # base64 of 0xf8... starts with "-"
    monkeypatch.setattr(kafka_broker.uuid, "uuid4", lambda: type("U", (), {"bytes": next(draws)})())
    assert kafka_broker.kafka_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"


def test_jvm_options_come_from_the_environment_and_reach_every_stack_jvm(
    local_stack: StackConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EOS_STACK_JVM_OPTIONS", raising=False)
    assert StackConfig().jvm_options == DEFAULT_JVM_OPTIONS
    monkeypatch.setenv("EOS_STACK_JVM_OPTIONS", " -XX:+UseSerialGC  -Xss1m ")
    assert StackConfig().jvm_options == ("-XX:+UseSerialGC", "-Xss1m")
    # The session's stack was configured under the test suite's options (conftest).
    stack = Stack(local_stack, say=lambda _: None)
    for service in stack.status():
        assert service.pid is not None, service
        argv = Path(f"/proc/{service.pid}/cmdline").read_bytes().split(b"\0")
        for option in local_stack.jvm_options:
            assert option.encode() in argv, (service.name, option)
