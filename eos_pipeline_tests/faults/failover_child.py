"""Commands of the fault child for a pipeline with two clusters (MirrorMaker 2 failover).

* ``switch``: :func:`eos_pipeline.adapters.failover.switch` to ``to``; the armed step
  (``EOS_FAULT_STEP``) may be one of its boundaries (``switch_after_begin``...);
* ``cluster-clickhouse``: one ClickHouse run on the active cluster, over its physical topics
  (:func:`eos_pipeline_tests.support.sink_runs.run_active_clickhouse`), armed at a sink step;
* ``cluster-ids``: ``{event id: rows}`` of the table (read in a process of its own: chDB
  allows one data path per process).

The job names ``name``, ``topic``, ``clusters`` (alias -> bootstrap servers), ``initial``,
``location``, ``keeper``, ``root``, ``chdb_path``, ``database``, ``table``, ``dlq_topic``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _pipeline(job: dict[str, Any]) -> Any:
    from eos_pipeline.adapters.failover import FailoverPipeline
    from eos_pipeline.adapters.kafka import KafkaSettings
    from eos_pipeline.core.failover import ClusterSet

    return FailoverPipeline(
        name=job["name"],
        topics=(job["topic"],),
        sinks=("clickhouse",),
        clusters=ClusterSet.parse(list(job["clusters"])),
        settings={a: KafkaSettings(s) for a, s in job["clusters"].items()},
        initial=job["initial"],
        offset_syncs_location=job["location"],
    )


def _store(job: dict[str, Any]) -> Any:
    from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore

    return KeeperStateStore(KeeperSettings(hosts=job["keeper"], root=job["root"]))


def _switch(job: dict[str, Any], fault: Callable[[str], None], emit: Callable[[Any], None]) -> None:
    from eos_pipeline.adapters.failover import switch

    with _store(job) as store:
        report = switch(store, _pipeline(job), job["to"], hook=fault)
    emit({"steps": list(report.steps), "moved": len(report.moves)})


def _sink(job: dict[str, Any]) -> tuple[Any, Any]:
    """The chDB sink and table spec (the single-cluster child's setup, one ``id`` column)."""
    from eos_pipeline_tests.faults.child import _clickhouse_setup

    plain = {**job, "bootstrap": "", "schema": {"id": "String"}, "pipeline": job["name"]}
    _, sink, spec = _clickhouse_setup(plain)
    return sink, spec


def _cluster_clickhouse(
    job: dict[str, Any], fault: Callable[[str], None], emit: Callable[[Any], None]
) -> None:
    from eos_pipeline_tests.support.sink_runs import run_active_clickhouse

    sink, spec = _sink(job)
    with _store(job) as store:
        reports = run_active_clickhouse(
            _pipeline(job), spec, store, sink, job["dlq_topic"], fault=fault
        )
    sink.close()
    emit([[str(r.tp), r.reread, r.skipped, r.rows_sent] for r in reports])


def _cluster_ids(
    job: dict[str, Any], fault: Callable[[str], None], emit: Callable[[Any], None]
) -> None:
    sink, _ = _sink(job)
    rows = sink.client.query(
        f"SELECT id, count() FROM {job['database']}.{job['table']} GROUP BY id"
    ).result_rows
    sink.close()
    emit({str(i): int(n) for i, n in rows})


COMMANDS = {
    "switch": _switch,
    "cluster-clickhouse": _cluster_clickhouse,
    "cluster-ids": _cluster_ids,
}
