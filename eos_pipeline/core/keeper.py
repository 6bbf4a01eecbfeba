"""The keeper record and its rules, pure (the I/O is :mod:`eos_pipeline.adapters.keeper`): which
record (:class:`KeeperKey`, every name checked on the way in, as it becomes a znode path part),
what it holds (:class:`KeeperRecord`) and how a writer moves it (:class:`Lease`, one
compare-and-set per write).

One znode per (pipeline, sink, topic, partition) holds *both* the position and the epoch, so one
CAS on its version moves them together: no window between checking the epoch and changing the
state. Value (UTF-8 JSON, keys sorted, no spaces)::

    {"epoch": 4, "lease_id": "5f0c2a9d41b7e3c8", "phase": "AFTER", "range_end": 120,
     "range_start": 100, "topic_id": "WrerBLBuR-e7REEFg8SMLg",
     "updated_at": "2025-01-31T12:00:00.000Z", "v": 2, "writer": "host/1234/run-abc"}

* ``v``: format version; an unknown one is refused, not guessed (v1, without ``topic_id``, is
  read as ``null`` and rewritten as v2; a record without v3's fields is written as v2, byte for
  byte as before).
* ``range_start``/``range_end``/``phase``: the half-open range last started (``BEFORE``) or
  finished (``AFTER``); all ``null`` while the record only holds an acquirer's epoch.
* ``epoch``: generation of the writer allowed to move the state; ``lease_id``: drawn per acquire,
  so a writer that lost its answer recognises its own write on re-read; ``writer``: for people.
* ``topic_id``: Kafka's id of the topic read from; offsets alone cannot tell a recreated topic
  from the old one once it has grown past the stored position.
* ``cluster`` (v3): the alias the position belongs to (also in the path, ``@<cluster>``);
  ``mark`` (v3): the fingerprint of the last record written at ``last_offset``, or, after a
  switch moved the position here, *pending* (``last_offset`` ``null``) until the sink finds its
  copy in ``[range_end, window_end)`` and skips through it.
* ``updated_at``: informational, never used to decide.

Parsing is strict (:class:`CorruptRecordError`): a corrupt record read as "no record" would
restart the partition and write its data again. Every store builds its write with
:meth:`Lease.next_record`, CASes it, and when the answer is lost or refused re-reads and asks
:func:`write_outcome` whether it landed, may be resent, or lost (:func:`refusal` names the error).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.errors import NeedsPerson
from eos_pipeline.core.offsets import TopicPartition

DEFAULT_ROOT = "/eos_pipeline"

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_CLUSTER_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class InvalidKeyError(NeedsPerson, ValueError):
    """A pipeline, sink, topic, partition or root cannot be used as a znode path part."""

    code = "invalid-key"


def validate_name(field_name: str, value: object) -> str:
    """A pipeline, sink or root component: no separators, no relative parts."""
    if not isinstance(value, str):
        raise InvalidKeyError(f"{field_name} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidKeyError(f"{field_name} must not be empty")
    if "/" in value:
        raise InvalidKeyError(f"{field_name} {value!r} must not contain '/'")
    if ".." in value or value == ".":
        raise InvalidKeyError(f"{field_name} {value!r} must not be '.' or contain '..'")
    if not _NAME_RE.match(value):
        raise InvalidKeyError(f"{field_name} {value!r} must be 1-200 of [A-Za-z0-9_.-]")
    return value


def validate_topic(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidKeyError(f"topic must be a string, got {type(value).__name__}")
    try:
        TopicPartition(value, 0)
    except ValueError as exc:
        raise InvalidKeyError(f"topic: {exc}") from None
    return value


def validate_partition(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidKeyError(f"partition must be an int, got {type(value).__name__}")
    if not 0 <= value < 2**31:
        raise InvalidKeyError(f"partition must be in [0, 2**31), got {value}")
    return value


def validate_root(root: object) -> str:
    """The znode root every record lives under: absolute, outside ZooKeeper's own tree."""
    if not isinstance(root, str) or not root.startswith("/"):
        raise InvalidKeyError(f"root must be an absolute znode path like {DEFAULT_ROOT!r}")
    parts = root.strip("/").split("/")
    if parts == [""]:
        raise InvalidKeyError("root must not be '/': give it a name like '/eos_pipeline'")
    for part in parts:
        validate_name("root", part)
    if parts[0] == "zookeeper":
        raise InvalidKeyError("root must not be under /zookeeper, ZooKeeper's reserved tree")
    return "/" + "/".join(parts)


