"""Kafka in the lineage: each pipeline's topics and its dead-letter topic as external assets.

The product does not write the source topics, so they are external assets (``AssetSpec``): the
graph reads ``topic -> ClickHouse table / Hudi table -> dead-letter topic``. A sensor per
pipeline observes them (``AssetObservation``): per partition the records Kafka holds, its last
stable offset and each sink's lag, with totals Dagster plots over time. It records an
observation only when something changed, so an idle topic does not fill the event log.

Cost per evaluation: per topic one metadata + two ListOffsets requests, one keeper listing with
pipelined gets (ClickHouse positions) and a few file reads of the Hudi timeline (hudi-rs).
No Spark, no ClickHouse.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import hashlib
import json

import dagster as dg

from eos_pipeline.adapters.hudi_timeline import HudiTimelineError, latest_checkpoint
from eos_pipeline.adapters.kafka import KafkaReadError
from eos_pipeline.adapters.kafka.offsets import ends_and_starts
from eos_pipeline.adapters.keeper import shared_store
from eos_pipeline.core.positions import PartitionLag, committed, partition_lags, sink_state
from eos_pipeline.defs.assets import (
    CLICKHOUSE_SINK,
    clickhouse_key,
    dead_letter_key,
    hudi_key,
    topic_key,
)
from eos_pipeline.defs.config import Pipeline
from eos_pipeline.defs.resources import KeeperResource, kafka_resource, kafka_resource_key

__all__ = ["dead_letter_key", "topic_key", "topic_specs", "topics_sensor"]


def sink_keys(pipeline: Pipeline) -> list[dg.AssetKey]:
    keys = []
    if pipeline.clickhouse is not None:
        keys.append(clickhouse_key(pipeline))
    if pipeline.hudi is not None:
        keys.append(hudi_key(pipeline))
    return keys


def topic_specs(pipeline: Pipeline) -> list[dg.AssetSpec]:
    """The pipeline's source topics, then its dead-letter topic (written by both sinks)."""
    bootstrap = pipeline.kafka.bootstrap_servers
    where = bootstrap if isinstance(bootstrap, str) else "(from environment)"
    specs = [
        dg.AssetSpec(
            key=topic_key(topic),
            group_name=pipeline.name,
            kinds={"kafka"},
            description=f"Kafka topic {topic} on {where}: the source of pipeline "
            f"{pipeline.name}. Observed by the {pipeline.name}_topics sensor (records held, "
            "last stable offset and each sink's lag per partition).",
            owners=pipeline.owners or None,
        )
        for topic in pipeline.kafka.topics
    ]
    specs.append(
        dg.AssetSpec(
            key=dead_letter_key(pipeline),
            deps=sink_keys(pipeline),
            group_name=pipeline.name,
            kinds={"kafka"},
            description=f"Dead-letter topic {pipeline.dead_letter_topic}: every record of "
            f"{', '.join(pipeline.kafka.topics)} that no sink could store, once per sink, with "
            "its source topic, partition, offset and error class in its headers.",
            owners=pipeline.owners or None,
        )
    )
    return specs


_LAG_COLUMNS = {CLICKHOUSE_SINK: "clickhouse_lag", "hudi": "hudi_lag"}


def _table(rows: list[PartitionLag], sinks: list[str]) -> dg.TableMetadataValue:
    columns = [
        dg.TableColumn("partition", "int"),
        dg.TableColumn("records_held", "int", description="end minus Kafka's log start"),
        dg.TableColumn("last_stable_offset", "int"),
    ] + [
        dg.TableColumn(_LAG_COLUMNS[s], "int", description="offsets the sink has still to read")
        for s in sinks
    ]
    records = [
        dg.TableRecord(
            {
                "partition": r.partition,
                "records_held": r.held,
                "last_stable_offset": r.end,
                **{_LAG_COLUMNS[s]: r.lags[s] for s in sinks},
            }
        )
        for r in rows
    ]
    return dg.MetadataValue.table(records, schema=dg.TableSchema(columns=columns))


def observation(
    key: dg.AssetKey, rows: list[PartitionLag], sinks: list[str]
) -> dg.AssetObservation:
    """One observation of a topic: the per-partition table and plottable totals."""
    metadata: dict[str, object] = {
        "partitions": _table(rows, sinks),
        "partition_count": len(rows),
        "records_held": sum(r.held for r in rows),
        "last_stable_offset_total": sum(r.end for r in rows),
    }
    for sink in sinks:
        metadata[_LAG_COLUMNS[sink]] = sum(r.lags[sink] for r in rows)
    return dg.AssetObservation(asset_key=key, metadata=metadata)


