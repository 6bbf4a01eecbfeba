"""The exactly-once checks of a clustered pipeline: every cluster, every stretch, by identity.

Per Dagster partition ``T/p``, for each cluster the pipeline names and each physical topic of
``T`` there (``T`` and its MirrorMaker 2 replicas), the sink's committed range on that cluster
is read from Kafka with each record's fingerprint, and the table's rows from it (source topic
``<cluster>:<topic>``) are counted; :func:`~eos_pipeline.core.proof.
prove_by_identity` decides. The committed range is ``[low, position)`` (``low``: the log start,
as for one cluster, see ``core.positions.committed_low``), where the position is:

* ClickHouse: the keeper record under that cluster's key (kept for every cluster it ran on);
* Hudi: on the cluster of the latest commit, that commit's cluster position. A commit keeps
  only its own cluster's position, so on the others the range ends after the last row the
  table holds from there. That loses nothing: a record the table lost after its last row on a
  cluster was still the last one written there, so the next cluster's stretch starts right
  after its copy and the copy lies in that cluster's committed range, where it is missing.
  Records never read on any cluster since (dead letters or markers at a stretch's end) are
  not compared.

Every cluster must answer: a cluster that is down cannot show what it holds, so the check files
no verdict and names it (``checks.evaluated``); the next evaluation after it is back judges.
Wiring only.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Callable
from typing import Any

from eos_pipeline.adapters.dlq import dead_letter_offsets
from eos_pipeline.adapters.failover import FailoverPipeline, partitions_of
from eos_pipeline.adapters.kafka import read_range, start_offsets
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.metadata import CLICKHOUSE_SINK
from eos_pipeline.core.failover import row_topic
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.positions import committed, committed_low, sink_state
from eos_pipeline.core.proof import HeldRecord, IdentityProof, prove_by_identity

__all__ = ["clickhouse_identity_proofs", "hudi_identity_proofs"]

#: ``(alias, physical partition) -> (position or 0, table counts per offset by row topic)``
Stretch = Callable[[str, TopicPartition, bool], tuple[int, dict[str, dict[int, int]]]]


def _prove(
    pipeline: Pipeline,
    fp: FailoverPipeline,
    tps: list[TopicPartition],
    sink: str | None,
    stretch: Stretch,
) -> list[IdentityProof]:
    """The proofs of ``tps``; ``stretch`` gives each physical partition's position and rows."""
    dead = {
        alias: dead_letter_offsets(
            fp.settings[alias], pipeline.dead_letter_topic, pipeline.name, sink
        )
        for alias in fp.clusters.aliases
    }
    proofs = []
    for tp in tps:
        held: list[HeldRecord] = []
        table: dict[tuple[str, int], int] = {}
        local = OffsetRange(0, 0)
        for alias in fp.clusters.aliases:
            kafka = fp.settings[alias]
            for physical in fp.clusters.topics(tp.topic, alias):
                if tp.partition >= partitions_of(kafka, physical.topic):
                    continue
                ptp = TopicPartition(physical.topic, tp.partition)
                legacy = alias == fp.initial and physical.is_local
                position, rows = stretch(alias, ptp, legacy)
                if position == 0:
                    continue
                gone = dead[alias].get(ptp, set())
                seen = (*(o for counts in rows.values() for o in counts), *gone)
                log_start = start_offsets(kafka, physical.topic)[tp.partition]
                low = committed_low(log_start, pipeline.reset, seen, position)
                span = OffsetRange(low, max(low, position))
                if legacy:
                    local = span
                batch = read_range(kafka, ptp, span)
                held.extend(
                    HeldRecord(alias, ptp, o, batch.fingerprint(i), o in gone)
                    for i, o in enumerate(batch.offsets)
                )
                name = row_topic(alias, physical.topic)
                for counts in rows.values():  # plain-topic rows of an older table count as A's
                    for offset, n in counts.items():
                        if offset in span:
                            table[(name, offset)] = table.get((name, offset), 0) + n
        proofs.append(prove_by_identity(tp, local, held, table))
    return proofs


def clickhouse_identity_proofs(
    pipeline: Pipeline,
    store: KeeperStateStore,
    sink: Any,
    spec: Any,
    tps: list[TopicPartition],
) -> list[IdentityProof]:
    """One identity proof per Dagster partition in ``tps``, over every cluster's stretches."""
    from eos_pipeline.components.source import failover_pipeline

    fp = failover_pipeline(pipeline)
    source = spec.schema.source

    def stretch(
        alias: str, ptp: TopicPartition, legacy: bool
    ) -> tuple[int, dict[str, dict[int, int]]]:
        stored = store.read(KeeperKey.of(pipeline.name, CLICKHOUSE_SINK, ptp, alias))
        position = committed(sink_state(stored.record if stored else None)) or 0
        names = [row_topic(alias, ptp.topic)] + ([ptp.topic] if legacy else [])
        within = OffsetRange(0, position)
        rows = {
            n: dict(
                sink.offsets_in_table(
                    spec.database, spec.table, n, ptp.partition, within=within, source=source
                )
            )
            for n in names
        }
        return position, rows

    return _prove(pipeline, fp, tps, CLICKHOUSE_SINK, stretch)


def hudi_identity_proofs(
    pipeline: Pipeline, spark: Any, tps: list[TopicPartition]
) -> list[IdentityProof]:
    """The Hudi table's identity proofs over every cluster (see the module's note on ends)."""
    from pyspark.sql import functions as F

    from eos_pipeline.adapters.hudi_timeline import latest_commit
    from eos_pipeline.components.source import failover_pipeline
    from eos_pipeline.core.failover import stored_position

    assert pipeline.hudi is not None
    fp = failover_pipeline(pipeline)
    source = pipeline.table_schema.source
    commit = latest_commit(pipeline.hudi.path)
    if commit is None:
        return _prove(pipeline, fp, tps, None, lambda *_: (0, {}))
    stored = stored_position(commit.cluster_position, commit.checkpoint, fp.initial)
    counts: dict[tuple[str, int], dict[int, int]] = {}
    for row in (
        spark.read.format("hudi")
        .load(pipeline.hudi.path)
        .where(F.col(source.partition).isin(sorted({tp.partition for tp in tps})))
        .groupBy(source.topic, source.partition, source.offset)
        .count()
        .collect()
    ):
        counts.setdefault((row[0], row[1]), {})[row[2]] = row[3]

    def stretch(
        alias: str, ptp: TopicPartition, legacy: bool
    ) -> tuple[int, dict[str, dict[int, int]]]:
        names = [row_topic(alias, ptp.topic)] + ([ptp.topic] if legacy else [])
        rows = {n: counts.get((n, ptp.partition), {}) for n in names}
        if alias == stored.cluster:
            return stored.positions.get(ptp, 0), rows
        last = max((o for r in rows.values() for o in r), default=-1)
        return last + 1, rows

    return _prove(pipeline, fp, tps, None, stretch)
