"""The exactly-once checks: per partition, the table's offsets against Kafka's, on the data.

Each check reads, per partition, the sink's committed position (the keeper record; the Hudi
table's latest checkpoint), the offsets in the table, the offsets Kafka holds in the committed
range and the dead letters, and lets :func:`eos_pipeline.core.proof.compare` decide. It files
one result per partition, in range runs too (:func:`check_events`).
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Iterable, Iterator
from typing import Any

import dagster as dg

from eos_pipeline.adapters.dlq import dead_letter_offsets
from eos_pipeline.adapters.kafka import read_range, start_offsets
from eos_pipeline.adapters.replay_journal import ReplayJournal
from eos_pipeline.components.assets import (
    CHECK_NAME,
    CLICKHOUSE_SINK,
    clickhouse_key,
    clickhouse_spec,
    hudi_key,
)
from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.metadata import markdown_table
from eos_pipeline.components.partitions import (
    parse_partition_key,
    partition_key,
    pipeline_partitions,
)
from eos_pipeline.components.resources import kafka_resource, kafka_resource_key
from eos_pipeline.core.keeper_record import KeeperKey
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.positions import committed, committed_low, sink_state
from eos_pipeline.core.proof import (
    PartitionProof,
    ProvenPrefix,
    compare,
    detail_range,
    extend,
    prefix_unchanged,
)
from eos_pipeline.core.replay import RUNNING

__all__ = ["check_events", "clickhouse_check", "hudi_check"]


def kafka_offsets(kafka: Any, tp: TopicPartition, committed_range: OffsetRange) -> list[int]:
    """The offsets Kafka holds in the range (read_committed: no aborted records, no markers)."""
    return read_range(kafka, tp, committed_range).offsets


def _clickhouse_committed(store: Any, pipeline: Pipeline, tp: TopicPartition) -> int | None:
    """The next offset the ClickHouse sink will write: everything below it is committed."""
    stored = store.read(KeeperKey.of(pipeline.name, CLICKHOUSE_SINK, tp))
    return committed(sink_state(stored.record if stored else None))


def _check_result(
    proofs: list[PartitionProof],
    asset_key: dg.AssetKey,
    notes: dict[TopicPartition, str] | None = None,
    notes_key: str = "replay_in_flight",
) -> dg.AssetCheckResult:
    passed = all(p.passed for p in proofs)
    header = ["partition", "committed", "kafka", "DLQ", "rows", "distinct", "dups", "gaps", "extra"]
    rows = [
        [
            partition_key(p.tp),
            str(p.committed),
            p.kafka_records,
            p.dead_letters,
            p.table_rows,
            p.distinct_offsets,
            len(p.duplicates),
            len(p.gaps),
            len(p.unexpected),
        ]
        for p in proofs
    ]
    metadata: dict[str, Any] = {"partitions": dg.MetadataValue.md(markdown_table(header, rows))}
    if len(proofs) == 1:
        metadata.update(proofs[0].metadata())
    else:
        for name in ("duplicates", "gaps", "unexpected"):
            metadata[name] = sum(len(getattr(p, name)) for p in proofs)
    metadata["summary"] = "; ".join(p.summary() for p in proofs)
    said = [notes[p.tp] for p in proofs if notes and p.tp in notes]
    if said:
        # Rows a replay deleted and has not re-inserted yet show as gaps: say why, and the fix
        # (or, for a clustered table, which records are missing or doubled, on which cluster).
        metadata[notes_key] = "; ".join(said)
        metadata["summary"] += "; " + "; ".join(said)
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=CHECK_NAME,
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=metadata,
        description=metadata["summary"],
    )


def _latest_materialization(instance: dg.DagsterInstance, asset_key: dg.AssetKey, key: str) -> Any:
    """The partition's latest materialization, as the check evaluation's target (so the UI
    counts the evaluation against that materialization), or None.

    The one private import left in the Dagster layer: dagster 1.13 has no public name for this
    type, and its public route (a check step of a single partition, where Dagster fills the
    target in) does not fit range runs, which file one evaluation per partition."""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
    ).records
    if not records:
        return None
    record = records[0]
    return AssetCheckEvaluationTargetMaterializationData(
        run_id=record.event_log_entry.run_id,
        storage_id=record.storage_id,
        timestamp=record.timestamp,
    )


def check_events(
    context: dg.AssetCheckExecutionContext,
    proofs: list[PartitionProof],
    asset_key: dg.AssetKey,
    notes: dict[TopicPartition, str] | None = None,
    notes_key: str = "replay_in_flight",
) -> Iterable[Any]:
    """What a check step yields: one result per partition, each stored under its partition.

    A single-partition run: one ``AssetCheckResult`` (Dagster files it under the run's
    partition). A range run (the Hudi sensor's and the single-run backfill's, or a range
    launched from the UI): Dagster would file one ``AssetCheckResult`` under no partition,
    leaving every planned partition "skipped"; so the check yields the step's output and then
    one evaluation per partition, each naming its partition and that partition's latest
    materialization, exactly as Dagster builds them from a single-partition run.
    """
    if context.has_partition_key or not proofs:
        return [_check_result(proofs, asset_key, notes, notes_key)]
    events: list[Any] = [dg.Output(None)]
    for proof in proofs:
        result = _check_result([proof], asset_key, notes, notes_key)
        key = partition_key(proof.tp)
        events.append(
            dg.AssetCheckEvaluation(
                asset_key=asset_key,
                check_name=CHECK_NAME,
                passed=result.passed,
                metadata=result.metadata,
                target_materialization_data=_latest_materialization(
                    context.instance, asset_key, key
                ),
                severity=result.severity,
                description=result.description,
                blocking=False,
                partition=key,
            )
        )
    return events


def clickhouse_check(pipeline: Pipeline, pool: str | None) -> dg.AssetChecksDefinition:
    kafka_key = kafka_resource_key(pipeline.name)
    spec = clickhouse_spec(pipeline)
    key = clickhouse_key(pipeline)

    @dg.asset_check(
        asset=key,
        name=CHECK_NAME,
        partitions_def=pipeline_partitions(pipeline.name),
        required_resource_keys={kafka_key, "keeper", "clickhouse"},
        pool=pool,
        description="Per partition: the offsets in the table equal Kafka's offsets in the "
        "committed range minus dead letters, each exactly once (duplicates and gaps counted). "
        "With several clusters: over every cluster's committed range, each record (by the "
        "fingerprint MirrorMaker 2 preserves) is in the table once, whichever cluster it was "
        "read from, and every row names a record Kafka holds there; every cluster must be up.",
        blocking=False,
    )
    def _check(context: dg.AssetCheckExecutionContext) -> Iterator[Any]:
        if pipeline.kafka.clusters:
            yield from _clustered(context, pipeline, spec, key)
            return
        kafka = kafka_resource(context, pipeline.name).settings()
        dead = dead_letter_offsets(
            kafka, pipeline.dead_letter_topic, pipeline.name, CLICKHOUSE_SINK
        )
        proofs = []
        proven = _proven_prefixes(
            context.instance, dg.AssetCheckKey(key, CHECK_NAME), context.partition_keys
        )
        notes: dict[TopicPartition, str] = {}
        with context.resources.clickhouse.sink() as sink, context.resources.keeper.store() as st:
            journal = ReplayJournal(st, pipeline.name, CLICKHOUSE_SINK)
            for pk in sorted(context.partition_keys):
                tp = parse_partition_key(pk)
                where = (spec.database, spec.table, tp.topic, tp.partition)
                pending, _ = journal.read(tp)
                if pending is not None and pending.phase == RUNNING:
                    notes[tp] = (
                        f"{tp}: a replay of {pending.range} was interrupted; run it again: "
                        f"eos-pipeline replay --pipeline {pipeline.name} --sink clickhouse "
                        f"--partition {tp.partition} --from {pending.range.start} "
                        f"--to {pending.range.end} --yes"
                    )
                position = _clickhouse_committed(st, pipeline, tp) or 0
                lowest = sink.lowest_offset(*where, below=position, source=spec.schema.source)
                seen = [] if lowest is None else [lowest]
                low = _low_bound(kafka, tp, pipeline, seen, dead.get(tp, set()), position)
                # rows beyond the position belong to a step in flight (phase BEFORE); rows below
                # the low bound were deleted from Kafka and cannot be compared
                committed = OffsetRange(low, max(low, position))
                prefix = proven.get(pk)
                detail = detail_range(prefix, committed)
                if prefix is not None and detail != committed:
                    earlier = OffsetRange(prefix.start, prefix.through)
                    aggregate = sink.offset_aggregate(
                        *where, within=earlier, source=spec.schema.source
                    )
                    if not prefix_unchanged(prefix, aggregate):
                        context.log.warning(
                            f"{pk}: the proven range {earlier} changed in the table "
                            f"({aggregate}); comparing all of {committed} again"
                        )
                        detail = committed
                table = sink.offsets_in_table(*where, within=detail, source=spec.schema.source)
                proof = compare(
                    tp, detail, kafka_offsets(kafka, tp, detail), dead.get(tp, set()), dict(table)
                )
                if prefix is not None and detail != committed:
                    proof = extend(prefix, proof)
                proofs.append(proof)
        yield from check_events(context, proofs, key, notes)

    return _check


def _clustered(
    context: dg.AssetCheckExecutionContext, pipeline: Pipeline, spec: Any, key: dg.AssetKey
) -> Iterable[Any]:
    """A clustered table's check: by record identity over every cluster (``cluster_proofs``)."""
    from eos_pipeline.components.cluster_proofs import clickhouse_identity_proofs

    tps = [parse_partition_key(k) for k in sorted(context.partition_keys)]
    with context.resources.clickhouse.sink() as sink, context.resources.keeper.store() as st:
        found = clickhouse_identity_proofs(pipeline, st, sink, spec, tps)
    return identity_events(context, found, key)


