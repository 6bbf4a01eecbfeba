"""Kafka in the lineage: each pipeline's topics and its dead-letter topic as external assets.

The product never writes a topic, so they are external assets, observed by one sensor per
pipeline: per partition the records held, the last stable offset and each sink's lag. It records
when something changed, and at least every :data:`STEADY_SECONDS`, so a lag plot has a point on
a steady cadence while an idle topic adds one event a minute. When the source cannot be read,
every topic says "unreachable since" and each table's :data:`SOURCE_CHECK` (evaluated by this
sensor only, never a run) fails with severity WARN, passing again by itself once it answers.
No Spark, no ClickHouse.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from eos_pipeline.adapters.hudi_timeline import HudiTimelineError, latest_checkpoint
from eos_pipeline.adapters.kafka import KafkaSettings, ends_and_starts
from eos_pipeline.adapters.keeper import shared_store
from eos_pipeline.components.assets import (
    CLICKHOUSE_SINK,
    DEAD_LETTER_GROUP,
    KAFKA_GROUP,
    PIPELINE_TAG,
    clickhouse_key,
    dead_letter_key,
    hudi_key,
    topic_key,
)
from eos_pipeline.components.config import Pipeline
from eos_pipeline.components.health import (
    KAFKA,
    NamedFault,
    OnFault,
    Streak,
    pipeline_sensor,
)
from eos_pipeline.components.resources import KeeperResource, kafka_resource
from eos_pipeline.components.source import source_of, status_metadata, status_summary
from eos_pipeline.core.planning import partition_key
from eos_pipeline.core.positions import PartitionLag, committed, partition_lags, sink_state

#: Longest time between two observations of a topic, changed or not.
STEADY_SECONDS = 60
#: The check on each table saying whether its source can be read (evaluated by the topics
#: sensor only).
SOURCE_CHECK = "source_reachable"


def _sinks(pipeline: Pipeline) -> list[str]:
    return [s for s, on in ((CLICKHOUSE_SINK, pipeline.clickhouse), ("hudi", pipeline.hudi)) if on]


def sink_keys(pipeline: Pipeline) -> list[dg.AssetKey]:
    keys = {CLICKHOUSE_SINK: clickhouse_key, "hudi": hudi_key}
    return [keys[sink](pipeline) for sink in _sinks(pipeline)]


def topic_specs(pipeline: Pipeline) -> list[dg.AssetSpec]:
    """The pipeline's source topics, then its dead-letter topic (written by both sinks)."""
    bootstrap = pipeline.kafka.bootstrap_servers
    where = bootstrap if isinstance(bootstrap, str) else "(from environment)"
    failover = source_of(pipeline).failover_note()
    specs = [
        dg.AssetSpec(
            key=topic_key(topic),
            group_name=KAFKA_GROUP,
            tags={PIPELINE_TAG: pipeline.name},
            kinds={"kafka", "topic"},
            description=f"Kafka topic {topic} on {where}: the source of pipeline "
            f"{pipeline.name}. Observed by the {pipeline.name}_topics sensor (records held, "
            "last stable offset and each sink's lag per partition; when the broker cannot be "
            "read, reachable: false, since when and why). The product never writes a topic, "
            "so Dagster shows it 'Never materialized' with 'No automations': its state is the "
            "latest observation under Metadata, its history under Events." + failover,
            owners=pipeline.owners or None,
        )
        for topic in pipeline.kafka.topics
    ]
    specs.append(
        dg.AssetSpec(
            key=dead_letter_key(pipeline),
            deps=sink_keys(pipeline),
            group_name=DEAD_LETTER_GROUP,
            tags={PIPELINE_TAG: pipeline.name},
            kinds={"kafka", "dlq"},
            description=f"Dead-letter topic {pipeline.dead_letter_topic}: every record of "
            f"{', '.join(pipeline.kafka.topics)} that no sink could store, once per sink, with "
            "its source topic, partition, offset and error class in its headers.",
            owners=pipeline.owners or None,
        )
    )
    return specs


