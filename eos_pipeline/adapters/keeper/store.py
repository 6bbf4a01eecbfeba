"""The ZooKeeper (or ClickHouse Keeper) state store through kazoo; see the package docstring
for the layout, the compare-and-set fencing and how lost answers are settled."""

from __future__ import annotations

import logging
import random
import time
import warnings
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

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

from eos_pipeline.adapters.keeper.settings import (
    KeeperAuthError,
    KeeperSettings,
    KeeperUnavailableError,
    default_writer_id,
)
from eos_pipeline.core.keeper import (
    ConflictError,
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
    write_outcome,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors after which a request may or may not have been applied by the server.
_OUTCOME_UNKNOWN = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


class KeeperStateStore:
    """The :class:`StateStore` on ZooKeeper (or ClickHouse Keeper) through kazoo.

    Use as a context manager, or call :meth:`start` and :meth:`close`. ``client_factory`` builds
    the kazoo client from keyword arguments; tests pass a subclass that injects faults.
    """

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

    # ------------------------------------------------------------------------------ lifecycle

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

    # ------------------------------------------------------------------------------ plumbing

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
        """CAS ``intended`` at ``path``: create when ``expected_version`` is None, else set.

        Returns ``(stored, None)`` when the record is now stored (including a lost-response write
        found on re-read), or ``(None, current)`` when someone else changed the znode first.
        """
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

    # ------------------------------------------------------------------------------ API

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
        """Take the partition: bump its epoch by CAS, fencing every earlier lease.

        The newest acquirer always wins: when another acquire bumps the epoch first, this one
        backs off and bumps again, giving up with :class:`ConflictError` only after
        ``operation_timeout_s`` of constant contention (a scheduling bug: one run per partition).
        The state stored before is kept unchanged and is available as ``lease.record``.
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
                stored, _ = self._put(path, intended, None)
            else:
                intended = current.record.taken_over(lease_id, writer, now)
                stored, _ = self._put(path, intended, current.version)
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
        *,
        topic_id: str | None = None,
        mark: Mark | None = None,
        replace_mark: bool = False,
    ) -> VersionedRecord:
        """Store ``[range_start, range_end)`` in ``phase`` if ``lease`` still holds the partition.

        Raises :class:`FencedError` when a newer epoch holds it and :class:`ConflictError` on any
        other unexpected change; neither writes anything.
        """
        path = self.path(lease.key)
        intended = lease.next_record(
            range_start,
            range_end,
            phase,
            self._clock(),
            topic_id=topic_id,
            mark=mark,
            replace_mark=replace_mark,
        )
        stored, current = self._put(path, intended, lease.version)
        if stored is None:
            raise refusal(lease, current, path)
        lease.version, lease.record = stored.version, stored.record
        return stored


__all__ = ["KeeperStateStore"]