@dataclass(frozen=True, order=True, slots=True)
class KeeperKey:
    """Which record; ``cluster`` only for a pipeline with several clusters."""

    pipeline: str
    sink: str
    topic: str
    partition: int
    cluster: str | None = None

    def __post_init__(self) -> None:
        validate_name("pipeline", self.pipeline)
        validate_name("sink", self.sink)
        validate_topic(self.topic)
        validate_partition(self.partition)
        if self.cluster is not None:
            validate_cluster(self.cluster)

    @classmethod
    def of(
        cls, pipeline: str, sink: str, tp: TopicPartition, cluster: str | None = None
    ) -> KeeperKey:
        return cls(pipeline, sink, tp.topic, tp.partition, cluster)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def path(self, root: str = DEFAULT_ROOT) -> str:
        """``<root>/<pipeline>/<sink>[/@<cluster>]/<topic>/<partition>``."""
        parent = topic_path(root, self.pipeline, self.sink, self.topic, self.cluster)
        return f"{parent}/{self.partition}"

    def __str__(self) -> str:
        where = f"@{self.cluster}:" if self.cluster else ""
        return f"{self.pipeline}/{self.sink}/{where}{self.topic}[{self.partition}]"


def validate_cluster(value: object) -> str:
    """No ``.``: MM2's separator in topic names."""
    if not isinstance(value, str) or not _CLUSTER_RE.match(value):
        raise InvalidKeyError(f"cluster alias {value!r} must be 1-64 of [A-Za-z0-9_-]")
    return value


def topic_path(root: str, pipeline: str, sink: str, topic: str, cluster: str | None = None) -> str:
    """The parent of a topic's partition records; no topic name holds ``@``, so the layouts with
    and without clusters never meet."""
    parts = [validate_root(root), validate_name("pipeline", pipeline), validate_name("sink", sink)]
    if cluster is not None:
        parts.append("@" + validate_cluster(cluster))
    parts.append(validate_topic(topic))
    return "/".join(parts)


_FINGERPRINT_RE = re.compile(r"^[0-9a-f]{32}$")
_REQUIRED = frozenset({"fingerprint", "last_offset", "window_end"})
_OPTIONAL = frozenset({"timestamp_ms"})


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Mark:
    """Which record the position stands after, by a fingerprint MirrorMaker 2 preserves.
    ``last_offset`` None (*pending*): its copy is still to be found in ``[range_end, window_end)``
    (None: unbounded). ``timestamp_ms`` (MM2 keeps it) lets a switch start the re-read later."""

    fingerprint: str
    last_offset: int | None = None
    window_end: int | None = None
    timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.fingerprint, str) or not _FINGERPRINT_RE.match(self.fingerprint):
            raise ValueError(f"fingerprint must be 32 lowercase hex digits: {self.fingerprint!r}")
        if self.last_offset is not None:
            _check_int("mark.last_offset", self.last_offset, 0)
            if self.window_end is not None:
                raise ValueError("a located mark (last_offset set) has no window")
        if self.window_end is not None:
            _check_int("mark.window_end", self.window_end, 0)
        if self.timestamp_ms is not None:
            _check_int("mark.timestamp_ms", self.timestamp_ms, 0)

    @property
    def pending(self) -> bool:
        return self.last_offset is None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "fingerprint": self.fingerprint,
            "last_offset": self.last_offset,
            "window_end": self.window_end,
        }
        if self.timestamp_ms is not None:  # a mark without one keeps the format it always had
            body["timestamp_ms"] = self.timestamp_ms
        return body

    @classmethod
    def from_json(cls, raw: object) -> Mark | None:
        if raw is None:
            return None
        if not isinstance(raw, dict) or not _REQUIRED <= set(raw) <= _REQUIRED | _OPTIONAL:
            raise ValueError(
                "mark must be an object with fingerprint, last_offset, window_end "
                "(and optionally timestamp_ms)"
            )
        return cls(
            raw["fingerprint"], raw["last_offset"], raw["window_end"], raw.get("timestamp_ms")
        )

    @classmethod
    def of_record(cls, fingerprint: str, offset: int, timestamp_ms: int | None) -> Mark:
        """Kafka's timestamp -1 (none) is not kept."""
        ts = timestamp_ms if timestamp_ms is not None and timestamp_ms >= 0 else None
        return cls(fingerprint, offset, None, ts)


