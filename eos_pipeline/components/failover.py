"""Wiring of the cluster switch: a pipeline's configuration as a failover pipeline, and the job.

The ``failover`` job does what ``eos-pipeline failover --pipeline P --to B`` does, with the same
two settings as run config, so that a switch can be launched (and re-launched after a crash)
from the Dagster UI. Both call :func:`eos_pipeline.adapters.failover.switch`. What
``eos-pipeline failover status`` prints is on the topics' observations in the UI
(:func:`status_summary`, read by the topics sensor).
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from eos_pipeline.adapters.failover import SwitchReport, switch
from eos_pipeline.components.config import Pipeline, PipelinesFile
from eos_pipeline.components.resources import KeeperResource
from eos_pipeline.components.source import failover_pipeline, source_of
from eos_pipeline.core.failover import TIMESTAMP, UNREACHABLE, SwitchRefused


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

    @dg.job(name="failover", description=__doc__)
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
