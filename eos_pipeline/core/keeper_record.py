"""The record the keeper stores per (pipeline, sink, topic, partition), with no I/O.

One znode per topic-partition and sink holds *both* the sink's position and the fencing epoch, so
one compare-and-set on that znode's version moves them together: there is no window in which the
epoch was checked but the state changed (see :mod:`eos_pipeline.adapters.keeper`).

Value format (UTF-8 JSON, keys sorted, no spaces)::

    {"epoch": 4, "lease_id": "5f0c2a9d41b7e3c8", "phase": "AFTER", "range_end": 120,
     "range_start": 100, "topic_id": "WrerBLBuR-e7REEFg8SMLg",
     "updated_at": "2025-01-31T12:00:00.000Z", "v": 2, "writer": "host/1234/run-abc"}

* ``v`` is the format version. A reader refuses a version it does not know rather than guess.
  Version 1 had no ``topic_id``; it is still read (as ``topic_id: null``) and rewritten as 2.
* ``range_start`` / ``range_end`` are the half-open bounds of the last range the sink started
  (``BEFORE``) or finished (``AFTER``) writing; ``range_end`` is Kafka's exclusive next offset.
  All three of ``range_start``, ``range_end`` and ``phase`` are ``null`` until the first write:
  a record can exist only to hold the epoch of the writer that took the partition.
* ``epoch`` is the generation of the writer allowed to move the state (>= 1).
* ``lease_id`` is a random id drawn by each acquire. Epochs already tell writers apart; the id
  lets a writer that lost the answer to its own write recognise that write on re-read, even when
  another acquirer uses the same ``writer`` string.
* ``writer`` names that writer (``host/pid/run``), for people reading the keeper.
* ``topic_id`` is Kafka's id of the topic the position was read from (``null`` until known). A
  topic deleted and recreated under the same name gets a new id; offsets alone cannot tell the
  two logs apart once the new one has grown past the stored position.
* ``cluster`` (v3) is the alias of the Kafka cluster the position belongs to, for a pipeline
  configured with several clusters (MirrorMaker 2 failover); ``null`` for a single-cluster one.
  The key's path says it too (``.../<sink>/@<cluster>/<topic>/<partition>``): the same topic
  name holds different records on each cluster.
* ``mark`` (v3) identifies the last record written, so that its copy can be found on another
  cluster after a switch: ``{"fingerprint": ..., "last_offset": n, "window_end": null}`` when the
  record is at ``last_offset`` of this topic; with ``last_offset`` ``null`` a switch moved the
  position here and the copy of that record is still to be found in ``[range_end, window_end)``
  (``window_end`` ``null``: not bounded yet); the sink skips through it before writing.
  A record without these fields is written as version 2, byte for byte as before.
* ``updated_at`` is informational (UTC, milliseconds) and is never used to decide anything.

Which record (the key and its znode path, and the names that become path parts) is
:mod:`eos_pipeline.core.keeper_key`, re-exported here.

Parsing is strict: anything unexpected raises :class:`CorruptRecordError` naming the znode. A
corrupt record is never read as "no record", since that would restart the partition from scratch
and write its data again.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.errors import NeedsPerson
from eos_pipeline.core.keeper_key import (
    DEFAULT_ROOT,
    InvalidKeyError,
    KeeperKey,
    topic_path,
    validate_cluster,
    validate_name,
    validate_partition,
    validate_root,
    validate_topic,
)
from eos_pipeline.core.marks import Mark

FORMAT_VERSION = 3
#: Versions this code reads; version 1 is version 2 without ``topic_id``, and version 2 is
#: version 3 without ``cluster`` and ``mark`` (still written when both are null).
READABLE_VERSIONS = (1, 2, 3)
PHASES = tuple(phase.value for phase in Phase)  # one spelling: core.dedup.Phase
_MAX_WRITER_LEN = 512
_LEASE_ID_RE = re.compile(r"^[0-9a-f]{8,64}$")
_KEYS_V1 = frozenset(
    {"v", "epoch", "lease_id", "writer", "updated_at", "range_start", "range_end", "phase"},
)
_KEYS = {1: _KEYS_V1, 2: _KEYS_V1 | {"topic_id"}, 3: _KEYS_V1 | {"topic_id", "cluster", "mark"}}
# Kafka's topic ids are 16 bytes, printed in URL-safe base64 without padding (22 characters).
_TOPIC_ID_RE = re.compile(r"^[A-Za-z0-9_+/=-]{8,64}$")


class KeeperError(RuntimeError):
    """Base class of the keeper's errors."""


