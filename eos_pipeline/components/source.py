"""A pipeline's source as its configuration says: one cluster, or several with a switch.

The one place in the Dagster layer that looks at ``kafka.clusters``; also the switch's wiring:
the ``failover`` job does what ``eos-pipeline failover`` does, and what ``failover status``
prints is on the topics' observations (:func:`status_summary`).
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from eos_pipeline.adapters.failover import FailoverPipeline, SwitchReport, switch
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.components.config import EnvRef, Pipeline, PipelinesFile
from eos_pipeline.components.metadata import CLICKHOUSE_SINK
from eos_pipeline.components.resources import KeeperResource
from eos_pipeline.core.failover import TIMESTAMP, UNREACHABLE, ClusterSet, SwitchRefused
from eos_pipeline.sinks.source import ActiveCluster, OneCluster, Source

#: The ``failover`` job's description in the UI.
FAILOVER_DESCRIPTION = (
    "Switch a pipeline to another Kafka cluster: what `eos-pipeline failover --pipeline P --to B` "
    "does, with the same two settings as run config; safe to launch again after a crash. What "
    "`eos-pipeline failover status` prints is on the topics' observations."
)


@dataclass(frozen=True)
class PipelineSource:
    """What the definitions of ``pipeline`` need to know of where it reads."""

    pipeline: Pipeline

    @property
    def switches(self) -> bool:
        """Several clusters, one active: the keeper says which (so reading needs it, not only
        the ClickHouse sink), and a switch moves it. Such runs end once caught up (no following)
        and replays are refused."""
        return bool(self.pipeline.kafka.clusters)

    def endpoint(self) -> str:
        """Where the records are read, as the configuration names it (secrets never)."""
        kafka = self.pipeline.kafka
        if kafka.clusters:
            return ", ".join(f"{alias}={servers}" for alias, servers in kafka.clusters.items())
        return kafka.bootstrap_servers if isinstance(kafka.bootstrap_servers, str) else "(env)"

    def failover_note(self) -> str:
        """What a topic's description says of failover: how to switch, or why there is no job."""
        clusters = self.pipeline.kafka.clusters
        if not clusters:
            return (
                " Failover: not configured (one cluster), so the code location has no `failover` "
                "job; add kafka.clusters to switch clusters, see docs/failover.md."
            )
        return (
            f" Failover: clusters {', '.join(clusters)}; the `failover` job switches them, and "
            "the observation's `failover_status` says what `eos-pipeline failover status` prints."
        )

    @contextmanager
    def opened(self, context: Any, kafka: KafkaSettings) -> Iterator[Source]:
        """:meth:`at` with the keeper session it needs from ``context``'s ``keeper`` resource,
        open while the source is used (one cluster needs none: its Hudi asset has no keeper)."""
        if not self.switches:
            yield OneCluster(kafka)
            return
        with context.resources.keeper.store() as store:
            yield self.at(kafka, store)

    def at(self, kafka: KafkaSettings, store: KeeperStateStore | None = None) -> Source:
        """The source of one run or tick: ``kafka`` (the pipeline's Kafka resource) for one
        cluster; the active cluster from ``store`` for several (``SwitchInProgress``
        mid-switch)."""
        if not self.switches:
            return OneCluster(kafka)
        assert store is not None, "a pipeline with several clusters reads the keeper"
        return ActiveCluster(failover_pipeline(self.pipeline), store)


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
        settings={
            a: KafkaSettings(s, dict(client), source.request_timeout_s)
            for a, s in source.clusters.items()
        },
        initial=initial,
        offset_syncs_location=source.offset_syncs_location,
        hudi_table=pipeline.hudi.path if pipeline.hudi is not None else None,
    )


def source_of(pipeline: Pipeline) -> PipelineSource:
    return PipelineSource(pipeline)


# ------------------------------------------------------------------------- the switch as a job


def find_pipeline(config: PipelinesFile, name: str) -> Pipeline:
    for pipeline in config.pipelines:
        if pipeline.name == name:
            return pipeline
    known = [p.name for p in config.pipelines]
    raise SwitchRefused(f"unknown pipeline {name!r}: the pipelines file has {known}")


def describe(report: SwitchReport) -> dict[str, dg.MetadataValue]:
    """What a switch did, as metadata (and as the command's printout)."""
    reread, past = report.reread(), report.past_copy()
    starts = {
        k: {**v, "re-read": reread.get(k), "read past the copy": past.get(k)}
        for k, v in report.starts.items()
    }
    return {
        "from": dg.MetadataValue.text(report.source),
        "to": dg.MetadataValue.text(report.target),
        "steps run": dg.MetadataValue.text(", ".join(report.steps) or "none (already active)"),
        "positions moved": dg.MetadataValue.int(len(report.moves)),
        # The docs' terms (docs/failover.md): the re-read is what the sinks read again before
        # the copy and skip; what the check read after the copy is new to them.
        "records re-read (through the copy, skipped)": dg.MetadataValue.int(sum(reread.values())),
        "records read past the copy (to check)": dg.MetadataValue.int(sum(past.values())),
        "re-read starts": dg.MetadataValue.json(starts),
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

    @dg.job(name="failover", description=FAILOVER_DESCRIPTION)
    def failover() -> None:
        switch_cluster()

    return failover


def failover_jobs(config: PipelinesFile) -> list[dg.JobDefinition]:
    """The job, only when a pipeline names several clusters (one-cluster files are unchanged)."""
    if any(source_of(p).switches for p in config.pipelines):
        return [failover_job(config)]
    return []


def status_summary(store: Any, pipeline: Pipeline) -> dict[str, Any]:
    """What ``eos-pipeline failover status`` prints for ``pipeline``, read now (no sampling
    pause: "replicating" is told by MM2's fresh offset syncs), as JSON-able data: the lines,
    each flow's state and lag, and when it was read."""
    from eos_pipeline.adapters.failover import read_status

    return shape_status(read_status(store, failover_pipeline(pipeline), sample_s=0.0))


def shape_status(status: Any, at: float | None = None) -> dict[str, Any]:
    """A ``FailoverStatus`` as JSON-able data (kept in the topics sensor's cursor)."""
    return {
        "lines": status.lines(),
        "flows": {str(f.flow): [f.state, f.lag] for f in status.flows},
        "at": round(time.time() if at is None else at, 3),
    }


def status_metadata(summary: Mapping[str, Any]) -> dict[str, dg.MetadataValue]:
    """A status summary as a topic's metadata: the printout, and per flow MM2's state and
    lag (a number Dagster plots; none for a flow that could not be read)."""
    read_at = datetime.fromtimestamp(summary["at"], UTC).isoformat(timespec="seconds")
    out: dict[str, dg.MetadataValue] = {
        "failover_status": dg.MetadataValue.md("```\n" + "\n".join(summary["lines"]) + "\n```"),
        "failover_status_read_at": dg.MetadataValue.text(read_at),
    }
    for flow, (state, lag) in sorted(summary["flows"].items()):
        out[f"mm2 {flow}"] = dg.MetadataValue.text(state)
        if state != UNREACHABLE:
            out[f"mm2_lag {flow}"] = dg.MetadataValue.int(lag)
    return out
