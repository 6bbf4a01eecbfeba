"""The exactly-once checks: per partition, the table's offsets against Kafka's, on the data.

:func:`eos_pipeline.core.proof.compare` decides from the sink's committed position, the offsets
in the table, those Kafka holds in the committed range and the dead letters. A check that cannot
read its evidence (a resource down; a clustered sink's run in flight) files no evaluation, so
Dagster shows it skipped, never failed: ``passed=False`` means wrong data, and only that. What a
passing evaluation proved is kept in the keeper (:class:`ProvenStore`), so the next one compares
only what the sink wrote since.

A clustered pipeline's checks go by record identity (``core.proof.prove_by_identity``) over
every cluster and physical topic, each in its committed range ``[low, position)``. ClickHouse
keeps a position per cluster. A Hudi commit keeps only its own cluster's position, so on the
others the range ends after the table's last row from there; that loses nothing: a record lost
after it would be missing as its copy in the next cluster's committed range. Every cluster must
answer, else the check files no verdict.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import dagster as dg
from kazoo.exceptions import NoNodeError

from eos_pipeline.adapters.dlq import dead_letter_offsets
from eos_pipeline.adapters.failover import FailoverPipeline, partitions_of
from eos_pipeline.adapters.kafka import read_range, start_offsets
from eos_pipeline.adapters.keeper import KeeperStateStore, ReplayJournal
from eos_pipeline.components.assets import (
    CHECK_NAME,
    CLICKHOUSE_SINK,
    clickhouse_key,
    clickhouse_spec,
    hudi_key,
)
from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.health import name_fault, resource_endpoints
from eos_pipeline.components.metadata import markdown_table, pipeline_partitions
from eos_pipeline.components.resources import kafka_resource, kafka_resource_key
from eos_pipeline.components.source import failover_pipeline, source_of
from eos_pipeline.core.failover import row_topic
from eos_pipeline.core.keeper import KeeperKey, validate_name, validate_topic
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import SINK_TAG, parse_partition_key, partition_key
from eos_pipeline.core.positions import committed, committed_low, sink_state
from eos_pipeline.core.proof import (
    HeldRecord,
    IdentityProof,
    PartitionProof,
    ProvenPrefix,
    compare,
    detail_range,
    extend,
    prefix_unchanged,
    prove_by_identity,
)
from eos_pipeline.core.replay import RUNNING


def _clickhouse_committed(
    store: Any, pipeline: Pipeline, tp: TopicPartition, cluster: str | None = None
) -> int:
    """The next offset the ClickHouse sink will write: everything below it is committed."""
    stored = store.read(KeeperKey.of(pipeline.name, CLICKHOUSE_SINK, tp, cluster))
    return committed(sink_state(stored.record if stored else None)) or 0


def _exactly_once_check(
    pipeline: Pipeline,
    key: dg.AssetKey,
    sink: str,
    pool: str | None,
    resources: set[str],
    description: str,
    events: Callable[[dg.AssetCheckExecutionContext], list[Any]],
) -> dg.AssetChecksDefinition:
    """``sink``'s check on ``key``: the ``events`` of a context or, when its evidence cannot be
    read (the module's note), a warning and an observation saying why; unknown errors raise."""

    @dg.asset_check(
        asset=key,
        name=CHECK_NAME,
        partitions_def=pipeline_partitions(pipeline.name),
        required_resource_keys={kafka_resource_key(pipeline.name), *resources},
        pool=pool,
        description=description,
        blocking=False,
    )
    def _check(context: dg.AssetCheckExecutionContext) -> Iterator[Any]:
        reason = None
        if source_of(pipeline).switches:
            # a run after a switch skips through what the previous cluster wrote: not
            # comparable until it ends
            runs = context.instance.get_runs(
                filters=dg.RunsFilter(
                    statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED],
                    tags={SINK_TAG: f"{pipeline.name}.{sink}"},
                ),
                limit=5,
            )
            busy = [r.run_id for r in runs if r.run_id != context.run.run_id]
            if busy:
                reason = (
                    f"a run of {pipeline.name}.{sink} is in flight ({busy[0]}): its range is "
                    "judged once it has ended, by the next evaluation"
                )
        if reason is None:
            try:
                found = events(context)
            except Exception as exc:
                fault = name_fault(exc, resource_endpoints(context, pipeline))
                if fault is None:
                    raise
                reason = f"could not read its evidence: {fault.message()}"
            else:
                yield from found
                return
        context.log.warning(
            f"{CHECK_NAME} not evaluated for {sorted(context.partition_keys)}: {reason}"
        )
        yield dg.AssetObservation(
            asset_key=key,
            partition=context.partition_key if context.has_partition_key else None,
            metadata={"exactly_once_not_evaluated": dg.MetadataValue.text(reason)},
        )
        yield dg.Output(None)

    return _check


def _check_result(
    proofs: list[PartitionProof],
    asset_key: dg.AssetKey,
    notes: dict[TopicPartition, str] | None = None,
    notes_key: str = "replay_in_flight",
) -> dg.AssetCheckResult:
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
        passed=all(p.passed for p in proofs),
        severity=dg.AssetCheckSeverity.ERROR,
        metadata=metadata,
        description=metadata["summary"],
    )