def identity_events(
    context: dg.AssetCheckExecutionContext, found: list[Any], key: dg.AssetKey
) -> Iterable[Any]:
    """:func:`check_events` for identity proofs (``cluster_proofs``): the summary says the
    counts are records across clusters (the range shown is the initial cluster's own topic),
    and ``identity`` names the records missing, doubled or unexpected."""
    notes = {
        p.proof.tp: "; ".join(p.examples)
        or "counted by record identity over every cluster (a record and its copies once)"
        for p in found
    }
    return check_events(context, [p.proof for p in found], key, notes, "identity")


def _low_bound(
    kafka: Any,
    tp: TopicPartition,
    pipeline: Pipeline,
    seen: Iterable[int],
    dead: set[int],
    position: int,
) -> int:
    """Where the comparable committed range starts (see ``positions.committed_low``); ``seen``:
    offsets stored in the table (its lowest one is enough)."""
    log_start = start_offsets(kafka, tp.topic)[tp.partition]
    return committed_low(log_start, pipeline.reset, (*seen, *dead), position)


def _proven_prefixes(
    instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, partitions: Iterable[str]
) -> dict[str, ProvenPrefix]:
    """Per partition, what its latest completed evaluation proved (``core.proof``), if it
    passed. One read of the check's recent history; a partition whose latest evaluation is
    older than that window (or failed) is compared in full."""
    wanted = set(partitions)
    records = instance.event_log_storage.get_asset_check_execution_history(
        check_key, limit=64 + 8 * len(wanted)
    )
    found: dict[str, ProvenPrefix] = {}
    decided: set[str] = set()
    for record in records:  # newest first
        status = record.status.value
        if record.partition not in wanted or record.partition in decided or status == "PLANNED":
            continue
        decided.add(record.partition)
        event = record.event.dagster_event if record.event else None
        if status == "SUCCEEDED" and event is not None:
            prefix = ProvenPrefix.from_metadata(event.asset_check_evaluation_data.metadata)
            if prefix is not None:
                found[record.partition] = prefix
    return found


