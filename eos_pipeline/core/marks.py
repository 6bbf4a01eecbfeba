"""Which record a stored position stands after, by an identity MirrorMaker 2 preserves.

A sink keeps, with its position, the fingerprint of the last record it wrote
(:func:`eos_pipeline.core.failover.record_fingerprint`); after a switch to another cluster the
mark is *pending* until the sink finds that record's copy and skips through it. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_FINGERPRINT_RE = re.compile(r"^[0-9a-f]{32}$")
_REQUIRED = frozenset({"fingerprint", "last_offset", "window_end"})
_OPTIONAL = frozenset({"timestamp_ms"})


def _check_offset(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Mark:
    """Which record the position stands after, by a fingerprint MirrorMaker 2 preserves.

    ``last_offset`` set: the record at that offset of this topic. ``None``: the record was
    written from another cluster; its copy here is in ``[range_end, window_end)`` and still to
    be found (``window_end`` None: no bound known yet).

    ``timestamp_ms`` is that record's timestamp (MM2 copies it unchanged), kept so that a switch
    can ask the other cluster for the first offset at that time: a tighter start of the re-read
    window than the offset syncs give (``core.failover.bounds``). None in marks stored before
    it was kept (and for a record without a timestamp): the syncs alone bound the window then.
    """

    fingerprint: str
    last_offset: int | None = None
    window_end: int | None = None
    timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.fingerprint, str) or not _FINGERPRINT_RE.match(self.fingerprint):
            raise ValueError(f"fingerprint must be 32 lowercase hex digits: {self.fingerprint!r}")
        if self.last_offset is not None:
            _check_offset("mark.last_offset", self.last_offset)
            if self.window_end is not None:
                raise ValueError("a located mark (last_offset set) has no window")
        if self.window_end is not None:
            _check_offset("mark.window_end", self.window_end)
        if self.timestamp_ms is not None:
            _check_offset("mark.timestamp_ms", self.timestamp_ms)

    @property
    def pending(self) -> bool:
        """True while the marked record's copy is still to be found (after a switch)."""
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
        """The located mark of a record just written (Kafka's timestamp -1, none, is not kept)."""
        ts = timestamp_ms if timestamp_ms is not None and timestamp_ms >= 0 else None
        return cls(fingerprint, offset, None, ts)
