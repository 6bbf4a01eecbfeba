"""The keeper state store: sink positions in ZooKeeper (or ClickHouse Keeper) through kazoo,
fenced by epochs; the lease rules are pure, in :mod:`eos_pipeline.core.keeper`.

One persistent znode per ``<root>/<pipeline>/<sink>/<topic>/<partition>`` holds epoch and state,
so one ``set(path, data, version=v)`` checks and moves both: after a newer acquire, a zombie's
write fails its compare-and-set. A lost answer (connection loss, expiry, a retried write that had
landed) is settled by re-reading (:func:`~eos_pipeline.core.keeper.write_outcome`), never by
overwriting. Znodes outlive sessions, so an expired session loses nothing.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from eos_pipeline.core.errors import NeedsPerson, Transient
from eos_pipeline.core.keeper import (
    DEFAULT_ROOT,
    ConflictError,
    KeeperError,
    KeeperKey,
    KeeperRecord,
    Lease,
    Mark,
    VersionedRecord,
    new_lease_id,
    parse_partition_child,
    refusal,
    topic_path,
    utc_now,
    validate_name,
    validate_root,
    validate_topic,
    write_outcome,
)
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.replay import JournalEntry

if TYPE_CHECKING:  # typing.Unpack for **kwargs needs Python 3.12
    from typing_extensions import Unpack


class KeeperUnavailableError(Transient, KeeperError):
    """ZooKeeper could not be reached, or did not answer within the configured time."""

    code = "keeper-unavailable"


class KeeperAuthError(NeedsPerson, KeeperError):
    """The znode's ACL refuses this client (missing or wrong digest credentials)."""

    code = "keeper-auth"


def default_writer_id(run_id: str | None = None) -> str:
    """``host/pid/run``: who holds a lease, for humans; a random suffix stands in for a run id."""
    return f"{socket.gethostname()}/{os.getpid()}/{run_id or uuid.uuid4().hex[:12]}"


class StateStore(Protocol):
    """What a sink needs from the keeper; the ZooKeeper store and the unit-test store share it."""

    def read(self, key: KeeperKey) -> VersionedRecord | None: ...

    def read_many(
        self, pipeline: str, sink: str, topic: str, cluster: str | None = None
    ) -> dict[int, VersionedRecord]: ...

    def acquire(self, key: KeeperKey, *, writer: str | None = None) -> Lease: ...

    def write(
        self,
        lease: Lease,
        range_start: int,
        range_end: int,
        phase: str,
        **fields: Unpack[WriteFields],
    ) -> VersionedRecord: ...


class WriteFields(TypedDict, total=False):
    """What a write stores beside its range and phase (``Lease.next_record``'s keywords)."""

    topic_id: str | None
    mark: Mark | None
    replace_mark: bool


@dataclass(frozen=True)
class KeeperSettings:
    """How to reach the keeper; ``hosts`` may end in a chroot (``h1:2181,h2:2181/chroot``, created
    when missing). ``auth`` logs in with digest auth and gives every znode it creates a digest ACL
    (plus read for anyone if ``world_readable``); the password is never shown."""

    hosts: str
    root: str = DEFAULT_ROOT
    auth: tuple[str, str] | None = field(default=None, repr=False)
    world_readable: bool = False
    connect_timeout_s: float = 10.0
    session_timeout_s: float = 10.0
    operation_timeout_s: float = 30.0
    max_write_attempts: int = 5

    def __post_init__(self) -> None:
        if not self.hosts or not self.hosts.strip():
            raise ValueError("keeper hosts must not be empty, e.g. '127.0.0.1:2181'")
        object.__setattr__(self, "root", validate_root(self.root))
        if self.auth is not None:
            user, password = self.auth
            if not user or ":" in user or not password:
                raise ValueError("keeper auth needs a non-empty user without ':' and a password")
        for name in ("connect_timeout_s", "session_timeout_s", "operation_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.max_write_attempts < 1:
            raise ValueError("max_write_attempts must be >= 1")

    def __repr__(self) -> str:
        user = f"{self.auth[0]!r}:***" if self.auth else None
        return (
            f"KeeperSettings(hosts={self.hosts!r}, root={self.root!r}, auth={user}, "
            f"world_readable={self.world_readable})"
        )

    @property
    def chroot(self) -> str | None:
        _, sep, rest = self.hosts.partition("/")
        return "/" + rest.strip("/") if sep and rest.strip("/") else None

    def acl(self) -> list[ACL]:
        if self.auth is None:
            return list(OPEN_ACL_UNSAFE)
        acl = [make_digest_acl(self.auth[0], self.auth[1], all=True)]
        if self.world_readable:
            acl.append(make_acl("world", "anyone", read=True))
        return acl

    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.auth[0]}:{self.auth[1]}")] if self.auth else []


