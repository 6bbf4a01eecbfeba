"""A pipeline's source as its configuration says: one cluster, or several with a switch.

The one place in the Dagster layer that looks at ``kafka.clusters``. :class:`PipelineSource` is
built once per pipeline when the definitions are built and answers what the definitions need to
know (whether the keeper is needed to find the cluster, whether runs may follow, whether replays
are offered, where the records live); per run or sensor tick, :meth:`PipelineSource.at` gives
the :class:`~eos_pipeline.sinks.source.Source` to read through. :func:`failover_pipeline` is the
switch's view of the same configuration (``components.failover``, ``eos-pipeline failover``).
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from eos_pipeline.adapters.failover import FailoverPipeline
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.components.config import EnvRef, Pipeline
from eos_pipeline.components.metadata import CLICKHOUSE_SINK
from eos_pipeline.core.failover import ClusterSet, SwitchRefused
from eos_pipeline.sinks.source import ActiveCluster, OneCluster, Source


@dataclass(frozen=True)
class PipelineSource:
    """What the definitions of ``pipeline`` need to know of where it reads."""

    pipeline: Pipeline

    @property
    def switches(self) -> bool:
        """Several clusters, one active: the keeper says which, and a switch moves it. Such
        runs end once caught up (no following) and replays are refused."""
        return bool(self.pipeline.kafka.clusters)

    @property
    def needs_keeper(self) -> bool:
        """Whether reading (not only the ClickHouse sink) needs the keeper."""
        return self.switches

    def endpoint(self) -> str:
        """Where the records are read, as the configuration names it (secrets never)."""
        kafka = self.pipeline.kafka
        if kafka.clusters:
            return ", ".join(f"{alias}={servers}" for alias, servers in kafka.clusters.items())
        return kafka.bootstrap_servers if isinstance(kafka.bootstrap_servers, str) else "(env)"

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


__all__ = ["PipelineSource", "failover_pipeline", "source_of"]