def _target_type() -> Any:
    """The type of ``AssetCheckEvaluation``'s ``target_materialization_data``, read from its
    signature (Dagster 1.13 exports it only under ``dagster._core``, a private path), or None."""
    import inspect
    import typing

    try:
        annotation = (
            inspect.signature(dg.AssetCheckEvaluation)
            .parameters["target_materialization_data"]
            .annotation
        )
    except (KeyError, TypeError, ValueError):
        return None
    found = [t for t in typing.get_args(annotation) if t is not type(None)]
    return found[0] if len(found) == 1 and isinstance(found[0], type) else None


_TARGET = _target_type()


def _latest_materialization(instance: dg.DagsterInstance, asset_key: dg.AssetKey, key: str) -> Any:
    """The partition's latest materialization, as an evaluation's target (the UI counts the
    evaluation against it), or None."""
    if _TARGET is None:
        return None
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
    ).records
    if not records:
        return None
    record = records[0]
    return _TARGET(
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

    For a range run Dagster would file one ``AssetCheckResult`` under no partition, leaving
    every planned partition "skipped"; so the step yields its output, then one evaluation per
    partition naming that partition's latest materialization, as Dagster builds them for a
    single-partition run."""
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
    spec = clickhouse_spec(pipeline)
    key = clickhouse_key(pipeline)

    def _events(context: dg.AssetCheckExecutionContext) -> list[Any]:
        if source_of(pipeline).switches:  # by record identity over every cluster
            tps = [parse_partition_key(k) for k in sorted(context.partition_keys)]
            resources = context.resources
            with resources.clickhouse.sink() as sink, resources.keeper.store() as st:
                found = clickhouse_identity_proofs(pipeline, st, sink, spec, tps)
            return identity_events(context, found, key)
        kafka = kafka_resource(context, pipeline.name).settings()
        dead = dead_letter_offsets(
            kafka, pipeline.dead_letter_topic, pipeline.name, CLICKHOUSE_SINK
        )
        proofs = []
        notes: dict[TopicPartition, str] = {}
        with context.resources.clickhouse.sink() as sink, context.resources.keeper.store() as st:
            journal = ReplayJournal(st, pipeline.name, CLICKHOUSE_SINK)
            kept = ProvenStore(st, pipeline.name, CLICKHOUSE_SINK)
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
                position = _clickhouse_committed(st, pipeline, tp)
                lowest = sink.lowest_offset(*where, below=position, source=spec.schema.source)
                seen = [] if lowest is None else [lowest]
                low = _low_bound(kafka, tp, pipeline, seen, dead.get(tp, set()), position)
                # rows beyond the position belong to a step in flight (phase BEFORE); rows below
                # the low bound were deleted from Kafka and cannot be compared
                committed = OffsetRange(low, max(low, position))
                prefix = kept.read(tp)
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
                held = read_range(kafka, tp, detail).offsets
                proof = compare(tp, detail, held, dead.get(tp, set()), dict(table))
                if prefix is not None and detail != committed:
                    proof = extend(prefix, proof)
                proofs.append(proof)
                if proof.passed:
                    kept.write(tp, proof.proven())
                else:  # wrong data: the next evaluation compares everything again
                    kept.clear(tp)
        return list(check_events(context, proofs, key, notes))

    return _exactly_once_check(
        pipeline,
        key,
        CLICKHOUSE_SINK,
        pool,
        {"keeper", "clickhouse"},
        "Per partition: the offsets in the table equal Kafka's offsets in the committed range "
        "minus dead letters, each exactly once (duplicates and gaps counted). With several "
        "clusters: over every cluster's committed range, each record (by the fingerprint "
        "MirrorMaker 2 preserves) is in the table once, whichever cluster it was read from, and "
        "every row names a record Kafka holds there; every cluster must be up.",
        _events,
    )


def identity_events(
    context: dg.AssetCheckExecutionContext, found: list[Any], key: dg.AssetKey
) -> list[Any]:
    """:func:`check_events` for identity proofs (the clustered checks): the summary says the
    counts are records across clusters (the range shown is the initial cluster's own topic),
    and ``identity`` names the records missing, doubled or unexpected."""
    notes = {
        p.proof.tp: "; ".join(p.examples)
        or "counted by record identity over every cluster (a record and its copies once)"
        for p in found
    }
    return list(check_events(context, [p.proof for p in found], key, notes, "identity"))


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


class ProvenStore:
    """What the latest passing evaluation of a partition proved, kept in the keeper at
    ``<root>/<pipeline>/@check/<sink>/<topic>/<partition>`` (JSON of ``ProvenPrefix``).

    Last writer wins, and nothing here is trusted blindly: before a prefix saves a comparison
    the check asks the table whether it still holds the proven rows (``prefix_unchanged``), and
    compares everything again if not."""

    def __init__(self, store: Any, pipeline: str, sink: str) -> None:
        self.store = store
        self.pipeline = validate_name("pipeline", pipeline)
        self.sink = validate_name("sink", sink)

    def path(self, tp: TopicPartition) -> str:
        root = self.store.settings.root
        topic = validate_topic(tp.topic)
        return f"{root}/{self.pipeline}/@check/{self.sink}/{topic}/{tp.partition}"

    def read(self, tp: TopicPartition) -> ProvenPrefix | None:
        try:
            data, _ = self.store.client.get(self.path(tp))
        except NoNodeError:
            return None
        try:
            return ProvenPrefix.from_metadata(json.loads(data))
        except ValueError:
            return None  # unreadable: compare in full

    def clear(self, tp: TopicPartition) -> None:
        with contextlib.suppress(NoNodeError):
            self.store.client.delete(self.path(tp))

    def write(self, tp: TopicPartition, prefix: ProvenPrefix) -> None:
        data = json.dumps(prefix.to_metadata()).encode()
        path = self.path(tp)
        try:
            self.store.client.set(path, data)
        except NoNodeError:
            self.store.client.create(path, data, makepath=True)


def hudi_check(pipeline: Pipeline, pool: str) -> dg.AssetChecksDefinition:
    hudi = pipeline.hudi
    assert hudi is not None
    key = hudi_key(pipeline)
    source = pipeline.table_schema.source

    def _events(context: dg.AssetCheckExecutionContext) -> list[Any]:
        from pyspark.sql import functions as F

        from eos_pipeline.adapters.hudi_timeline import latest_checkpoint

        kafka = kafka_resource(context, pipeline.name).settings()
        spark = context.resources.spark.spark_session
        tps = [parse_partition_key(k) for k in sorted(context.partition_keys)]
        if source_of(pipeline).switches:  # every cluster's stretches, by identity
            return identity_events(context, hudi_identity_proofs(pipeline, spark, tps), key)
        checkpoint = latest_checkpoint(hudi.path) or {}
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
            held = read_range(kafka, tp, committed).offsets
            proofs.append(compare(tp, committed, held, dead.get(tp, set()), counts[tp.partition]))
        return list(check_events(context, proofs, key))

    return _exactly_once_check(
        pipeline,
        key,
        "hudi",
        pool,
        {"spark"},
        "Per partition: the offsets in the Hudi table equal Kafka's offsets below the latest "
        "commit's checkpoint minus dead letters, each exactly once. With several clusters: over "
        "every cluster, each record (by the fingerprint MirrorMaker 2 preserves) is in the table "
        "once; a commit holds only its own cluster's position, so on the other clusters the "
        "range compared ends after the table's last row from there (a record lost at that end "
        "shows as its copy missing on the next cluster).",
        _events,
    )


# ------------------------------------------------------------ clustered pipelines: by identity


#: ``(alias, physical partition, row topics) -> (position or 0, table counts per offset by row
#: topic)``; the row topics: the cluster's, and the plain topic (an older table's) on the initial
Stretch = Callable[[str, TopicPartition, list[str]], tuple[int, dict[str, dict[int, int]]]]


def _prove(
    pipeline: Pipeline,
    fp: FailoverPipeline,
    tps: list[TopicPartition],
    sink: str | None,
    stretch: Stretch,
) -> list[IdentityProof]:
    """The proofs of ``tps``; ``stretch`` gives each physical partition's position and rows."""
    dead = {
        alias: dead_letter_offsets(kafka, pipeline.dead_letter_topic, pipeline.name, sink)
        for alias, kafka in fp.settings.items()
    }
    proofs = []
    for tp in tps:
        held: list[HeldRecord] = []
        table: dict[tuple[str, int], int] = {}
        local = OffsetRange(0, 0)
        for alias, kafka, physical in fp.copies(tp.topic):
            if tp.partition >= partitions_of(kafka, physical.topic):
                continue
            ptp = TopicPartition(physical.topic, tp.partition)
            legacy = alias == fp.initial and physical.is_local
            name = row_topic(alias, physical.topic)
            position, rows = stretch(alias, ptp, [name] + ([ptp.topic] if legacy else []))
            if position == 0:
                continue
            gone = dead[alias].get(ptp, set())
            seen = (o for counts in rows.values() for o in counts)
            low = _low_bound(kafka, ptp, pipeline, seen, gone, position)
            span = OffsetRange(low, max(low, position))
            if legacy:
                local = span
            batch = read_range(kafka, ptp, span)
            held.extend(
                HeldRecord(alias, ptp, o, batch.fingerprint(i), o in gone)
                for i, o in enumerate(batch.offsets)
            )
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
    fp = failover_pipeline(pipeline)
    source = spec.schema.source

    def stretch(
        alias: str, ptp: TopicPartition, names: list[str]
    ) -> tuple[int, dict[str, dict[int, int]]]:
        position = _clickhouse_committed(store, pipeline, ptp, alias)
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
        alias: str, ptp: TopicPartition, names: list[str]
    ) -> tuple[int, dict[str, dict[int, int]]]:
        rows = {n: counts.get((n, ptp.partition), {}) for n in names}
        if alias == stored.cluster:
            return stored.positions.get(ptp, 0), rows
        last = max((o for r in rows.values() for o in r), default=-1)
        return last + 1, rows

    return _prove(pipeline, fp, tps, None, stretch)
