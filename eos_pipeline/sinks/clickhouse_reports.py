"""What the ClickHouse sink is told (its table spec) and what it reports (per batch, per run),
and how a keeper record reads as the sink's state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.keeper import KeeperRecord
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema


@dataclass(frozen=True)
class ClickHouseTableSpec:
    """Where one pipeline writes, and how big a batch may get."""

    pipeline: str
    database: str
    table: str
    schema: TableSchema
    sink: str = "clickhouse"
    max_records: int = 100_000
    max_bytes: int = 64 * 1024 * 1024
    reset: Literal["earliest", "latest"] = "earliest"
    #: Key + value bytes above which a record is dead-lettered as ``Oversized`` (None: no limit).
    max_record_bytes: int | None = None
    #: Who parses the JSON values (``clickhouse.json_parser``): ``auto`` lets ClickHouse parse
    #: them where :func:`eos_pipeline.core.decode.native_plan` vouches for the schema and
    #: the sink is chDB, ``native`` requires that, ``arrow`` never lets it.
    json_parser: Literal["auto", "native", "arrow"] = "auto"


@dataclass
class BatchReport:
    case: str
    batch: OffsetRange
    steps: list[OffsetRange] = field(default_factory=list)
    skipped: list[OffsetRange] = field(default_factory=list)
    cropped: OffsetRange | None = None
    records_read: int = 0
    rows_sent: int = 0
    dead_letters: int = 0
    seconds: float = 0.0


@dataclass
class SyncReport:
    """What one run did for one topic-partition (becomes Dagster metadata)."""

    tp: TopicPartition
    epoch: int
    start: int
    target_end: int
    end: int = 0
    batches: list[BatchReport] = field(default_factory=list)
    #: Cluster alias read from (None: single-cluster pipeline).
    cluster: str | None = None
    #: After a switch: records read again to find the last written one, and how many of them
    #: were skipped as already written (see :mod:`eos_pipeline.sinks.resume`).
    reread: int = 0
    skipped: int = 0

    @property
    def records_read(self) -> int:
        return sum(b.records_read for b in self.batches)

    @property
    def rows_sent(self) -> int:
        return sum(b.rows_sent for b in self.batches)

    @property
    def dead_letters(self) -> int:
        return sum(b.dead_letters for b in self.batches)

    @property
    def cases(self) -> list[str]:
        return [b.case for b in self.batches]


def case_summary(cases: list[str]) -> str:
    """The cases of a run's batches in order, a repeat shown once with its count (a run that
    followed the stream steps a partition many times)."""
    parts: list[tuple[str, int]] = []
    for case in cases:
        if parts and parts[-1][0] == case:
            parts[-1] = (case, parts[-1][1] + 1)
        else:
            parts.append((case, 1))
    return ", ".join(case if n == 1 else f"{case} x{n}" for case, n in parts)


def state_of(record: KeeperRecord | None) -> SinkState | None:
    """The sink state a keeper record holds, or None before its first write."""
    if record is None or not record.has_state:
        return None
    assert record.range_start is not None and record.range_end is not None
    return SinkState(OffsetRange(record.range_start, record.range_end), Phase(record.phase))


__all__ = ["BatchReport", "ClickHouseTableSpec", "SyncReport", "case_summary", "state_of"]