def hudi_check(pipeline: Pipeline, pool: str) -> dg.AssetChecksDefinition:
    kafka_key = kafka_resource_key(pipeline.name)
    hudi = pipeline.hudi
    assert hudi is not None
    key = hudi_key(pipeline)
    source = pipeline.table_schema.source

    @dg.asset_check(
        asset=key,
        name=CHECK_NAME,
        partitions_def=pipeline_partitions(pipeline.name),
        required_resource_keys={kafka_key, "spark"},
        pool=pool,
        description="Per partition: the offsets in the Hudi table equal Kafka's offsets below "
        "the latest commit's checkpoint minus dead letters, each exactly once. With several "
        "clusters: over every cluster, each record (by the fingerprint MirrorMaker 2 preserves) "
        "is in the table once; a commit holds only its own cluster's position, so on the other "
        "clusters the range compared ends after the table's last row from there (a record lost "
        "at that end shows as its copy missing on the next cluster).",
        blocking=False,
    )
    def _check(context: dg.AssetCheckExecutionContext) -> Iterator[Any]:
        from pyspark.sql import functions as F

        from eos_pipeline.adapters.hudi import latest_checkpoint

        kafka = kafka_resource(context, pipeline.name).settings()
        spark = context.resources.spark.session(hudi.path)
        tps = [parse_partition_key(k) for k in sorted(context.partition_keys)]
        if pipeline.kafka.clusters:  # every cluster's stretches, by identity
            from eos_pipeline.components.cluster_proofs import hudi_identity_proofs

            found = hudi_identity_proofs(pipeline, spark, tps)
            yield from identity_events(context, found, key)
            return
        checkpoint = latest_checkpoint(spark, hudi.path) or {}
        counts: dict[int, dict[int, int]] = {tp.partition: {} for tp in tps}
        if checkpoint:
            table = spark.read.format("hudi").load(hudi.path)
            grouped = (
                table.where(F.col(source.partition).isin([tp.partition for tp in tps]))
                .groupBy(source.partition, source.offset)
                .count()
                .collect()
            )
            for row in grouped:
                counts[row[0]][row[1]] = row[2]
        dead = dead_letter_offsets(kafka, pipeline.dead_letter_topic, pipeline.name, "hudi")
        proofs = []
        for tp in tps:
            position = checkpoint.get(tp, 0)
            low = _low_bound(
                kafka, tp, pipeline, counts[tp.partition], dead.get(tp, set()), position
            )
            committed = OffsetRange(min(low, position), position)
            proofs.append(
                compare(
                    tp,
                    committed,
                    kafka_offsets(kafka, tp, committed),
                    dead.get(tp, set()),
                    counts[tp.partition],
                )
            )
        yield from check_events(context, proofs, key)

    return _check
