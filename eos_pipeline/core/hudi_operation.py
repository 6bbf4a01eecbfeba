"""Which Hudi write operation one transaction uses: a pure rule over the configured operation and
the size of the plan.

Exactly once into Hudi does not rest on upsert's de-duplication: the Kafka checkpoint inside the
commit and the fence decide what is written, and a record key that holds the source coordinates
(topic, partition, offset) never repeats, within a plan or across plans. So ``auto`` lets a large
transaction (a backlog, a backfill) take ``bulk_insert``, which skips the index lookup, the
workload profile and the rewrite of small base files, while small steady-state transactions keep
``upsert``, whose small-file handling merges their records into the table's existing files
instead of adding a small file per commit. A table keyed otherwise (a business key, where upsert
keeps the latest row per key) always upserts under ``auto``: bulk_insert would keep every row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from eos_pipeline.core.offsets import OffsetRange

__all__ = [
    "AUTO_STEADY_OPERATION",
    "DEFAULT_BULK_INSERT_MIN_RECORDS",
    "ConfiguredOperation",
    "WriteOperation",
    "planned_records",
    "transaction_operation",
]

#: An operation Hudi runs for one data commit.
WriteOperation = Literal["upsert", "insert", "bulk_insert"]
#: What a pipeline configures: one of those, or ``auto`` (chosen per transaction).
ConfiguredOperation = Literal["upsert", "insert", "bulk_insert", "auto"]

#: ``auto``'s operation below the threshold: upsert keeps merging records into small files.
AUTO_STEADY_OPERATION: Final[WriteOperation] = "upsert"
#: ``auto``'s threshold: from this many planned records on, a transaction bulk-inserts. At
#: 100,000 records bulk_insert used half of upsert's CPU (benchmarks/README.md, issue 14); below
#: some ten thousand records a run's fixed costs dominate either way, and a bulk insert adds a
#: file per Kafka partition that later upserts must fill. A judgement, not a measured crossover.
DEFAULT_BULK_INSERT_MIN_RECORDS: Final = 20_000


def planned_records(ranges: Iterable[OffsetRange]) -> int:
    """Upper bound on the records of a plan: the sum of its ranges' widths.

    Known before anything is read; gaps (transaction markers, compaction) only make it high.
    """
    return sum(r.width for r in ranges)


def transaction_operation(
    configured: ConfiguredOperation,
    planned: int,
    *,
    bulk_insert_min_records: int = DEFAULT_BULK_INSERT_MIN_RECORDS,
    unique_keys: bool = True,
) -> WriteOperation:
    """The operation of a transaction of ``planned`` records (at most) under ``configured``.

    A fixed operation is kept as configured; ``auto`` takes ``bulk_insert`` from
    ``bulk_insert_min_records`` planned records on, and :data:`AUTO_STEADY_OPERATION` below or
    when the record key does not hold the source coordinates (``unique_keys`` false).
    """
    if bulk_insert_min_records < 1:
        raise ValueError(f"bulk_insert_min_records must be at least 1: {bulk_insert_min_records}")
    if planned < 0:
        raise ValueError(f"planned records cannot be negative: {planned}")
    if configured == "auto":
        large = unique_keys and planned >= bulk_insert_min_records
        return "bulk_insert" if large else AUTO_STEADY_OPERATION
    if configured not in ("upsert", "insert", "bulk_insert"):
        raise ValueError(f"operation must be upsert, insert, bulk_insert or auto: {configured!r}")
    return configured