def _digest(parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _seen(rows: list[PartitionLag]) -> list[object]:
    """What of a topic's rows counts as a change (the cursor is their digest)."""
    return [(r.partition, r.held, r.end, sorted(r.lags.items())) for r in rows]


def _observed(
    context: dg.SensorEvaluationContext,
    events: list[dg.AssetObservation],
    seen: object,
    note: str = "",
) -> dg.SensorResult | dg.SkipReason:
    """The observations, unless nothing changed since the cursor's (then a skip)."""
    digest = _digest(seen)
    if digest == context.cursor or not events:
        return dg.SkipReason(f"no change in the topics since the last observation{note}")
    return dg.SensorResult(asset_events=events, cursor=digest)


def topics_sensor(pipeline: Pipeline, interval: int) -> dg.SensorDefinition:
    keeper_needed = pipeline.clickhouse is not None or bool(pipeline.kafka.clusters)
    resources = {kafka_resource_key(pipeline.name)} | ({"keeper"} if keeper_needed else set())

    @dg.sensor(
        name=f"{pipeline.name}_topics",
        minimum_interval_seconds=interval,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys=resources,
        description="Observes the pipeline's Kafka topics: records held, last stable offset and "
        "each sink's lag per partition (an observation only when something changed).",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        if pipeline.kafka.clusters:
            return _clustered(context, pipeline)
        kafka = kafka_resource(context, pipeline.name).settings()
        hudi_positions: dict[int, int | None] = {}
        if pipeline.hudi is not None:
            try:  # the table's own checkpoint, as the Hudi lag sensor reads it (no JVM)
                checkpoint = latest_checkpoint(pipeline.hudi.path) or {}
            except HudiTimelineError:
                checkpoint = {}
            topic = pipeline.kafka.topics[0]
            hudi_positions = {tp.partition: o for tp, o in checkpoint.items() if tp.topic == topic}
        events: list[dg.AssetObservation] = []
        seen: dict[str, object] = {}
        missing: list[str] = []
        keeper: KeeperResource | None = getattr(context.resources, "keeper", None)
        every = [*pipeline.kafka.topics, pipeline.dead_letter_topic]
        all_ends, all_starts = ends_and_starts(kafka, every)  # two ListOffsets in all
        for index, topic in enumerate(every):
            ends, starts = all_ends.get(topic), all_starts.get(topic)
            if not isinstance(ends, dict) or not isinstance(starts, dict):
                missing.append(topic)
                continue
            positions: dict[str, dict[int, int | None]] = {}
            source = index < len(pipeline.kafka.topics)
            if source and pipeline.clickhouse is not None and keeper is not None:
                with shared_store(keeper.settings()) as store:  # one session across ticks
                    records = store.read_many(pipeline.name, CLICKHOUSE_SINK, topic)
                positions[CLICKHOUSE_SINK] = {
                    p: committed(sink_state(r.record)) for p, r in records.items()
                }
            if source and pipeline.hudi is not None and index == 0:
                positions["hudi"] = hudi_positions
            rows = partition_lags(ends, starts, positions, pipeline.reset)
            seen[topic] = _seen(rows)
            events.append(observation(topic_key(topic), rows, list(positions)))
        note = f"; not found: {', '.join(missing)}" if missing else ""
        return _observed(context, events, seen, note)

    return _sensor


def _clustered(
    context: dg.SensorEvaluationContext, pipeline: Pipeline
) -> dg.SensorResult | dg.SkipReason:
    """The topics of a clustered pipeline as the active cluster holds them (all physical
    topics of each partition summed, see ``defs.clusters.topic_lags``)."""
    from eos_pipeline.adapters.failover import SwitchInProgress
    from eos_pipeline.defs.clusters import active_cluster, topic_lags

    keeper: KeeperResource = context.resources.keeper
    events: list[dg.AssetObservation] = []
    seen: dict[str, object] = {}
    sinks = [s for s, on in (("clickhouse", pipeline.clickhouse), ("hudi", pipeline.hudi)) if on]
    with keeper.store() as store:
        try:
            active = active_cluster(pipeline, store)
            for index, topic in enumerate(pipeline.kafka.topics):
                rows = topic_lags(active, store, topic)
                shown = sinks if index == 0 else [s for s in sinks if s != "hudi"]
                seen[topic] = _seen(rows)
                event = observation(topic_key(topic), rows, shown)
                metadata = {**event.metadata, "cluster": dg.MetadataValue.text(active.alias)}
                events.append(dg.AssetObservation(asset_key=event.asset_key, metadata=metadata))
        except (SwitchInProgress, KafkaReadError) as exc:
            return dg.SkipReason(str(exc))
    return _observed(context, events, [active.alias, seen])
