"""The exactly-once proof, on the data. Pure: callers pass data in.

Per topic-partition, over a sink's committed range ``[start, position)``: the offsets Kafka holds
there (read_committed) minus the dead letters appear in the table exactly once each, and nothing
else does; duplicates, gaps and strays are counted with a few examples.

Incremental: a passing proof leaves a :class:`ProvenPrefix` in the check's metadata; the next
compares offset by offset only what was written since, and the proven part by aggregates the
table computes. Any difference there sends the whole range back to the full comparison.

Across clusters (:func:`prove_by_identity`) offsets differ, so a record is its MM2-preserved
fingerprint and a row its stored source coordinates. Every record below a position on any
cluster was written once (a record and its copies are one identity, so stretches on A, B and
back join without gap or overlap). A cluster holds each record at most once, so an identity is
expected as many times as the most records carrying it on one cluster: two identical records
produced twice stay two, a record and its copy count once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import reduce
from operator import or_

from eos_pipeline.core.failover import row_topic
from eos_pipeline.core.offsets import OffsetRange, TopicPartition

EXAMPLES = 10


@dataclass
class PartitionProof:
    """``duplicates``: offset -> rows; ``offset_sum``: of the expected offsets; ``detail_from``:
    where the offset-by-offset comparison started (None: ``committed.start``)."""

    tp: TopicPartition
    committed: OffsetRange
    kafka_records: int
    dead_letters: int
    table_rows: int
    distinct_offsets: int
    duplicates: dict[int, int] = field(default_factory=dict)
    gaps: list[int] = field(default_factory=list)
    unexpected: list[int] = field(default_factory=list)
    offset_sum: int = 0
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
        """What this proof, if it passed, spares the next check comparing in detail."""
        return ProvenPrefix(
            self.committed.start,
            self.committed.end,
            self.kafka_records,
            self.dead_letters,
            self.offset_sum,
        )


@dataclass(frozen=True)
class ProvenPrefix:
    """What a passing check proved of ``[start, through)``: the table held each offset that was
    no dead letter exactly once (their sum: ``offset_sum``)."""

    start: int
    through: int
    kafka_records: int
    dead_letters: int
    offset_sum: int

    @property
    def rows(self) -> int:
        return self.kafka_records - self.dead_letters

    def to_metadata(self) -> dict[str, int]:
        return {f"proven_{f.name}": getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, object]) -> ProvenPrefix | None:
        """From plain or Dagster metadata values; None when absent or implausible."""
        values = []
        for f in fields(cls):
            raw = metadata.get(f"proven_{f.name}")
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
    """What an earlier proof of the same start does not cover, else all of ``committed``."""
    if prefix is None or prefix.start != committed.start:
        return committed
    if not committed.start <= prefix.through <= committed.end:
        return committed
    return OffsetRange(prefix.through, committed.end)


def prefix_unchanged(prefix: ProvenPrefix, aggregate: TableAggregate) -> bool:
    """As many rows as proven, all distinct, same offset sum."""
    return aggregate == TableAggregate(prefix.rows, prefix.rows, prefix.offset_sum)


def extend(prefix: ProvenPrefix, proof: PartitionProof) -> PartitionProof:
    """A proof of the range right after ``prefix`` as a proof of both together."""
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


@dataclass(frozen=True, slots=True)
class HeldRecord:
    """A record Kafka holds in a sink's committed range of ``tp`` (physical) on ``cluster``."""

    cluster: str
    tp: TopicPartition
    offset: int
    fingerprint: str
    dead: bool = False

    @property
    def where(self) -> str:
        return f"{row_topic(self.cluster, self.tp.topic)}[{self.tp.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class IdentityProof:
    """A :class:`PartitionProof` counted per identity; examples as ``cluster:topic[p]@offset``."""

    proof: PartitionProof
    examples: tuple[str, ...]


def prove_by_identity(
    tp: TopicPartition,
    committed: OffsetRange,
    held: Iterable[HeldRecord],
    table: Mapping[tuple[str, int], int],
) -> IdentityProof:
    """``held``: the records in each cluster's committed ranges of ``tp``; ``table``: rows per
    ``(row topic, offset)`` inside them; ``committed`` is only reported."""
    records = list(held)
    by_where = {(row_topic(r.cluster, r.tp.topic), r.offset): r for r in records}
    per_cluster: dict[str, Counter[str]] = {}
    dead_per_cluster: dict[str, Counter[str]] = {}
    first: dict[str, HeldRecord] = {}
    for r in records:
        per_cluster.setdefault(r.cluster, Counter())[r.fingerprint] += 1
        if r.dead:
            dead_per_cluster.setdefault(r.cluster, Counter())[r.fingerprint] += 1
        # name a record by its original (its cluster's own topic), not by a copy of it
        if r.fingerprint not in first or (r.tp.topic == tp.topic != first[r.fingerprint].tp.topic):
            first[r.fingerprint] = r
    # a Counter union keeps each identity's highest count: the most on one cluster
    expected: Counter[str] = reduce(or_, per_cluster.values(), Counter())
    dead: Counter[str] = reduce(or_, dead_per_cluster.values(), Counter())
    rows: Counter[str] = Counter()
    unexpected: list[tuple[str, int]] = []
    for (topic, offset), n in sorted(table.items()):
        found = by_where.get((topic, offset))
        if found is None or found.dead:
            unexpected.append((topic, offset))
            continue
        rows[found.fingerprint] += n
    duplicates: dict[int, int] = {}
    gaps: list[int] = []
    examples: list[str] = []
    for fp in sorted(set(expected) | set(rows), key=lambda f: first[f].where):
        want, have = expected[fp], rows[fp] + dead[fp]
        if have > want:
            duplicates[first[fp].offset] = have
            examples.append(f"{first[fp].where} written {have} times")
        elif have < want:
            gaps.append(first[fp].offset)
            examples.append(f"{first[fp].where} missing")
    examples.extend(f"{t}[{tp.partition}]@{o}: no such committed record" for t, o in unexpected)
    proof = PartitionProof(
        tp=tp,
        committed=committed,
        kafka_records=sum(expected.values()),
        dead_letters=sum(dead.values()),
        table_rows=sum(table.values()),
        distinct_offsets=len(rows),
        duplicates=duplicates,
        gaps=gaps,
        unexpected=[o for _, o in unexpected],
    )
    return IdentityProof(proof, tuple(examples[:EXAMPLES]))
