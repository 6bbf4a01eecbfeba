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


def _check_offset(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Mark:
    """Which record the position stands after, by a fingerprint MirrorMaker 2 preserves.

    ``last_offset`` set: the record at that offset of this topic. ``None``: the record was
    written from another cluster; its copy here is in ``[range_end, window_end)`` and still to
    be found (``window_end`` None: no bound known yet).
    """

    fingerprint: str
    last_offset: int | None = None
    window_end: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.fingerprint, str) or not _FINGERPRINT_RE.match(self.fingerprint):
            raise ValueError(f"fingerprint must be 32 lowercase hex digits: {self.fingerprint!r}")
        if self.last_offset is not None:
            _check_offset("mark.last_offset", self.last_offset)
            if self.window_end is not None:
                raise ValueError("a located mark (last_offset set) has no window")
        if self.window_end is not None:
            _check_offset("mark.window_end", self.window_end)

    @property
    def pending(self) -> bool:
        """True while the marked record's copy is still to be found (after a switch)."""
        return self.last_offset is None

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "last_offset": self.last_offset,
            "window_end": self.window_end,
        }

    @classmethod
    def from_json(cls, raw: object) -> Mark | None:
        if raw is None:
            return None
        if not isinstance(raw, dict) or set(raw) != {"fingerprint", "last_offset", "window_end"}:
            raise ValueError("mark must be an object with fingerprint, last_offset, window_end")
        return cls(raw["fingerprint"], raw["last_offset"], raw["window_end"])
