"""The exactly-once proof of a clustered table across every cluster stretch, by record identity.

A clustered pipeline reads partition ``p`` of several physical topics on whichever cluster is
active, and a switch moves it to the copies of the same records on another cluster. Offsets
differ per cluster, so the proof identifies each record by the fingerprint MirrorMaker 2
preserves (key, value, timestamp, headers: :func:`~eos_pipeline.core.failover.record_fingerprint`)
and each table row by the source coordinates it stores (``<cluster>:<topic>``, partition, offset).

What is proven, per Dagster partition, over *every* cluster the pipeline names:

* every record below a sink's position on any cluster (its committed range there) was written
  somewhere: a record and its copies are one identity, so the stretches on A, on B and back on
  A join without a gap and without overlap, whichever cluster a record was read from;
* each identity is in the table exactly once (or was sent to the dead letters once), and every
  row in a committed range names a record Kafka holds there.

A cluster holds each record at most once (its own topic or one replica of it; MM2 runs with
exactly-once source), so the number of records expected for an identity is the largest number
of records carrying it on any one cluster: two genuinely identical records produced twice stay
two, while a record and its copy count once. Pure: the caller reads Kafka and the table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from eos_pipeline.core.failover.table_position import row_topic
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.proof import EXAMPLES, PartitionProof


@dataclass(frozen=True, slots=True)
class HeldRecord:
    """A record Kafka holds in a sink's committed range on one cluster."""

    cluster: str
    tp: TopicPartition  # the physical topic-partition on that cluster
    offset: int
    fingerprint: str
    dead: bool = False  # sent to that cluster's dead-letter topic

    @property
    def where(self) -> str:
        return f"{row_topic(self.cluster, self.tp.topic)}[{self.tp.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class IdentityProof:
    """The partition's :class:`PartitionProof` (counts per identity) and where to look."""

    proof: PartitionProof
    #: Examples of records missing, doubled or unexpected, by ``cluster:topic[p]@offset``.
    examples: tuple[str, ...]


def prove_by_identity(
    tp: TopicPartition,
    committed: OffsetRange,
    held: Iterable[HeldRecord],
    table: Mapping[tuple[str, int], int],
) -> IdentityProof:
    """Compare the table's rows with the records committed on every cluster, per identity.

    ``held``: the records Kafka holds in each cluster's committed ranges of ``tp``'s physical
    partitions; ``table``: rows per ``(row topic, offset)`` inside those ranges (a row topic
    as :func:`row_topic` writes it). ``committed`` is only reported (the local topic's range on
    the active cluster).
    """
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
    expected: Counter[str] = Counter()
    dead: Counter[str] = Counter()
    for counts in per_cluster.values():
        for fp, n in counts.items():
            expected[fp] = max(expected[fp], n)
    for counts in dead_per_cluster.values():
        for fp, n in counts.items():
            dead[fp] = max(dead[fp], n)
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


__all__ = ["HeldRecord", "IdentityProof", "prove_by_identity"]
