"""The keeper state store against the real local ZooKeeper: CAS, fencing, lost answers, sessions.

Faults are real where ZooKeeper can produce them (competing sessions, session expiry through a
twin client, ACLs). Lost answers, which a test cannot time on a live socket, are injected by a
kazoo client subclass that makes a request (or not) and then reports ``ConnectionLoss``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, ConnectionLoss, KazooException, NoAuthError

from eos_dev.stack.services import free_port
from eos_pipeline.adapters.keeper import (
    ConflictError,
    KeeperAuthError,
    KeeperSettings,
    KeeperStateStore,
    KeeperUnavailableError,
    Lease,
    StateStore,
)
from eos_pipeline.core.keeper import CorruptRecordError, FencedError, KeeperKey
from eos_pipeline_tests.support.memory_keeper import UnsafeInMemoryStateStore

pytestmark = pytest.mark.integration

KEY = KeeperKey("sales", "clickhouse", "orders", 0)
T0 = datetime(2025, 1, 31, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def root() -> str:
    return f"/eos_test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def raw(zookeeper_hosts: str) -> Iterator[KazooClient]:
    """A plain kazoo client to look at and tamper with znodes behind the store's back."""
    client = KazooClient(hosts=zookeeper_hosts)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def open_store(zookeeper_hosts: str, root: str) -> Iterator[Callable[..., KeeperStateStore]]:
    """Opens stores (one ZooKeeper session each) on this test's root; closes them afterwards."""
    opened: list[KeeperStateStore] = []

    def make(**kwargs: Any) -> KeeperStateStore:
        factory = kwargs.pop("client_factory", KazooClient)
        settings = KeeperSettings(hosts=kwargs.pop("hosts", zookeeper_hosts), root=root, **kwargs)
        store = KeeperStateStore(settings, client_factory=factory).start()
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def stored_json(raw: KazooClient, path: str) -> tuple[dict[str, Any], int]:
    data, stat = raw.get(path)
    return json.loads(data), stat.version


# --- kazoo basics (the "ZooKeeper answers kazoo" smoke) ---------------------------------------


def test_zookeeper_answers_kazoo_create_read_and_versioned_set(raw: KazooClient, root: str) -> None:
    path = f"{root}/smoke"
    raw.create(path, b"one", makepath=True)
    data, stat = raw.get(path)
    assert (data, stat.version) == (b"one", 0)
    assert raw.set(path, b"two", version=0).version == 1
    with pytest.raises(BadVersionError):
        raw.set(path, b"three", version=0)
    assert raw.get(path)[0] == b"two"


# --- layout, format, round trip ---------------------------------------------------------------


def test_acquire_and_write_store_the_documented_json_at_the_documented_path(
    open_store: Callable[..., KeeperStateStore], raw: KazooClient, root: str
) -> None:
    store = open_store()
    lease = store.acquire(KEY, writer="host-a/1/run-1")
    assert (lease.epoch, lease.version) == (1, 0)
    assert not lease.record.has_state

    path = f"{root}/sales/clickhouse/orders/0"
    obj, version = stored_json(raw, path)
    assert version == 0
    assert obj["v"] == 2 and obj["epoch"] == 1 and obj["writer"] == "host-a/1/run-1"
    assert (obj["range_start"], obj["range_end"], obj["phase"]) == (None, None, None)
    assert obj["topic_id"] is None

    written = store.write(lease, 100, 120, "BEFORE", topic_id="WrerBLBuR-e7REEFg8SMLg")
    assert written.version == 1 == lease.version
    obj, version = stored_json(raw, path)
    assert version == 1
    assert (obj["range_start"], obj["range_end"], obj["phase"], obj["epoch"]) == (
        100,
        120,
        "BEFORE",
        1,
    )
    assert obj["topic_id"] == "WrerBLBuR-e7REEFg8SMLg"
    assert obj["lease_id"] == lease.record.lease_id

    other = open_store()  # another session reads the same thing back
    back = other.read(KEY)
    assert back is not None
    assert back.version == 1
    assert (back.record.range_start, back.record.range_end, back.record.phase) == (
        100,
        120,
        "BEFORE",
    )
    assert back.record == lease.record
    assert other.read(KeeperKey("sales", "clickhouse", "orders", 1)) is None