class CorruptRecordError(NeedsPerson, KeeperError):
    """A znode holds something that is not a valid keeper record."""

    code = "corrupt-record"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupt keeper record at {path}: {reason}")
        self.path = path
        self.reason = reason


def parse_partition_child(name: str, parent: str) -> int:
    """A child name under a topic node must be a canonical partition number."""
    if not name.isascii() or not name.isdigit() or str(int(name)) != name:
        raise CorruptRecordError(f"{parent}/{name}", "unexpected znode: not a partition number")
    return int(name)


def format_timestamp(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("updated_at must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{moment.microsecond // 1000:03d}Z"
    )


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_lease_id() -> str:
    return secrets.token_hex(8)


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class KeeperRecord:
    """The stored value: the sink's position and phase plus the fencing epoch.

    ``range_start``, ``range_end`` and ``phase`` are all ``None`` (no state written yet) or all
    set. Construction validates everything, so a record in memory is always encodable and a
    decoded record always satisfies the same rules. Equality ignores ``updated_at``: two records
    are equal when they say the same thing, which is what lost-response detection compares.
    """

    epoch: int
    lease_id: str
    writer: str
    updated_at: datetime = field(compare=False)
    range_start: int | None = None
    range_end: int | None = None
    phase: str | None = None
    topic_id: str | None = None
    cluster: str | None = None
    mark: Mark | None = None

    def __post_init__(self) -> None:
        _check_int("epoch", self.epoch, 1)
        if self.cluster is not None:
            validate_cluster(self.cluster)
        if self.mark is not None and not isinstance(self.mark, Mark):
            raise ValueError(f"mark must be a Mark, got {self.mark!r}")
        if not isinstance(self.lease_id, str) or not _LEASE_ID_RE.match(self.lease_id):
            raise ValueError(f"lease_id must be 8-64 lowercase hex digits, got {self.lease_id!r}")
        if not isinstance(self.writer, str) or not self.writer.strip():
            raise ValueError(f"writer must be a non-empty string, got {self.writer!r}")
        if len(self.writer) > _MAX_WRITER_LEN or not self.writer.isprintable():
            raise ValueError(f"writer must be printable and at most {_MAX_WRITER_LEN} chars")
        if self.topic_id is not None and (
            not isinstance(self.topic_id, str) or not _TOPIC_ID_RE.match(self.topic_id)
        ):
            raise ValueError(f"topic_id must be a Kafka topic id, got {self.topic_id!r}")
        if not isinstance(self.updated_at, datetime) or self.updated_at.tzinfo is None:
            raise ValueError(f"updated_at must be a timezone-aware datetime: {self.updated_at!r}")
        state = (self.range_start, self.range_end, self.phase)
        if state == (None, None, None):
            return
        if None in state:
            raise ValueError(
                f"range_start, range_end and phase are set together or not at all, got {state!r}"
            )
        start = _check_int("range_start", self.range_start, 0)
        end = _check_int("range_end", self.range_end, 0)
        if end < start:
            raise ValueError(f"range_end {end} is below range_start {start}")
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {self.phase!r}")
        mark = self.mark
        if mark is not None and mark.last_offset is not None and mark.last_offset >= end:
            raise ValueError(f"mark.last_offset {mark.last_offset} is not below range_end {end}")
        if mark is not None and mark.window_end is not None and mark.window_end < end:
            raise ValueError(f"mark.window_end {mark.window_end} is below range_end {end}")

    @property
    def has_state(self) -> bool:
        """False for a record that only holds an epoch (the partition was taken, never written)."""
        return self.phase is not None

    def with_state(
        self,
        range_start: int,
        range_end: int,
        phase: str,
        updated_at: datetime,
        topic_id: str | None = None,
        *,
        cluster: str | None = None,
        mark: Mark | None = None,
        replace_mark: bool = False,
    ) -> KeeperRecord:
        """The record moved to a new state; ``None`` keeps the stored id, cluster and mark.

        ``replace_mark`` stores ``mark`` even when it is None (a switch overwrites a position).
        """
        return replace(
            self,
            range_start=range_start,
            range_end=range_end,
            phase=phase,
            updated_at=updated_at,
            topic_id=topic_id if topic_id is not None else self.topic_id,
            cluster=cluster if cluster is not None else self.cluster,
            mark=mark if mark is not None or replace_mark else self.mark,
        )

    def taken_over(self, lease_id: str, writer: str, updated_at: datetime) -> KeeperRecord:
        """The same state under the next epoch, owned by a new lease."""
        return replace(
            self, epoch=self.epoch + 1, lease_id=lease_id, writer=writer, updated_at=updated_at
        )

    def to_json(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.cluster is not None or self.mark is not None:
            extra = {
                "cluster": self.cluster,
                "mark": None if self.mark is None else self.mark.to_json(),
            }
        return {
            "v": FORMAT_VERSION if extra else 2,
            **extra,
            "epoch": self.epoch,
            "lease_id": self.lease_id,
            "writer": self.writer,
            "updated_at": format_timestamp(self.updated_at),
            "range_start": self.range_start,
            "range_end": self.range_end,
            "phase": self.phase,
            "topic_id": self.topic_id,
        }

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | None, path: str) -> KeeperRecord:
        """Parse a znode's bytes; ``path`` only names the znode in errors."""
        if not data:
            raise CorruptRecordError(path, "the znode is empty (not written by eos_pipeline?)")
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptRecordError(path, f"not UTF-8 JSON ({exc}): {data[:80]!r}") from None
        if not isinstance(obj, dict):
            raise CorruptRecordError(path, f"expected a JSON object, got {type(obj).__name__}")
        version = obj.get("v")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise CorruptRecordError(
                path,
                f"unknown format version v={version!r} (this code reads v in "
                f"{READABLE_VERSIONS}); was it written by a newer eos_pipeline?",
            )
        keys = _KEYS[version]
        if set(obj) != keys:
            missing = sorted(keys - set(obj))
            extra = sorted(set(obj) - keys)
            raise CorruptRecordError(path, f"missing keys {missing}, unexpected keys {extra}")
        try:
            stamp = obj["updated_at"]
            if not isinstance(stamp, str) or not stamp.endswith("Z"):
                raise ValueError(f"updated_at must be an ISO 8601 UTC string, got {stamp!r}")
            return cls(
                epoch=obj["epoch"],
                lease_id=obj["lease_id"],
                writer=obj["writer"],
                updated_at=datetime.fromisoformat(stamp),
                range_start=obj["range_start"],
                range_end=obj["range_end"],
                phase=obj["phase"],
                topic_id=obj.get("topic_id"),
                cluster=obj.get("cluster"),
                mark=Mark.from_json(obj.get("mark")),
            )
        except ValueError as exc:
            raise CorruptRecordError(path, str(exc)) from None


@dataclass(frozen=True, slots=True)
class VersionedRecord:
    """A record as read, with the znode version a compare-and-set must name."""

    record: KeeperRecord
    version: int


__all__ = [
    "DEFAULT_ROOT",
    "FORMAT_VERSION",
    "PHASES",
    "READABLE_VERSIONS",
    "CorruptRecordError",
    "InvalidKeyError",
    "KeeperError",
    "KeeperKey",
    "KeeperRecord",
    "Mark",
    "VersionedRecord",
    "format_timestamp",
    "new_lease_id",
    "parse_partition_child",
    "topic_path",
    "utc_now",
    "validate_cluster",
    "validate_name",
    "validate_partition",
    "validate_root",
    "validate_topic",
]
