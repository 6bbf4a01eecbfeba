"""The code location's definitions, in three parts that the components and the tests share.

* :func:`shared_definitions`: the keeper, ClickHouse and Spark resources and the executor
  (``SharedResourcesComponent``);
* :func:`pipeline_definitions`: one pipeline's table assets, checks, sensors, replay jobs and
  Kafka resource (``KafkaTablesComponent``);
* :func:`location_definitions`: what spans pipelines, added once by
  :mod:`eos_pipeline.definitions`: the topics (two pipelines may read one topic: one asset for
  it, as Dagster refuses two different specs under one key) and the failover job.

:func:`build_definitions` puts the three together for a :class:`PipelinesFile` held in memory
(tests, the CLI); the code location gets the same pieces from the component tree.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import os
import warnings
from collections.abc import Iterator

import dagster as dg

from eos_pipeline.components.assets import (
    CLICKHOUSE_SINK,
    HooksFor,
    clickhouse_asset,
    clickhouse_key,
    hudi_asset,
    hudi_key,
    hudi_pool,
)
from eos_pipeline.components.checks import clickhouse_check, hudi_check
from eos_pipeline.components.config import Pipeline, PipelinesFile, Settings
from eos_pipeline.components.failover import failover_jobs
from eos_pipeline.components.replay import clickhouse_replay_job, hudi_replay_job
from eos_pipeline.components.resources import (
    chdb_path,
    kafka_resource_key,
    pipeline_resources,
    shared_resources,
)
from eos_pipeline.components.sensors import (
    clickhouse_lag_sensor,
    hudi_lag_sensor,
    partitions_sensor,
)
from eos_pipeline.components.subject import resolve_subject
from eos_pipeline.components.table_facts import with_table_facts, with_topic_columns
from eos_pipeline.components.topics import source_check, topic_specs, topics_sensor
from eos_pipeline.sinks.hooks import NO_HOOKS

SENSOR_INTERVAL_ENV = "EOS_SENSOR_INTERVAL_SECONDS"
#: Pool of every ClickHouse step on an embedded chDB path: one process per data path, so those
#: runs are serialized (``dagster.yaml`` gives every pool one slot). Covers runs from sensors,
#: backfills and the UI alike.
CHDB_POOL = "chdb"


def sensor_interval(settings: Settings) -> int:
    return int(os.environ.get(SENSOR_INTERVAL_ENV) or settings.sensor_interval_seconds)


def chdb_of(settings: Settings) -> tuple[str | None, str | None]:
    """The embedded chDB path of the ClickHouse URL (or a placeholder) and its pool, if any."""
    url = settings.clickhouse.url
    # A URL from a secret is only known at run time: serialize to be safe.
    path = chdb_path(url) if isinstance(url, str) else "(from environment)"
    return path, (CHDB_POOL if path else None)


def iter_pipeline_assets(
    pipeline: Pipeline, clickhouse_pool: str | None, hooks: HooksFor | None = None
) -> Iterator[dg.AssetsDefinition | dg.AssetChecksDefinition]:
    """Each sink's asset followed by its exactly-once check and its source check (evaluated
    by the topics sensor)."""
    if pipeline.clickhouse is not None:
        yield clickhouse_asset(
            pipeline, clickhouse_pool, hooks(pipeline, CLICKHOUSE_SINK) if hooks else NO_HOOKS
        )
        yield clickhouse_check(pipeline, clickhouse_pool)
        yield source_check(pipeline, clickhouse_key(pipeline))
    if pipeline.hudi is not None:
        pool = hudi_pool(pipeline)
        yield hudi_asset(pipeline, pool, hooks(pipeline, "hudi") if hooks else NO_HOOKS)
        yield hudi_check(pipeline, pool)
        yield source_check(pipeline, hudi_key(pipeline))


def shared_definitions(settings: Settings) -> dg.Definitions:
    """The resources every pipeline uses, and the executor."""
    return dg.Definitions(
        resources=shared_resources(settings),
        # One process per run: chDB allows one process per data path, and the Hudi asset and
        # its check share one Spark session instead of starting a JVM each.
        executor=dg.in_process_executor,
    )


def pipeline_definitions(
    pipeline: Pipeline, settings: Settings, hooks: HooksFor | None = None
) -> dg.Definitions:
    """One pipeline: its sinks' assets and checks, sensors, replay jobs and Kafka resource."""
    interval = sensor_interval(settings)
    path, pool = chdb_of(settings)
    with warnings.catch_warnings():
        # Chosen on purpose and covered by tests: partitioned asset checks (preview) and
        # the single-run backfill policy (beta). Said once here, not on every load.
        warnings.simplefilter("ignore", dg.PreviewWarning)
        warnings.simplefilter("ignore", dg.BetaWarning)
        items = list(iter_pipeline_assets(pipeline, pool, hooks))
    assets = [i for i in items if not isinstance(i, dg.AssetChecksDefinition)]
    checks = [i for i in items if isinstance(i, dg.AssetChecksDefinition)]
    sensors = [partitions_sensor(pipeline, interval), topics_sensor(pipeline, interval)]
    jobs: list[dg.JobDefinition] = []
    if pipeline.clickhouse is not None:
        sensors.append(clickhouse_lag_sensor(pipeline, interval, path))
        jobs.append(clickhouse_replay_job(pipeline, pool))
    if pipeline.hudi is not None:
        sensors.append(hudi_lag_sensor(pipeline, interval))
        jobs.append(hudi_replay_job(pipeline))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)  # code references: beta, chosen
        # "Code references" on each asset page: the file and line of the function that writes it
        referenced = list(dg.with_source_code_references(with_table_facts(pipeline, assets)))
    return dg.Definitions(
        assets=referenced,
        asset_checks=checks,
        sensors=sensors,
        jobs=jobs,
        resources={kafka_resource_key(pipeline.name): pipeline_resources(pipeline)},
    )


def location_definitions(config: PipelinesFile) -> dg.Definitions:
    """What spans the pipelines: the Kafka topics as external assets, one per topic (the first
    pipeline's spec), and the failover job (one job, the pipeline is its run config)."""
    topics: dict[dg.AssetKey, dg.AssetSpec] = {}
    for pipeline in config.pipelines:
        for spec in topic_specs(pipeline):
            topics.setdefault(spec.key, with_topic_columns(pipeline, spec))
    return dg.Definitions(assets=list(topics.values()), jobs=failover_jobs(config))


def build_definitions(config: PipelinesFile, hooks: HooksFor | None = None) -> dg.Definitions:
    """Assets, checks, sensors, jobs and resources for every pipeline of ``config``.

    ``hooks`` gives each sink's runs their hooks (:mod:`eos_pipeline.sinks.hooks`); the product
    passes none, the fault suite's code location does.
    """
    settings = config.settings
    resolved = [resolve_subject(p, config.source) for p in config.pipelines]
    config = config.model_copy(update={"pipelines": resolved})
    merged = dg.Definitions.merge(
        shared_definitions(settings),
        *(pipeline_definitions(p, settings, hooks) for p in config.pipelines),
    )
    spanning = location_definitions(config)
    # Tables before topics, the failover job before the replay jobs: the order tests rely on.
    return dg.Definitions(
        assets=[*(merged.assets or ()), *(spanning.assets or ())],
        asset_checks=merged.asset_checks,
        sensors=merged.sensors,
        jobs=[*(spanning.jobs or ()), *(merged.jobs or ())],
        resources=merged.resources,
        executor=merged.executor,
    )