def test_corrupt_znode_is_reported_with_its_path_never_read_as_empty(
    open_store: Callable[..., KeeperStateStore], raw: KazooClient, root: str
) -> None:
    store = open_store()
    path = f"{root}/sales/clickhouse/orders/0"
    raw.create(path, b'{"v": 1, "epoch": ', makepath=True)
    for attempt in (
        lambda: store.read(KEY),
        lambda: store.acquire(KEY),
        lambda: store.read_many("sales", "clickhouse", "orders"),
    ):
        with pytest.raises(CorruptRecordError, match=f"corrupt keeper record at {path}: not"):
            attempt()
    assert raw.get(path)[0] == b'{"v": 1, "epoch": '  # untouched


def test_list_partitions_and_read_many(
    open_store: Callable[..., KeeperStateStore], raw: KazooClient, root: str
) -> None:
    store = open_store()
    expected = {}
    for partition in (10, 0, 2, 5):
        lease = store.acquire(KeeperKey("sales", "clickhouse", "orders", partition))
        expected[partition] = store.write(lease, partition * 100, partition * 100 + 7, "AFTER")
    store.acquire(KeeperKey("sales", "hudi", "orders", 3))  # other sink: not listed
    store.acquire(KeeperKey("sales", "clickhouse", "orders.v2", 4))  # other topic: not listed

    assert store.list_partitions("sales", "clickhouse", "orders") == [0, 2, 5, 10]
    many = store.read_many("sales", "clickhouse", "orders")
    assert many == expected
    assert many[5].record.range_start == 500 and many[5].version == 1
    assert store.list_partitions("sales", "clickhouse", "nothing") == []
    assert store.read_many("nobody", "clickhouse", "orders") == {}

    raw.create(f"{root}/sales/clickhouse/orders/stray")
    with pytest.raises(CorruptRecordError, match="orders/stray: unexpected znode"):
        store.list_partitions("sales", "clickhouse", "orders")


# --- fencing ----------------------------------------------------------------------------------


def test_second_writer_fences_the_first(
    open_store: Callable[..., KeeperStateStore], raw: KazooClient, root: str
) -> None:
    store_a, store_b = open_store(), open_store()
    lease_a = store_a.acquire(KEY, writer="a")
    store_a.write(lease_a, 0, 10, "BEFORE")
    store_a.write(lease_a, 0, 10, "AFTER")

    lease_b = store_b.acquire(KEY, writer="b")
    assert lease_b.epoch == 2
    # B took over A's state as it was.
    assert (lease_b.record.range_start, lease_b.record.range_end, lease_b.record.phase) == (
        0,
        10,
        "AFTER",
    )
    path = f"{root}/sales/clickhouse/orders/0"
    before = raw.get(path)

    with pytest.raises(
        FencedError,
        match=r"^fenced: writer epoch 1 < current epoch 2 for sales/clickhouse/"
        r"orders\[0\]",
    ):
        store_a.write(lease_a, 10, 20, "BEFORE")
    after = raw.get(path)
    assert after[0] == before[0] and after[1].version == before[1].version == 3

    written = store_b.write(lease_b, 10, 20, "BEFORE")
    assert written.version == 4 and written.record.epoch == 2
    obj, _ = stored_json(raw, path)
    assert (obj["epoch"], obj["writer"], obj["range_start"], obj["range_end"]) == (2, "b", 10, 20)
    # A stays fenced, whatever it tries.
    with pytest.raises(FencedError):
        store_a.write(lease_a, 10, 20, "BEFORE")


def test_zombie_writing_while_a_new_writer_takes_over_never_lands_after_the_takeover(
    open_store: Callable[..., KeeperStateStore],
) -> None:
    zombie_store, new_store = open_store(), open_store()
    zombie = zombie_store.acquire(KEY, writer="zombie")
    landed: list[int] = []
    fenced: list[FencedError] = []

    def run_zombie() -> None:
        for offset in range(100_000):
            try:
                zombie_store.write(zombie, offset, offset + 1, "AFTER")
            except FencedError as exc:
                fenced.append(exc)
                return
            landed.append(offset)

    thread = threading.Thread(target=run_zombie)
    thread.start()
    while len(landed) < 20:
        time.sleep(0.005)
    taken = new_store.acquire(KEY, writer="new")
    thread.join(timeout=10)

    assert fenced, "the zombie was never fenced"
    # What the new writer took over is exactly the zombie's last successful write:
    # no zombie write landed after the takeover.
    assert (taken.record.range_start, taken.record.range_end) == (landed[-1], landed[-1] + 1)
    now = new_store.read(KEY)
    assert now is not None and now.version == taken.version and now.record == taken.record