log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors after which a request may or may not have been applied by the server.
_OUTCOME_UNKNOWN = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


class KeeperStateStore:
    """The :class:`StateStore` on kazoo, for one thread at a time; ``client_factory`` builds the
    kazoo client (tests pass one that injects faults)."""

    def __init__(
        self,
        settings: KeeperSettings,
        *,
        clock: Callable[[], datetime] = utc_now,
        client_factory: Callable[..., KazooClient] = KazooClient,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._acl = settings.acl()
        self._client = client_factory(
            hosts=settings.hosts,
            timeout=settings.session_timeout_s,
            auth_data=settings.auth_data() or None,
            default_acl=self._acl,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        )
        self._closing = False
        self._client.add_listener(self._on_state_change)
        self._retry = KazooRetry(
            max_tries=-1,
            delay=0.05,
            backoff=2,
            max_delay=1.0,
            deadline=settings.operation_timeout_s,
            ignore_expire=True,
        )

    @property
    def client(self) -> KazooClient:
        """The underlying kazoo client (for health checks and tests)."""
        return self._client

    def start(self) -> KeeperStateStore:
        s = self.settings
        try:
            with warnings.catch_warnings():
                # kazoo warns when the chroot is missing; it is created just below.
                warnings.filterwarnings("ignore", message="No chroot path exists")
                self._client.start(timeout=s.connect_timeout_s)
        except KazooTimeoutError as exc:
            raise KeeperUnavailableError(
                f"cannot reach ZooKeeper at {s.hosts} within {s.connect_timeout_s:g} s: {exc}"
            ) from None
        try:
            if s.chroot and not self._call(lambda: self._client.exists_async("/")):
                self._create_chroot(s.chroot)
        except BaseException:
            self.close()
            raise
        log.info("keeper connected to %s (root %s)", s.hosts, s.root)
        return self

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a closed store cannot be started again)."""
        return self._closing

    def close(self) -> None:
        self._closing = True
        try:
            self._client.stop()
        finally:
            self._client.close()

    def __enter__(self) -> KeeperStateStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create_chroot(self, chroot: str) -> None:
        """A chroot must exist before use; create it through a client without the chroot."""
        hosts = self.settings.hosts.partition("/")[0]
        plain = KazooClient(
            hosts=hosts,
            timeout=self.settings.session_timeout_s,
            auth_data=self.settings.auth_data() or None,
        )
        plain.start(timeout=self.settings.connect_timeout_s)
        try:
            plain.ensure_path(chroot, acl=self._acl)
        finally:
            plain.stop()
            plain.close()

    def _on_state_change(self, state: str) -> None:
        # Runs on kazoo's connection thread: log only, never block.
        if self._closing:
            log.info("keeper session to %s closed (%s)", self.settings.hosts, state)
        elif state == KazooState.SUSPENDED:
            log.warning("keeper connection to %s suspended; reconnecting", self.settings.hosts)
        elif state == KazooState.LOST:
            log.warning(
                "keeper session at %s lost (expired or closed); znodes are persistent, "
                "so no state is lost; a new session will be opened",
                self.settings.hosts,
            )
        else:
            log.info("keeper connected to %s", self.settings.hosts)

    def path(self, key: KeeperKey) -> str:
        return key.path(self.settings.root)

    def _call(self, start: Callable[[], Any]) -> Any:
        """Run one kazoo async call, waiting at most ``operation_timeout_s`` for its answer."""
        try:
            return start().get(timeout=self.settings.operation_timeout_s)
        except KazooTimeoutError:
            raise OperationTimeoutError() from None
        except NoAuthError:
            raise KeeperAuthError(
                f"ZooKeeper at {self.settings.hosts} refused access under {self.settings.root}: "
                "the znode's ACL needs other digest credentials (check the keeper auth user)"
            ) from None

    def _retrying(self, what: str, func: Callable[[], T]) -> T:
        """Run an idempotent read, retried across connection loss and session expiry."""
        try:
            return self._retry.copy()(func)
        except RetryFailedError as exc:
            raise KeeperUnavailableError(
                f"cannot {what}: ZooKeeper at {self.settings.hosts} did not answer within "
                f"{self.settings.operation_timeout_s:g} s ({exc})"
            ) from None
        except ConnectionClosedError:
            raise KeeperUnavailableError(f"cannot {what}: the keeper store is closed") from None

    def _read_path(self, path: str) -> VersionedRecord | None:
        def once() -> tuple[bytes, Any] | None:
            try:
                return self._call(lambda: self._client.get_async(path))
            except NoNodeError:
                return None

        got = self._retrying(f"read {path}", once)
        if got is None:
            return None
        data, stat = got
        return VersionedRecord(KeeperRecord.decode(data, path), stat.version)

    def _put(
        self, path: str, intended: KeeperRecord, expected_version: int | None
    ) -> tuple[VersionedRecord | None, VersionedRecord | None]:
        """CAS ``intended`` at ``path`` (create when ``expected_version`` is None): ``(stored,
        None)`` when it landed, ``(None, current)`` when someone else changed the znode first."""
        data = intended.encode()
        attempts = self.settings.max_write_attempts
        for attempt in range(1, attempts + 1):
            try:
                if expected_version is None:
                    _, stat = self._call(
                        lambda: self._client.create_async(
                            path, data, acl=self._acl, makepath=True, include_data=True
                        )
                    )
                else:
                    stat = self._call(
                        lambda: self._client.set_async(path, data, version=expected_version)
                    )
                return VersionedRecord(intended, stat.version), None
            except (BadVersionError, NodeExistsError, NoNodeError) as exc:
                reason = type(exc).__name__
            except _OUTCOME_UNKNOWN as exc:
                reason = f"{type(exc).__name__}, outcome unknown"
            except ConnectionClosedError:
                raise KeeperUnavailableError(f"cannot write {path}: the store is closed") from None
            current = self._read_path(path)
            outcome = write_outcome(intended, expected_version, current)
            log.info("keeper write to %s: %s (attempt %d) -> %s", path, reason, attempt, outcome)
            if outcome == "landed":
                return current, None
            if outcome == "lost":
                return None, current
        raise KeeperUnavailableError(
            f"cannot write {path}: no definite answer from ZooKeeper at {self.settings.hosts} "
            f"after {attempts} attempts; the stored state is still consistent, retry later"
        )

    def read(self, key: KeeperKey) -> VersionedRecord | None:
        """The stored record and its znode version, or None when the partition was never taken."""
        return self._read_path(self.path(key))

    def list_partitions(
        self, pipeline: str, sink: str, topic: str, cluster: str | None = None
    ) -> list[int]:
        """Partitions of ``topic`` that have a record for this pipeline and sink, sorted."""
        parent = topic_path(self.settings.root, pipeline, sink, topic, cluster)

        def once() -> list[str]:
            try:
                return self._call(lambda: self._client.get_children_async(parent))
            except NoNodeError:
                return []

        children = self._retrying(f"list {parent}", once)
        return sorted(parse_partition_child(name, parent) for name in children)

    def read_many(
        self, pipeline: str, sink: str, topic: str, cluster: str | None = None
    ) -> dict[int, VersionedRecord]:
        """All records of one topic for a sink: one children call, then gets sent together."""
        parent = topic_path(self.settings.root, pipeline, sink, topic, cluster)
        partitions = self.list_partitions(pipeline, sink, topic, cluster)

        def once() -> dict[int, tuple[bytes, Any]]:
            pending = {p: self._client.get_async(f"{parent}/{p}") for p in partitions}
            found = {}
            for p, result in pending.items():
                try:
                    found[p] = self._call(lambda result=result: result)
                except NoNodeError:
                    continue  # deleted since the listing
            return found

        raw = self._retrying(f"read {parent}", once)
        return {
            p: VersionedRecord(KeeperRecord.decode(data, f"{parent}/{p}"), stat.version)
            for p, (data, stat) in raw.items()
        }

    def acquire(self, key: KeeperKey, *, writer: str | None = None) -> Lease:
        """Take the partition: bump its epoch by CAS, fencing every earlier lease (the stored
        state is kept, as ``lease.record``). The newest acquirer wins; only
        ``operation_timeout_s`` of contention (a scheduling bug) gives up: :class:`ConflictError`.
        """
        writer = writer or default_writer_id()
        lease_id = new_lease_id()
        path = self.path(key)
        deadline = time.monotonic() + self.settings.operation_timeout_s
        rounds = 0
        while True:
            rounds += 1
            now = self._clock()
            current = self._read_path(path)
            if current is None:
                intended = KeeperRecord(epoch=1, lease_id=lease_id, writer=writer, updated_at=now)
            else:
                intended = current.record.taken_over(lease_id, writer, now)
            stored, _ = self._put(path, intended, current.version if current else None)
            if stored is not None:
                log.info("keeper: %s acquired %s at epoch %d", writer, key, stored.record.epoch)
                return Lease(key, stored.record.epoch, writer, stored.version, stored.record)
            if time.monotonic() >= deadline:
                raise ConflictError(
                    f"conflict: could not acquire {key}: its epoch kept changing under "
                    f"concurrent acquires ({rounds} rounds in "
                    f"{self.settings.operation_timeout_s:g} s)"
                )
            # Someone else bumped the epoch first: back off a little (with jitter) and bump again.
            time.sleep(random.uniform(0, min(0.2, 0.005 * 2**rounds)))

    def write(
        self,
        lease: Lease,
        range_start: int,
        range_end: int,
        phase: str,
        **fields: Unpack[WriteFields],
    ) -> VersionedRecord:
        """Store ``[range_start, range_end)`` in ``phase`` if ``lease`` still holds the partition,
        else :class:`FencedError` (a newer epoch) or :class:`ConflictError`, writing nothing.
        """
        path = self.path(lease.key)
        intended = lease.next_record(range_start, range_end, phase, self._clock(), **fields)
        stored, current = self._put(path, intended, lease.version)
        if stored is None:
            raise refusal(lease, current, path)
        lease.version, lease.record = stored.version, stored.record
        return stored


_STORES: dict[tuple[int, KeeperSettings], KeeperStateStore] = {}
_LOCK = threading.Lock()
#: Settings seen by one process are few (one keeper per code location); more is a test session.
_MAX_STORES = 8


@contextmanager
def shared_store(settings: KeeperSettings) -> Iterator[KeeperStateStore]:
    """The process's started store for ``settings``, left open for readers that come back every
    few seconds (rebuilt after a close, a fork or a keeper error)."""
    key = (os.getpid(), settings)
    with _LOCK:
        store = _STORES.get(key)
        if store is None or store.closed:
            store = _STORES[key] = KeeperStateStore(settings).start()
            while len(_STORES) > _MAX_STORES:
                _STORES.pop(next(iter(_STORES))).close()
    try:
        yield store
    except KeeperError:
        with _LOCK:
            if _STORES.get(key) is store:
                del _STORES[key]
        store.close()
        raise


class ReplayJournal:
    """The journal of a sink's replays in flight, ``<root>/<pipeline>/@replay/<sink>/<topic>/<p>``
    (``RUNNING``: rows may be deleted and not yet re-inserted)."""

    def __init__(self, store: KeeperStateStore, pipeline: str, sink: str) -> None:
        self.store = store
        self.pipeline = validate_name("pipeline", pipeline)
        self.sink = validate_name("sink", sink)

    def path(self, tp: TopicPartition) -> str:
        topic = validate_topic(tp.topic)
        root = self.store.settings.root
        return f"{root}/{self.pipeline}/@replay/{self.sink}/{topic}/{tp.partition}"

    def read(self, tp: TopicPartition) -> tuple[JournalEntry | None, int | None]:
        """The entry and its znode version; (None, None) if no replay ever ran."""
        path = self.path(tp)
        try:
            data, stat = self.store.client.get(path)
        except NoNodeError:
            return None, None
        return JournalEntry.decode(data, path), stat.version

    def write(self, tp: TopicPartition, entry: JournalEntry, version: int | None) -> int:
        """Store ``entry`` if the znode is still at ``version``; return the new version."""
        path = self.path(tp)
        try:
            if version is None:
                self.store.client.create(path, entry.encode(), makepath=True)
                return 0
            return int(self.store.client.set(path, entry.encode(), version=version).version)
        except (BadVersionError, NodeExistsError):
            raise ConflictError(
                f"{path}: another replay of {tp} moved the journal; nothing more was done here"
            ) from None