def _table(rows: list[PartitionLag], sinks: list[str]) -> dg.TableMetadataValue:
    columns = [
        dg.TableColumn("partition", "int"),
        dg.TableColumn("records_held", "int", description="end minus Kafka's log start"),
        dg.TableColumn("last_stable_offset", "int"),
    ] + [
        dg.TableColumn(f"{s}_lag", "int", description="offsets the sink has still to read")
        for s in sinks
    ]
    records = [
        dg.TableRecord(
            {
                "partition": r.partition,
                "records_held": r.held,
                "last_stable_offset": r.end,
                **{f"{s}_lag": r.lags[s] for s in sinks},
            }
        )
        for r in rows
    ]
    return dg.MetadataValue.table(records, schema=dg.TableSchema(columns=columns))


def observation(
    key: dg.AssetKey,
    rows: list[PartitionLag],
    sinks: list[str],
    extra: Mapping[str, object] | None = None,
) -> dg.AssetObservation:
    """One observation of a topic: the per-partition table and plottable totals (and ``extra``)."""
    metadata: dict[str, object] = {
        # the counterpart of an outage's ``reachable: false`` (``unreachable_events``)
        "reachable": True,
        "partitions": _table(rows, sinks),
        "partition_count": len(rows),
        "records_held": sum(r.held for r in rows),
        "last_stable_offset_total": sum(r.end for r in rows),
    }
    for sink in sinks:
        metadata[f"{sink}_lag"] = sum(r.lags[sink] for r in rows)
    return dg.AssetObservation(asset_key=key, metadata={**metadata, **(extra or {})})


def _seen(rows: list[PartitionLag]) -> list[object]:
    """What of a topic's rows counts as a change (the cursor is their digest)."""
    return [(r.partition, r.held, r.end, sorted(r.lags.items())) for r in rows]


def _observed(
    context: dg.SensorEvaluationContext,
    events: list[dg.AssetObservation],
    seen: object,
    cursor: str | None,
    pipeline: Pipeline,
    note: str = "",
    keep: dict[str, object] | None = None,
    force: bool = False,
    finish: Callable[[list[dg.AssetObservation]], list[dg.AssetObservation]] | None = None,
) -> dg.SensorResult | dg.SkipReason:
    """The observations, if something changed since the cursor's digest, the last ones are
    :data:`STEADY_SECONDS` old or ``force``; a skip otherwise. With them, the tables'
    :data:`SOURCE_CHECK` passes where it has not since their latest materialization (the UI
    shows a check's evaluation for the latest one). ``keep``: more for the cursor; ``finish``:
    adds what is read only when the observations are recorded."""
    digest = hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()[:16]
    data = _cursor(cursor)
    last_digest = data.get("digest") if data else cursor  # a bare digest from before: time 0
    at = data.get("at")
    last_at = float(at) if isinstance(at, int | float) else 0.0
    now = time.time()
    passes = _passes(context, pipeline, data.get("checked_at"))
    if not events or (
        not force and not passes and digest == last_digest and now - last_at < STEADY_SECONDS
    ):
        return dg.SkipReason(f"no change in the topics since the last observation{note}")
    state = {"digest": digest, "at": round(now, 3), "checked_at": round(now, 3), **(keep or {})}
    recorded = finish(events) if finish is not None else events
    return dg.SensorResult(asset_events=[*recorded, *passes], cursor=json.dumps(state))


def _passes(
    context: dg.SensorEvaluationContext, pipeline: Pipeline, checked_at: object
) -> list[dg.AssetCheckEvaluation]:
    """Passing :data:`SOURCE_CHECK` evaluations for the tables materialized since
    ``checked_at`` (every table when it never passed, or not since an outage)."""
    keys = sink_keys(pipeline)
    if isinstance(checked_at, int | float):
        records = context.instance.get_asset_records(keys)
        keys = [
            r.asset_entry.asset_key
            for r in records
            if (m := r.asset_entry.last_materialization_record) and m.timestamp > checked_at
        ]
    return source_evaluations(pipeline, keys=keys) if keys else []