def test_concurrent_acquires_hand_out_each_epoch_exactly_once(
    open_store: Callable[..., KeeperStateStore],
) -> None:
    stores = [open_store(), open_store(), open_store()]
    epochs: list[int] = []
    lock = threading.Lock()

    def grab(store: KeeperStateStore) -> None:
        for _ in range(10):
            lease = store.acquire(KEY)
            with lock:
                epochs.append(lease.epoch)

    threads = [threading.Thread(target=grab, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert sorted(epochs) == list(range(1, 31))
    final = stores[0].read(KEY)
    assert final is not None and final.record.epoch == 30


# --- lost answers -----------------------------------------------------------------------------


def test_retry_of_a_write_that_had_landed_is_success_only_if_content_matches(
    open_store: Callable[..., KeeperStateStore], raw: KazooClient, root: str
) -> None:
    store = open_store()
    lease = store.acquire(KEY)
    store.write(lease, 0, 10, "BEFORE")
    stale = dataclasses.replace(lease)  # what a caller holds if the answer below never arrived
    first = store.write(lease, 0, 10, "AFTER")
    assert first.version == 2

    again = store.write(stale, 0, 10, "AFTER")  # CAS names version 1: BadVersion, then re-read
    assert again.version == 2 and again.record == first.record
    assert stale.version == 2
    assert raw.get(f"{root}/sales/clickhouse/orders/0")[1].version == 2  # nothing new written

    stale = dataclasses.replace(lease, version=1)
    with pytest.raises(ConflictError, match=r"changed under epoch 1 \(expected version 1"):
        store.write(stale, 0, 12, "AFTER")
    now = store.read(KEY)
    assert now is not None and now.version == 2 and now.record.range_end == 10


class LossyClient(KazooClient):
    """Loses ``set`` answers on demand: ``faults`` holds one entry per upcoming ``set``.

    ``"answer"``: the request is applied by ZooKeeper, then ConnectionLoss is reported.
    ``"request"``: the request is never sent, ConnectionLoss is reported.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.faults: list[str | None] = []
        self.sets_applied = 0

    def set_async(self, path: str, value: bytes, version: int = -1) -> Any:
        fault = self.faults.pop(0) if self.faults else None
        if fault is None:
            return super().set_async(path, value, version)
        if fault == "answer":
            try:
                super().set_async(path, value, version).get(timeout=10)
                self.sets_applied += 1
            except KazooException:
                pass
        lost = self.handler.async_result()
        lost.set_exception(ConnectionLoss())
        return lost


def test_lost_answer_is_recognised_on_reread(
    open_store: Callable[..., KeeperStateStore], raw: KazooClient, root: str
) -> None:
    store = open_store(client_factory=LossyClient)
    lossy: LossyClient = store.client  # type: ignore[assignment]
    lease = store.acquire(KEY)

    lossy.faults = ["answer"]
    written = store.write(lease, 0, 10, "BEFORE")
    assert lossy.sets_applied == 1 and not lossy.faults
    assert written.version == 1 == lease.version  # applied once, not twice
    assert raw.get(f"{root}/sales/clickhouse/orders/0")[1].version == 1

    lossy.faults = ["request", "request"]
    written = store.write(lease, 0, 10, "AFTER")  # never arrived: sent again with the same CAS
    assert written.version == 2 and written.record.phase == "AFTER"

    lossy.faults = ["request"] * 10
    with pytest.raises(KeeperUnavailableError, match=r"no definite answer .* after 5 attempts"):
        store.write(lease, 10, 20, "BEFORE")
    now = store.read(KEY)
    assert now is not None and now.version == 2 and now.record.phase == "AFTER"


def test_lost_answer_of_a_zombie_write_is_still_fenced(
    open_store: Callable[..., KeeperStateStore],
) -> None:
    zombie_store = open_store(client_factory=LossyClient)
    lossy: LossyClient = zombie_store.client  # type: ignore[assignment]
    zombie = zombie_store.acquire(KEY)
    open_store().acquire(KEY)
    lossy.faults = ["answer"]  # ZooKeeper refuses (BadVersion), the refusal is lost too
    with pytest.raises(FencedError, match="epoch 1 < current epoch 2"):
        zombie_store.write(zombie, 0, 10, "BEFORE")
    assert lossy.sets_applied == 0


# --- sessions and connections -----------------------------------------------------------------


def expire_session(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session for real: a twin joins it with the same id, then closes it."""
    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_session_expiry_mid_run_loses_nothing_and_writes_continue(
    open_store: Callable[..., KeeperStateStore], zookeeper_hosts: str
) -> None:
    store = open_store(session_timeout_s=4.0)
    states: list[str] = []
    store.client.add_listener(states.append)
    lease = store.acquire(KEY)
    store.write(lease, 0, 10, "BEFORE")
    session_before = store.client.client_id[0]

    expire_session(store.client, zookeeper_hosts)
    written = store.write(lease, 0, 10, "AFTER")  # may meet the expiry, then re-read and resend

    assert KazooState.LOST in states
    assert store.client.client_id[0] != session_before
    assert written.version == 2 and written.record.phase == "AFTER"
    now = open_store().read(KEY)
    assert now is not None and now.version == 2 and now.record == written.record


def test_readers_share_one_session_across_uses_which_survives_expiry_and_is_replaced_when_broken(
    open_store: Callable[..., KeeperStateStore], zookeeper_hosts: str, root: str
) -> None:
    from eos_pipeline.adapters.keeper import shared_store
    from eos_pipeline_tests.support.memory_keeper import close_shared_stores

    settings = KeeperSettings(zookeeper_hosts, root=root, session_timeout_s=4.0)
    writer = open_store()
    lease = writer.acquire(KEY)
    writer.write(lease, 0, 10, "AFTER")
    try:
        with shared_store(settings) as first:
            assert first.read(KEY).record.range_end == 10
        with shared_store(settings) as second:  # the next tick: no new session
            assert second is first and second.client.connected
            session = second.client.client_id[0]
        expire_session(first.client, zookeeper_hosts)
        writer.write(lease, 10, 20, "AFTER")
        with shared_store(settings) as third:  # kazoo opened a new session by itself
            assert third is first and third.read(KEY).record.range_end == 20
            assert third.client.client_id[0] != session
        with pytest.raises(KeeperUnavailableError), shared_store(settings) as broken:
            raise KeeperUnavailableError("as a read that timed out would")
        assert broken.closed  # dropped: the next reader gets a new store
        with shared_store(settings) as fresh:
            assert fresh is not broken and fresh.read(KEY).record.range_end == 20
    finally:
        close_shared_stores()
    assert fresh.closed


def test_writer_whose_session_expired_while_another_took_over_is_fenced(
    open_store: Callable[..., KeeperStateStore], zookeeper_hosts: str
) -> None:
    old_store = open_store(session_timeout_s=4.0)
    lease = old_store.acquire(KEY)
    old_store.write(lease, 0, 10, "BEFORE")
    expire_session(old_store.client, zookeeper_hosts)
    new_lease = open_store().acquire(KEY)
    with pytest.raises(FencedError, match="epoch 1 < current epoch 2"):
        old_store.write(lease, 0, 10, "AFTER")
    now = old_store.read(KEY)
    assert now is not None and now.version == new_lease.version
    assert (now.record.phase, now.record.epoch) == ("BEFORE", 2)


def test_unreachable_zookeeper_fails_fast_with_a_clear_error(root: str) -> None:
    hosts = f"127.0.0.1:{free_port()}"
    settings = KeeperSettings(hosts=hosts, root=root, connect_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(
        KeeperUnavailableError, match=f"^cannot reach ZooKeeper at {hosts} within 1 s"
    ):
        KeeperStateStore(settings).start()
    assert time.monotonic() - started < 5


def test_chroot_in_hosts_is_created_and_used(
    open_store: Callable[..., KeeperStateStore], raw: KazooClient, zookeeper_hosts: str, root: str
) -> None:
    chroot = f"/chroot_{uuid.uuid4().hex[:8]}/team"
    store = open_store(hosts=zookeeper_hosts + chroot)
    store.write(store.acquire(KEY), 3, 4, "AFTER")
    obj, _ = stored_json(raw, f"{chroot}{root}/sales/clickhouse/orders/0")
    assert (obj["range_start"], obj["range_end"]) == (3, 4)
    assert raw.exists(f"{root}/sales") is None  # nothing outside the chroot


# --- digest auth ------------------------------------------------------------------------------


def test_digest_acl_keeps_other_clients_out(
    open_store: Callable[..., KeeperStateStore], raw: KazooClient, root: str
) -> None:
    owner = open_store(auth=("alice", "s3cret-pw"))
    lease = owner.acquire(KEY)
    owner.write(lease, 0, 10, "AFTER")
    path = f"{root}/sales/clickhouse/orders/0"

    with pytest.raises(NoAuthError):
        raw.get(path)
    with pytest.raises(NoAuthError):
        raw.set(path, b"{}")
    with pytest.raises(NoAuthError):
        raw.create(f"{root}/sales/clickhouse/orders/1", b"{}")

    wrong = open_store(auth=("alice", "guess"))
    with pytest.raises(KeeperAuthError, match="refused access") as refused:
        wrong.read(KEY)
    with pytest.raises(KeeperAuthError):
        wrong.acquire(KEY)
    assert "guess" not in str(refused.value)
    assert "s3cret-pw" not in repr(owner.settings) and "alice" in repr(owner.settings)

    again = open_store(auth=("alice", "s3cret-pw"))
    now = again.read(KEY)
    assert now is not None and now.record.range_end == 10
    again.write(again.acquire(KEY), 10, 20, "BEFORE")


def test_world_readable_acl_lets_anyone_read_but_not_write(
    open_store: Callable[..., KeeperStateStore], raw: KazooClient, root: str
) -> None:
    owner = open_store(auth=("bob", "pw-123"), world_readable=True)
    owner.write(owner.acquire(KEY), 0, 10, "AFTER")
    path = f"{root}/sales/clickhouse/orders/0"
    assert json.loads(raw.get(path)[0])["range_end"] == 10
    with pytest.raises(NoAuthError):
        raw.set(path, b"{}")


# --- the unit-test store obeys the same rules -------------------------------------------------


@pytest.fixture(params=["zookeeper", "memory"])
def two_sessions(
    request: pytest.FixtureRequest, open_store: Callable[..., KeeperStateStore]
) -> tuple[StateStore, StateStore]:
    if request.param == "zookeeper":
        return open_store(), open_store()
    shared = UnsafeInMemoryStateStore(clock=lambda: T0)
    return shared, shared


def test_both_stores_share_the_protocol_rules(two_sessions: tuple[StateStore, StateStore]) -> None:
    a, b = two_sessions
    assert a.read(KEY) is None
    lease_a = a.acquire(KEY, writer="a")
    assert (lease_a.epoch, lease_a.version) == (1, 0)
    first = a.write(lease_a, 0, 5, "BEFORE")
    stale = dataclasses.replace(lease_a, version=0)
    assert a.write(stale, 0, 5, "BEFORE") == first  # a landed write retried: success
    with pytest.raises(ConflictError):
        a.write(dataclasses.replace(lease_a, version=0), 0, 6, "BEFORE")

    lease_b: Lease = b.acquire(KEY, writer="b")
    assert (lease_b.epoch, lease_b.version) == (2, 2)
    with pytest.raises(FencedError, match=r"writer epoch 1 < current epoch 2 for sales/clickhouse"):
        a.write(lease_a, 5, 9, "AFTER")
    assert b.write(lease_b, 0, 5, "AFTER").version == 3
    assert b.list_partitions("sales", "clickhouse", "orders") == [0]
    got = a.read_many("sales", "clickhouse", "orders")[0]
    assert (got.version, got.record.epoch, got.record.phase) == (3, 2, "AFTER")
    with pytest.raises(ValueError, match="phase"):
        b.write(lease_b, 5, 9, "DONE")


def test_in_memory_store_reports_corrupt_records() -> None:
    store = UnsafeInMemoryStateStore()
    store.put_raw(KEY, b"garbage")
    with pytest.raises(CorruptRecordError, match="/eos_pipeline/sales/clickhouse/orders/0"):
        store.acquire(KEY)
