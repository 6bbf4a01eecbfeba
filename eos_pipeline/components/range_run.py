"""A ClickHouse run over its partitions; one that needs a person is set aside, the run goes on
with the others and then fails naming it (the rule and why: ``core.planning``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from eos_pipeline.components.metadata import CLICKHOUSE_SINK
from eos_pipeline.components.partitions import parse_partition_key
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import NEEDS_PERSON_TAG, encode, state_label
from eos_pipeline.core.positions import sink_state
from eos_pipeline.core.retries import FailureFacts, Fault, diagnose
from eos_pipeline.sinks.clickhouse import SyncReport

#: A run over more partitions logs one summary line, not a line per partition: each line is an
#: event-log record (a third of a wide run's records), and each partition's numbers are on its
#: own materialization anyway.
PER_PARTITION_LOG_LIMIT = 16


def catch_up(
    context: dg.AssetExecutionContext,
    order: Sequence[str],
    reads: Callable[[TopicPartition], list[TopicPartition]],
    sync: Any,
    store: Any,
    pipeline: str,
) -> tuple[list[SyncReport], dict[str, tuple[str, str]]]:
    """Catch each partition key in ``order`` up (``reads``: the physical partitions of a key);
    returns the reports and the keys set aside for a person (only in a run of several keys:
    a single-partition run fails as any run does)."""
    reports: list[SyncReport] = []
    stuck: dict[str, tuple[str, str]] = {}
    planned: list[tuple[str, list[TopicPartition] | Exception]] = []
    for key in order:
        try:
            planned.append((key, reads(parse_partition_key(key))))
        except Exception as exc:  # handled in its turn, below
            planned.append((key, exc))
    every = [tp for _, tps in planned if not isinstance(tps, Exception) for tp in tps]
    with sync.reading(every):  # one Kafka consumer, and Kafka asked once, for the whole run
        for key, tps in planned:
            try:
                if isinstance(tps, Exception):
                    raise tps
                for tp in tps:
                    report = sync.run(tp)
                    reports.append(report)
                    label = key if sync.cluster is None else f"{tp} on {sync.cluster}"
                    if len(order) > PER_PARTITION_LOG_LIMIT:
                        continue
                    context.log.info(
                        f"{label}: [{report.start}, {report.end}) {report.records_read} read, "
                        f"{report.rows_sent} inserted, cases {report.cases or ['caught up']}"
                    )
            except Exception as exc:
                cause = person_cause(exc)
                if len(order) == 1 or cause is None:
                    raise
                where = parse_partition_key(key)
                stuck[key] = stuck_entry(store, pipeline, CLICKHOUSE_SINK, where, cause)
                context.log.error(f"{key} needs a person, set aside: {cause}")
    if len(order) > PER_PARTITION_LOG_LIMIT:
        cases = Counter(case for r in reports for case in r.cases or ["caught up"])
        context.log.info(
            f"{len(reports)} partition(s): {sum(r.records_read for r in reports)} read, "
            f"{sum(r.rows_sent for r in reports)} inserted, cases {dict(cases)}"
        )
    return reports, stuck


def person_cause(exc: BaseException) -> str | None:
    """The cause, if ``exc`` is an error no retry can fix (``core.retries``); else None."""
    chain: list[tuple[str, str]] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 20:
        chain.append((type(seen).__name__, str(seen)))
        seen = seen.__cause__ or seen.__context__
    diagnosis = diagnose(FailureFacts(errors=tuple(chain)))
    return diagnosis.cause if diagnosis.fault is Fault.NEEDS_PERSON else None


def stuck_entry(store: Any, pipeline: str, sink: str, tp: TopicPartition, cause: str) -> tuple:
    """``(state label, cause)`` of ``tp`` as the sensor will see it (its keeper record)."""
    records = store.read_many(pipeline, sink, tp.topic)
    stored = records.get(tp.partition)
    return (state_label(sink_state(stored.record) if stored else None), cause)


def fail_naming(
    context: dg.AssetExecutionContext,
    stuck: Mapping[str, tuple[str, str]],
    written: Mapping[str, Mapping[str, Any]],
) -> None:
    """Materialize the partitions ``written`` (their metadata, reported to the instance at
    once: events logged by a failing step are dropped), record the set-aside ones on the run
    (the sensor reads them) and fail it."""
    for key, values in written.items():
        context.instance.report_runless_asset_event(
            dg.AssetMaterialization(
                context.asset_key,
                partition=key,
                metadata={**values, "written_by_run": context.run.run_id},
            )
        )
    context.instance.add_run_tags(context.run.run_id, {NEEDS_PERSON_TAG: encode(stuck)})
    lines = [f"{key} (from {label}): {cause}" for key, (label, cause) in sorted(stuck.items())]
    raise dg.Failure(
        description="partitions set aside until a person acts (the others were written): "
        + "; ".join(lines),
        metadata={"needs_a_person": dg.MetadataValue.md("\n".join(f"- {x}" for x in lines))},
    )