FORMAT_VERSION = 3
#: Versions this code reads; version 1 is version 2 without ``topic_id``, and version 2 is
#: version 3 without ``cluster`` and ``mark`` (still written when both are null).
READABLE_VERSIONS = (1, 2, 3)
PHASES = tuple(phase.value for phase in Phase)  # one spelling: core.dedup.Phase
_MAX_WRITER_LEN = 512
_LEASE_ID_RE = re.compile(r"^[0-9a-f]{8,64}$")
_KEYS_V1 = frozenset(
    {"v", "epoch", "lease_id", "writer", "updated_at", "range_start", "range_end", "phase"}
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
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_lease_id() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class KeeperRecord:
    """The stored value: the sink's position and phase plus the fencing epoch. ``range_start``,
    ``range_end`` and ``phase`` are all None (no state yet) or all set; construction validates
    everything, so any record in memory encodes and any decoded one obeys the same rules. Equality
    ignores ``updated_at``, as lost-response detection needs.
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
        """False for a record that only holds an epoch (taken, never written)."""
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
        """``None`` keeps the stored id, cluster and mark; ``replace_mark`` stores ``mark`` even
        when None (a switch overwrites a position)."""
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


WriteOutcome = Literal["landed", "resend", "lost"]


class FencedError(NeedsPerson, KeeperError):
    """A newer writer took the partition: this lease may never move the state again."""

    code = "fenced"


class ConflictError(NeedsPerson, KeeperError):
    """The znode changed in a way this writer did not expect, so nothing was written."""

    code = "keeper-conflict"


@dataclass
class Lease:
    """The right to move one partition's state until someone acquires it again; ``version`` and
    ``record``: the znode's version and value after its last write or acquire."""

    key: KeeperKey
    epoch: int
    writer: str
    version: int
    record: KeeperRecord

    def next_record(
        self,
        range_start: int,
        range_end: int,
        phase: str,
        now: datetime,
        *,
        topic_id: str | None = None,
        mark: Mark | None = None,
        replace_mark: bool = False,
    ) -> KeeperRecord:
        """What a write through this lease stores: every store CASes exactly this."""
        intended = self.record.with_state(
            range_start,
            range_end,
            phase,
            now,
            topic_id,
            cluster=self.key.cluster,
            mark=mark,
            replace_mark=replace_mark,
        )
        if intended.epoch != self.epoch or intended.writer != self.writer:
            raise ValueError(f"lease for {self.key} does not match its own record")
        return intended


def write_outcome(
    intended: KeeperRecord, expected_version: int | None, current: VersionedRecord | None
) -> WriteOutcome:
    """After an uncertain or refused write: ``"landed"``, ``"resend"`` or ``"lost"``."""
    if current is not None and current.record == intended:
        return "landed"
    unchanged = (
        current is None
        if expected_version is None
        else (current is not None and current.version == expected_version)
    )
    return "resend" if unchanged else "lost"


def refusal(lease: Lease, current: VersionedRecord | None, path: str) -> KeeperError:
    """Why a write through ``lease`` did not land, given what the znode holds now."""
    if current is None:
        return ConflictError(
            f"conflict: the record of {lease.key} at {path} was deleted while epoch "
            f"{lease.epoch} held it; nothing written"
        )
    stored = current.record
    if stored.epoch > lease.epoch:
        return FencedError(
            f"fenced: writer epoch {lease.epoch} < current epoch {stored.epoch} for {lease.key} "
            f"(taken over by {stored.writer!r})"
        )
    return ConflictError(
        f"conflict: the record of {lease.key} at {path} changed under epoch {lease.epoch} "
        f"(expected version {lease.version}, found version {current.version} with epoch "
        f"{stored.epoch} by {stored.writer!r}); is the same lease used twice? nothing written"
    )