def dead_letter_counts(kafka: KafkaSettings, pipeline: Pipeline) -> dict[str, object]:
    """Dead letters of ``pipeline`` per source partition and sink (the whole dead-letter log is
    read: it is small by design; done only when the topics are observed), with totals."""
    from eos_pipeline.adapters.dlq import read_dead_letter_log
    from eos_pipeline.core.replay import dead_offsets

    log = read_dead_letter_log(kafka, pipeline.dead_letter_topic)
    sinks = _sinks(pipeline)
    per_sink = {sink: dead_offsets(log, pipeline.name, sink) for sink in sinks}
    sources = sorted({tp for found in per_sink.values() for tp in found})
    columns = [dg.TableColumn("source_partition", "string")] + [
        dg.TableColumn(f"{sink}_dead_letters", "int") for sink in sinks
    ]
    records = [
        dg.TableRecord(
            {
                "source_partition": partition_key(tp),
                **{f"{sink}_dead_letters": len(per_sink[sink].get(tp, ())) for sink in sinks},
            }
        )
        for tp in sources
    ]
    out: dict[str, object] = {
        "dead_letters_by_source_partition": dg.MetadataValue.table(
            records, schema=dg.TableSchema(columns=columns)
        )
    }
    for sink in sinks:
        out[f"{sink}_dead_letters_total"] = sum(len(v) for v in per_sink[sink].values())
    return out


def _cursor(cursor: str | None) -> dict[str, object]:
    """The topics sensor's own cursor as a dict (empty when absent or a bare digest)."""
    try:
        data = json.loads(cursor) if cursor else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def source_check(pipeline: Pipeline, key: dg.AssetKey) -> dg.AssetChecksDefinition:
    """``source_reachable`` on the table ``key``: evaluated by the ``<pipeline>_topics`` sensor
    only (a backfill or a UI run that includes it files nothing: skipped there)."""

    @dg.asset_check(
        asset=key,
        name=SOURCE_CHECK,
        blocking=False,
        description=f"Whether the table's source can be read, as the {pipeline.name}_topics "
        "sensor finds it on every tick: failed (WARN) while the broker or keeper does not "
        "answer, naming the endpoint, since when and the fix; passed again by itself once it "
        "answers. Evaluated by the sensor only: executing it here evaluates nothing.",
    )
    def _check(context: dg.AssetCheckExecutionContext) -> Iterator[Any]:
        context.log.info(
            f"{SOURCE_CHECK} is evaluated by the sensor {pipeline.name}_topics, not by runs"
        )
        yield dg.Output(None)

    return _check


def source_evaluations(
    pipeline: Pipeline,
    fault: NamedFault | None = None,
    metadata: dict | None = None,
    keys: list[dg.AssetKey] | None = None,
) -> list[dg.AssetCheckEvaluation]:
    """:data:`SOURCE_CHECK` on the tables ``keys`` (default: every table of ``pipeline``):
    passed, or failed (WARN) for ``fault`` with the outage's ``metadata`` (the topics')."""
    if fault is None:
        where = source_of(pipeline).endpoint()
        description = f"{KAFKA} {where} answered (read by the {pipeline.name}_topics sensor)"
        metadata = {"reachable": True, "endpoint": dg.MetadataValue.text(where)}
    else:
        since = metadata["unreachable_since"].value if metadata else "?"
        description = (
            f"{fault.resource} {fault.endpoint} {fault.state} since {since}: {fault.cause}. "
            f"Fix: {fault.fix}"
        )
    return [
        dg.AssetCheckEvaluation(
            asset_key=key,
            check_name=SOURCE_CHECK,
            passed=fault is None,
            severity=dg.AssetCheckSeverity.WARN,
            description=description,
            metadata=metadata,
            blocking=False,
        )
        for key in (sink_keys(pipeline) if keys is None else keys)
    ]


def unreachable_events(pipeline: Pipeline) -> OnFault:
    """Observations of every topic of ``pipeline`` saying its source cannot be read."""

    def events(fault: NamedFault, streak: Streak) -> list[Any]:
        since = datetime.fromtimestamp(streak.since or time.time(), UTC).isoformat(
            timespec="seconds"
        )
        metadata = {
            "reachable": False,
            "unreachable_since": dg.MetadataValue.text(since),
            "unreachable": dg.MetadataValue.text(f"{fault.resource} {fault.endpoint}"),
            "cause": dg.MetadataValue.text(fault.cause),
            "fix": dg.MetadataValue.text(fault.fix),
            "failed_ticks": streak.failures,
        }
        keys = [topic_key(t) for t in pipeline.kafka.topics] + [dead_letter_key(pipeline)]
        observed = [dg.AssetObservation(asset_key=key, metadata=metadata) for key in keys]
        # the tables too: their source_reachable check fails (WARN) for as long as it lasts
        return [*observed, *source_evaluations(pipeline, fault, metadata)]

    return events


