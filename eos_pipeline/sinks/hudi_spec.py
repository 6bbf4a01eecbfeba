"""What one Hudi transaction is: the table it writes, its plan, and the report of what it did.

Kept apart from the loop (:mod:`eos_pipeline.sinks.hudi`, which re-exports these names) so the
replay, the clustered sink and the Dagster layer share one definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from eos_pipeline.adapters.hudi import (
    DEFAULT_ORDERING_FIELD,
    SOURCE_KEY_FIELDS,
    CommitInfo,
    TableType,
)
from eos_pipeline.core.checkpoint import Checkpoint
from eos_pipeline.core.errors import LogChanged
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import (
    DEFAULT_BULK_INSERT_MIN_RECORDS,
    ConfiguredOperation,
    WriteOperation,
)
from eos_pipeline.core.schema import TableSchema


class HudiSinkError(RuntimeError):
    """A transaction cannot be planned or committed without losing or repeating records."""


class HudiLogChanged(LogChanged, HudiSinkError):
    """The table's position is not from the log Kafka holds now; nothing was read."""


@dataclass(frozen=True)
class HudiTableSpec:
    """Where one pipeline writes in Hudi, how the table is keyed, and how big a transaction gets."""

    pipeline: str
    topic: str
    table_path: str
    table_name: str
    schema: TableSchema
    table_type: TableType = "COPY_ON_WRITE"
    record_key_fields: tuple[str, ...] = SOURCE_KEY_FIELDS
    ordering_field: str | None = DEFAULT_ORDERING_FIELD
    partition_fields: tuple[str, ...] = ()
    #: ``auto``: ``bulk_insert`` for a transaction of at least ``bulk_insert_min_records``
    #: planned records, ``upsert`` below (:mod:`eos_pipeline.core.planning`).
    operation: ConfiguredOperation = "auto"
    bulk_insert_min_records: int = DEFAULT_BULK_INSERT_MIN_RECORDS
    max_records_per_partition: int = 1_000_000
    reset: Literal["earliest", "latest"] = "earliest"
    hudi_options: Mapping[str, str] = field(default_factory=dict)
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    #: Largest key + value (bytes) stored as a row; a bigger record is dead-lettered as
    #: ``Oversized`` and the partition goes on. None: no limit.
    max_record_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_records_per_partition < 1:
            raise ValueError("max_records_per_partition must be at least 1")
        if self.bulk_insert_min_records < 1:
            raise ValueError("bulk_insert_min_records must be at least 1")
        if self.max_record_bytes is not None and self.max_record_bytes < 1:
            raise ValueError("max_record_bytes must be at least 1 (or None for no limit)")
        if self.reset not in ("earliest", "latest"):
            raise ValueError(f"reset must be 'earliest' or 'latest', got {self.reset!r}")


@dataclass(frozen=True)
class HudiPlan:
    """One transaction, fixed before anything is read: ranges in, checkpoint out."""

    previous: CommitInfo | None
    start: Checkpoint  # position of every partition before (stored, or from the reset policy)
    ranges: dict[TopicPartition, OffsetRange]  # the partitions of this transaction
    checkpoint: Checkpoint  # position of every partition after the commit
    end_offsets: Checkpoint  # Kafka's last stable offsets when the plan was made
    topic_id: str | None = None  # Kafka's id of the topic, stored next to the checkpoint

    @property
    def has_work(self) -> bool:
        """A commit is due if records are to be read or a position is recorded for the first time.

        The second case matters for ``reset="latest"``: the first commit pins where the table
        starts, otherwise every run would start at the then-latest offset and skip the records
        produced in between.
        """
        stored = self.previous.checkpoint if self.previous else {}
        return any(not r.is_empty for r in self.ranges.values()) or self.checkpoint != stored

    @property
    def partition_count(self) -> int:
        """Partitions the checkpoint must name (all of the topic's)."""
        return len(self.end_offsets)


@dataclass
class HudiReport:
    """What one transaction did (becomes Dagster metadata)."""

    instant_time: str | None
    ranges: dict[TopicPartition, OffsetRange]
    checkpoint_before: Checkpoint | None
    checkpoint_after: Checkpoint
    end_offsets: Checkpoint
    records_read: dict[TopicPartition, int] = field(default_factory=dict)
    rows_written: dict[TopicPartition, int] = field(default_factory=dict)
    dead_letters: dict[TopicPartition, int] = field(default_factory=dict)
    seconds: float = 0.0
    #: Cluster read, for a pipeline with several (None otherwise); records re-read and skipped
    #: to resume exactly after a switch.
    cluster: str | None = None
    reread: int = 0
    skipped: int = 0
    #: Hudi operation of the commit (``auto`` resolved); None without a commit.
    operation: WriteOperation | None = None

    @property
    def total_records_read(self) -> int:
        return sum(self.records_read.values())

    @property
    def total_rows_written(self) -> int:
        return sum(self.rows_written.values())

    @property
    def total_dead_letters(self) -> int:
        return sum(self.dead_letters.values())

    @property
    def lag_after(self) -> dict[TopicPartition, int]:
        return {tp: end - self.checkpoint_after[tp] for tp, end in self.end_offsets.items()}


__all__ = ["HudiPlan", "HudiReport", "HudiSinkError", "HudiTableSpec"]
