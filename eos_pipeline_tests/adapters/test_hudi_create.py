"""The lock that serializes a new Hudi table's creation: real files, real processes, real
ZooKeeper. The race it prevents (two Spark writers creating one table) is proven end to end in
``faults/test_hudi_faults.py::test_two_writers_at_once...[new-*]``; here, the lock itself."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from eos_pipeline.adapters.hudi_create import (
    LOCAL_LOCK_NAME,
    TableCreationLockError,
    local_table_dir,
    table_creation_lock,
    zookeeper_lock_node,
)


def _hold(table: str, options: dict[str, str] | None, log: str, hold_s: float) -> None:
    with table_creation_lock(table, options, wait_s=60):
        with open(log, "a") as out:
            out.write(f"in {os.getpid()}\n")
        time.sleep(hold_s)
        with open(log, "a") as out:
            out.write(f"out {os.getpid()}\n")


def _three_holders_take_turns(table: str, options: dict[str, str] | None, log: Path) -> None:
    """Three processes ask for the lock at once; each holds it 0.4 s; no two hold it together."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hold, args=(table, options, str(log), 0.4)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
        assert p.exitcode == 0
    _intervals_never_overlap(log, 3)


def _intervals_never_overlap(log: Path, holders: int) -> None:
    lines = log.read_text().split()
    events = list(zip(lines[::2], lines[1::2], strict=True))
    assert len(events) == 2 * holders, events
    # Strictly alternating in/out of the same process: no two holders at once.
    for enter, leave in zip(events[::2], events[1::2], strict=True):
        assert enter[0] == "in" and leave[0] == "out" and enter[1] == leave[1], events


def test_local_paths_and_urls_are_told_apart(tmp_path: Path) -> None:
    assert local_table_dir(str(tmp_path / "t")) == tmp_path / "t"
    assert local_table_dir(f"file://{tmp_path}/t") == tmp_path / "t"
    assert local_table_dir("s3a://bucket/t") is None
    assert local_table_dir("hdfs://nn:8020/t") is None


def test_zookeeper_node_follows_hudis_lock_options() -> None:
    provider = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
    options = {
        "hoodie.write.lock.provider": provider,
        "hoodie.write.lock.zookeeper.url": "zk1,zk2:2182",
        "hoodie.write.lock.zookeeper.port": "2190",
        "hoodie.write.lock.zookeeper.base_path": "/locks/",
        "hoodie.write.lock.zookeeper.lock_key": "orders",
    }
    assert zookeeper_lock_node(options) == ("zk1:2190,zk2:2182", "/locks/orders.eos-create")
    assert zookeeper_lock_node({}) is None
    with pytest.raises(TableCreationLockError, match="lock_key"):
        zookeeper_lock_node({"hoodie.write.lock.provider": provider})


def test_local_lock_lets_one_creator_in_at_a_time(tmp_path: Path) -> None:
    _three_holders_take_turns(str(tmp_path / "table"), None, tmp_path / "log")
    assert (tmp_path / "table" / LOCAL_LOCK_NAME).exists()


def test_a_killed_creator_does_not_block_the_next(tmp_path: Path) -> None:
    table, log = str(tmp_path / "table"), tmp_path / "log"
    ctx = multiprocessing.get_context("spawn")
    holder = ctx.Process(target=_hold, args=(table, None, str(log), 600))
    holder.start()
    deadline = time.monotonic() + 60
    while not log.exists() or "in" not in log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with (
        pytest.raises(TableCreationLockError, match="another writer"),
        table_creation_lock(table, wait_s=0.3),
    ):
        pass
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    started = time.monotonic()
    with table_creation_lock(table, wait_s=10):
        assert time.monotonic() - started < 5


def test_zookeeper_lock_lets_one_creator_in_at_a_time(tmp_path: Path, zookeeper_hosts: str) -> None:
    host, port = zookeeper_hosts.split(",")[0].rsplit(":", 1)
    options = {
        "hoodie.write.lock.provider": (
            "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
        ),
        "hoodie.write.lock.zookeeper.url": host,
        "hoodie.write.lock.zookeeper.port": port,
        "hoodie.write.lock.zookeeper.base_path": f"/eos_test_create_{uuid.uuid4().hex[:8]}",
        "hoodie.write.lock.zookeeper.lock_key": "t",
    }
    # An object-store path: only ZooKeeper can serialize it.
    _three_holders_take_turns("s3a://bucket/t", options, tmp_path / "log")
    assert not (tmp_path / "t").exists()


def test_unreachable_zookeeper_names_itself() -> None:
    from eos_dev.stack.services import free_port

    port = free_port()
    options = {
        "hoodie.write.lock.provider": "ZookeeperBasedLockProvider",
        "hoodie.write.lock.zookeeper.url": f"127.0.0.1:{port}",
        "hoodie.write.lock.zookeeper.base_path": "/x",
        "hoodie.write.lock.zookeeper.lock_key": "t",
    }
    with (
        pytest.raises(TableCreationLockError, match=f"127.0.0.1:{port}.*not reachable"),
        table_creation_lock("s3a://b/t", options, wait_s=1),
    ):
        pass