def topics_sensor(pipeline: Pipeline, interval: int) -> dg.SensorDefinition:
    return pipeline_sensor(
        pipeline,
        "topics",
        interval,
        lambda context, cursor: _observe(context, pipeline, cursor),
        "Observes the pipeline's Kafka topics: records held, last stable offset and each sink's "
        "lag per partition (on change, and at least every minute); when the broker cannot be "
        "read, 'unreachable since <time>' on every topic.",
        keeper=pipeline.clickhouse is not None or source_of(pipeline).switches,
        on_fault=unreachable_events(pipeline),
    )


def _observe(
    context: dg.SensorEvaluationContext, pipeline: Pipeline, cursor: str | None
) -> dg.SensorResult | dg.SkipReason:
    """One observation of the pipeline's topics (a plain or a clustered pipeline)."""
    if source_of(pipeline).switches:  # the active cluster's physical topics, summed
        return _clustered(context, pipeline, cursor)
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
    # two ListOffsets in all; Kafka not answering raises (``unreachable_events``)
    all_ends, all_starts = ends_and_starts(kafka, every)
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
        if pipeline.hudi is not None and index == 0:
            positions["hudi"] = hudi_positions
        rows = partition_lags(ends, starts, positions, pipeline.reset)
        seen[topic] = _seen(rows)
        events.append(observation(topic_key(topic), rows, list(positions)))
    note = f"; not found: {', '.join(missing)}" if missing else ""

    def with_dead_letters(events: list[dg.AssetObservation]) -> list[dg.AssetObservation]:
        """The dead-letter topic's own numbers: dead letters per source partition and
        sink (read only when the observations are recorded)."""
        if pipeline.dead_letter_topic in missing:
            return events
        dlq = events[-1]
        metadata = {**dlq.metadata, **dead_letter_counts(kafka, pipeline)}
        return [*events[:-1], dg.AssetObservation(asset_key=dlq.asset_key, metadata=metadata)]

    return _observed(context, events, seen, cursor, pipeline, note, finish=with_dead_letters)


def _clustered(
    context: dg.SensorEvaluationContext, pipeline: Pipeline, cursor: str | None
) -> dg.SensorResult | dg.SkipReason:
    """The topics of a clustered pipeline as the active cluster holds them (all physical
    topics of each partition summed, see ``sinks.source.ActiveCluster.topic_lags``)."""
    from eos_pipeline.adapters.failover import SwitchInProgress
    from eos_pipeline.sinks.source import ActiveCluster

    keeper: KeeperResource = context.resources.keeper
    kafka = kafka_resource(context, pipeline.name).settings()
    events: list[dg.AssetObservation] = []
    seen: dict[str, object] = {}
    sinks = _sinks(pipeline)
    status = _cursor(cursor).get("failover")
    stale = not isinstance(status, dict) or time.time() - status["at"] >= STEADY_SECONDS
    with keeper.store() as store:
        try:
            active = source_of(pipeline).at(kafka, store)
            assert isinstance(active, ActiveCluster)
            if stale:  # what `eos-pipeline failover status` prints, at most once a minute
                status = status_summary(store, pipeline)
            assert isinstance(status, dict)
            extra = {"cluster": dg.MetadataValue.text(active.alias), **status_metadata(status)}
            for index, topic in enumerate(pipeline.kafka.topics):
                rows = active.topic_lags(
                    store,
                    topic,
                    clickhouse_sink=CLICKHOUSE_SINK if pipeline.clickhouse is not None else None,
                    hudi_table=pipeline.hudi.path if index == 0 and pipeline.hudi else None,
                    reset=pipeline.reset,
                )
                shown = sinks if index == 0 else [s for s in sinks if s != "hudi"]
                seen[topic] = _seen(rows)
                events.append(observation(topic_key(topic), rows, shown, extra))
        except SwitchInProgress as exc:
            return dg.SkipReason(str(exc))
    seen_all = [active.alias, seen]
    keep = {"failover": status}
    return _observed(context, events, seen_all, cursor, pipeline, keep=keep, force=stale)
