"""How to reach the keeper, its errors, and the interface a sink needs from a store."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from kazoo.security import ACL, OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from eos_pipeline.core.keeper import (
    DEFAULT_ROOT,
    KeeperError,
    KeeperKey,
    Lease,
    Mark,
    VersionedRecord,
    validate_root,
)


class KeeperUnavailableError(KeeperError):
    """ZooKeeper could not be reached, or did not answer within the configured time."""


class KeeperAuthError(KeeperError):
    """The znode's ACL refuses this client (missing or wrong digest credentials)."""


def default_writer_id(run_id: str | None = None) -> str:
    """``host/pid/run``: who holds a lease, for humans; a random suffix stands in for a run id."""
    return f"{socket.gethostname()}/{os.getpid()}/{run_id or uuid.uuid4().hex[:12]}"


class StateStore(Protocol):
    """What a sink needs from the keeper; the ZooKeeper store and the unit-test store share it."""

    def read(self, key: KeeperKey) -> VersionedRecord | None: ...

    def read_many(
        self, pipeline: str, sink: str, topic: str, cluster: str | None = None
    ) -> dict[int, VersionedRecord]: ...

    def list_partitions(
        self, pipeline: str, sink: str, topic: str, cluster: str | None = None
    ) -> list[int]: ...

    def acquire(self, key: KeeperKey, *, writer: str | None = None) -> Lease: ...

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
    ) -> VersionedRecord: ...


@dataclass(frozen=True)
class KeeperSettings:
    """How to reach the keeper. ``hosts`` may end in a chroot: ``h1:2181,h2:2181/chroot``.

    ``auth=(user, password)`` logs in with ZooKeeper digest auth and creates every znode with a
    digest ACL giving that user all permissions (plus read for anyone if ``world_readable``).
    The password never appears in ``repr`` or in logs.
    """

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


__all__ = [
    "KeeperAuthError",
    "KeeperSettings",
    "KeeperUnavailableError",
    "StateStore",
    "default_writer_id",
]
