"""The exactly-once proof for one topic-partition, on the data (what the asset checks decide).

Over the committed range ``[start, position)`` of a sink, the offsets Kafka holds there
(read_committed) minus the ones sent to the dead-letter topic must appear in the table exactly
once each, and nothing else may appear there. Duplicates, gaps and unexpected offsets are counted
and a few examples kept, so a failed check says what to look at.

Pure: the callers read Kafka, the dead-letter topic and the table, and pass the offsets in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from eos_pipeline.core.offsets import OffsetRange, TopicPartition

__all__ = ["EXAMPLES", "PartitionProof", "compare"]

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
        }


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
    )
