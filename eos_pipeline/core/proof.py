"""The exactly-once proof for one topic-partition, on the data (what the asset checks decide).

Over the committed range ``[start, position)`` of a sink, the offsets Kafka holds there
(read_committed) minus the ones sent to the dead-letter topic must appear in the table exactly
once each, and nothing else may appear there. Duplicates, gaps and unexpected offsets are counted
and a few examples kept, so a failed check says what to look at.

Pure: the callers read Kafka, the dead-letter topic and the table, and pass the offsets in.

Incremental: a passing proof leaves a :class:`ProvenPrefix` (its range, counts and the sum of its
offsets) in the check's metadata. The next check compares offset by offset only the range the
sink wrote since (:func:`detail_range`); the proven part is re-checked by what the table engine
computes without sending rows (rows, distinct offsets, their sum: :class:`TableAggregate`). Any
difference there (a delete, a replay, a duplicate, an unexpected row) sends the whole committed
range back to the offset-by-offset comparison, which then names what changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from eos_pipeline.core.offsets import OffsetRange, TopicPartition

__all__ = [
    "EXAMPLES",
    "PartitionProof",
    "ProvenPrefix",
    "TableAggregate",
    "compare",
    "detail_range",
    "extend",
    "prefix_unchanged",
]

EXAMPLES = 10


@dataclass
class PartitionProof:
    tp: TopicPartition
    committed: OffsetRange
    kafka_records: int
    dead_letters: int
    table_rows: int
    distinct_offsets: int
    duplicates: dict[int, int] = field(default_factory=dict)  # offset -> rows
    gaps: list[int] = field(default_factory=list)  # expected, missing from the table
    unexpected: list[int] = field(default_factory=list)  # in the table, not expected
    #: Sum of the expected offsets (equal to the table's when the proof passed).
    offset_sum: int = 0
    #: Where the offset-by-offset comparison started (``committed.start`` unless an earlier
    #: proof's prefix was reused).
    detail_from: int | None = None

    @property
    def passed(self) -> bool:
        return not (self.duplicates or self.gaps or self.unexpected)

    @property
    def expected(self) -> int:
        return self.kafka_records - self.dead_letters

    def summary(self) -> str:
        if self.passed:
            return (
                f"{self.tp}: {self.committed}: {self.expected} offsets expected "
                f"({self.kafka_records} in Kafka - {self.dead_letters} dead letters), each once"
            )
        parts = []
        if self.duplicates:
            parts.append(f"{len(self.duplicates)} duplicated offsets")
        if self.gaps:
            parts.append(f"{len(self.gaps)} missing offsets")
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} unexpected offsets")
        return f"{self.tp}: {self.committed}: " + ", ".join(parts)

    def metadata(self) -> dict[str, object]:
        return {
            "committed_range": str(self.committed),
            "kafka_records": self.kafka_records,
            "dead_letters": self.dead_letters,
            "expected_offsets": self.expected,
            "table_rows": self.table_rows,
            "distinct_offsets": self.distinct_offsets,
            "duplicates": len(self.duplicates),
            "duplicate_examples": str(dict(list(sorted(self.duplicates.items()))[:EXAMPLES])),
            "gaps": len(self.gaps),
            "gap_examples": str(self.gaps[:EXAMPLES]),
            "unexpected": len(self.unexpected),
            "unexpected_examples": str(self.unexpected[:EXAMPLES]),
            "compared_offset_by_offset": str(
                OffsetRange(
                    self.committed.start if self.detail_from is None else self.detail_from,
                    self.committed.end,
                )
            ),
            **(self.proven().to_metadata() if self.passed else {}),
        }

    def proven(self) -> ProvenPrefix:
        """What this proof, if it passed, lets the next check skip comparing in detail."""
        return ProvenPrefix(
            self.committed.start,
            self.committed.end,
            self.kafka_records,
            self.dead_letters,
            self.offset_sum,
        )


_PREFIX_KEYS = ("start", "through", "kafka_records", "dead_letters", "offset_sum")


@dataclass(frozen=True)
class ProvenPrefix:
    """What a passing check proved: in ``[start, through)`` Kafka held ``kafka_records``
    offsets, ``dead_letters`` of them were dead letters, and the table held each other offset
    exactly once; ``offset_sum`` is the sum of those offsets."""

    start: int
    through: int
    kafka_records: int
    dead_letters: int
    offset_sum: int

    @property
    def rows(self) -> int:
        return self.kafka_records - self.dead_letters

    def to_metadata(self) -> dict[str, int]:
        return {f"proven_{k}": getattr(self, k) for k in _PREFIX_KEYS}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, object]) -> ProvenPrefix | None:
        """The prefix stored by :meth:`to_metadata` (plain or Dagster values), or None."""
        values = []
        for k in _PREFIX_KEYS:
            raw = metadata.get(f"proven_{k}")
            raw = getattr(raw, "value", raw)
            if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
                return None
            values.append(raw)
        prefix = cls(*values)
        return prefix if prefix.start <= prefix.through and prefix.rows >= 0 else None


@dataclass(frozen=True)
class TableAggregate:
    """A range of the table as its engine sums it up: rows, distinct offsets, their sum."""

    rows: int
    distinct: int
    offset_sum: int


def detail_range(prefix: ProvenPrefix | None, committed: OffsetRange) -> OffsetRange:
    """The part of ``committed`` to compare offset by offset: all of it, unless an earlier proof
    covers its start (same start, not beyond its end), in which case what follows that proof."""
    if prefix is None or prefix.start != committed.start:
        return committed
    if not committed.start <= prefix.through <= committed.end:
        return committed
    return OffsetRange(prefix.through, committed.end)


def prefix_unchanged(prefix: ProvenPrefix, aggregate: TableAggregate) -> bool:
    """The table still holds the proven prefix's rows: as many, all distinct, same offset sum."""
    return aggregate == TableAggregate(prefix.rows, prefix.rows, prefix.offset_sum)


def extend(prefix: ProvenPrefix, proof: PartitionProof) -> PartitionProof:
    """``proof`` (of the range right after ``prefix``) as a proof of both together."""
    if proof.committed.start != prefix.through:
        raise ValueError(f"{proof.committed} does not continue the proven {prefix}")
    return replace(
        proof,
        committed=OffsetRange(prefix.start, proof.committed.end),
        kafka_records=prefix.kafka_records + proof.kafka_records,
        dead_letters=prefix.dead_letters + proof.dead_letters,
        table_rows=prefix.rows + proof.table_rows,
        distinct_offsets=prefix.rows + proof.distinct_offsets,
        offset_sum=prefix.offset_sum + proof.offset_sum,
        detail_from=proof.committed.start,
    )


def compare(
    tp: TopicPartition,
    committed: OffsetRange,
    kafka_offsets: Iterable[int],
    dead_offsets: Iterable[int],
    table_counts: Mapping[int, int],
) -> PartitionProof:
    """Compare the table's rows per offset with Kafka's offsets minus dead letters."""
    in_kafka = {o for o in kafka_offsets if o in committed}
    dead = {o for o in dead_offsets if o in committed} & in_kafka
    expected = in_kafka - dead
    rows = {o: n for o, n in table_counts.items() if o in committed}
    return PartitionProof(
        tp=tp,
        committed=committed,
        kafka_records=len(in_kafka),
        dead_letters=len(dead),
        table_rows=sum(rows.values()),
        distinct_offsets=len(rows),
        duplicates={o: n for o, n in sorted(rows.items()) if n > 1},
        gaps=sorted(expected - rows.keys()),
        unexpected=sorted(rows.keys() - expected),
        offset_sum=sum(expected),
    )
