"""Topic-partitions and offset ranges. Every range is half-open, ``[start, end)``, as Kafka's:
``end`` is the *next* offset to read. A range is about positions, not records: ``[10, 20)`` may
hold ten records, three (markers, aborted or compacted records) or none, and still moves the
position to 20.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Kafka's own rule for topic names: ASCII letters, digits, '.', '_' and '-', at most 249 chars.
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __post_init__(self) -> None:
        if not _TOPIC_RE.match(self.topic) or self.topic in (".", ".."):
            raise ValueError(
                f"invalid Kafka topic name {self.topic!r}: use 1-249 of [A-Za-z0-9._-]"
            )
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition} for {self.topic!r}")

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True, order=True, slots=True)
class OffsetRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one topic-partition."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range [{self.start}, {self.end})")

    @property
    def is_empty(self) -> bool:
        return self.start == self.end

    @property
    def width(self) -> int:
        """Number of offset positions covered (an upper bound on the record count)."""
        return self.end - self.start

    def __contains__(self, offset: object) -> bool:
        return isinstance(offset, int) and self.start <= offset < self.end

    def __str__(self) -> str:
        return f"[{self.start}, {self.end})"
