"""Wiring of the cluster switch: a pipeline's configuration as a failover pipeline, and the job.

The ``failover`` job does what ``eos-pipeline failover --pipeline P --to B`` does, with the same
two settings as run config, so that a switch can be launched (and re-launched after a crash)
from the Dagster UI. Both call :func:`eos_pipeline.adapters.failover.switch`.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import os

import dagster as dg

from eos_pipeline.adapters.failover import FailoverPipeline, SwitchReport, switch
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.components.config import EnvRef, Pipeline, PipelinesFile
from eos_pipeline.components.metadata import CLICKHOUSE_SINK
from eos_pipeline.components.resources import KeeperResource
from eos_pipeline.core.failover.bounds import TIMESTAMP
from eos_pipeline.core.failover.switch import ClusterSet, SwitchRefused


def failover_pipeline(pipeline: Pipeline) -> FailoverPipeline:
    """The switch's view of ``pipeline``; refuses a pipeline configured with one cluster."""
    source = pipeline.kafka
    initial = source.initial_cluster
    if initial is None:
        raise SwitchRefused(
            f"pipeline {pipeline.name!r} has no 'kafka.clusters' in its configuration: it reads "
            "one cluster and cannot switch"
        )
    client = {
        k: os.environ.get(v.env, "") if isinstance(v, EnvRef) else v
        for k, v in source.client.items()
    }
    sinks = (CLICKHOUSE_SINK,) if pipeline.clickhouse is not None else ()
    return FailoverPipeline(
        name=pipeline.name,
        topics=tuple(source.topics),
        sinks=sinks,
        clusters=ClusterSet.parse(list(source.clusters), source.mirror_flows),
        settings={a: KafkaSettings(s, dict(client)) for a, s in source.clusters.items()},
        initial=initial,
        offset_syncs_location=source.offset_syncs_location,
        hudi_table=pipeline.hudi.path if pipeline.hudi is not None else None,
    )


def find_pipeline(config: PipelinesFile, name: str) -> Pipeline:
    for pipeline in config.pipelines:
        if pipeline.name == name:
            return pipeline
    known = [p.name for p in config.pipelines]
    raise SwitchRefused(f"unknown pipeline {name!r}: the pipelines file has {known}")


def describe(report: SwitchReport) -> dict[str, dg.MetadataValue]:
    """What a switch did, as metadata (and as the command's printout)."""
    reread = sum(n for n, _ in report.checked.values())
    skipped = sum(k for _, k in report.checked.values())
    return {
        "from": dg.MetadataValue.text(report.source),
        "to": dg.MetadataValue.text(report.target),
        "steps run": dg.MetadataValue.text(", ".join(report.steps) or "none (already active)"),
        "positions moved": dg.MetadataValue.int(len(report.moves)),
        "records re-read to check": dg.MetadataValue.int(reread),
        "of which already written": dg.MetadataValue.int(skipped),
        "re-read starts": dg.MetadataValue.json(report.starts),
        "bounded by timestamp": dg.MetadataValue.int(
            sum(1 for s in report.starts.values() if s["bound"] == TIMESTAMP)
        ),
        "seconds": dg.MetadataValue.float(round(report.seconds, 3)),
    }


class FailoverConfig(dg.Config):
    pipeline: str
    to: str


def failover_job(pipelines: PipelinesFile) -> dg.JobDefinition:
    """The switch as a job: run config ``{pipeline, to}``, the keeper from resources."""

    @dg.op(name="switch_cluster")
    def switch_cluster(
        context: dg.OpExecutionContext, config: FailoverConfig, keeper: KeeperResource
    ) -> dg.Output[str]:
        fp = failover_pipeline(find_pipeline(pipelines, config.pipeline))
        with keeper.store() as store:
            report = switch(store, fp, config.to)
        context.log.info(f"{fp.name}: active on {report.target}")
        return dg.Output(report.target, metadata=describe(report))

    @dg.job(name="failover", description=__doc__)
    def failover() -> None:
        switch_cluster()

    return failover


def failover_jobs(config: PipelinesFile) -> list[dg.JobDefinition]:
    """The job, only when a pipeline names several clusters (one-cluster files are unchanged)."""
    if any(p.kafka.clusters for p in config.pipelines):
        return [failover_job(config)]
    return []
