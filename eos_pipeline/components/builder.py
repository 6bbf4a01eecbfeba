"""``build_definitions(config)``: the whole Dagster code location from a pipelines file."""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import os
import warnings
from collections.abc import Iterator

import dagster as dg

from eos_pipeline.components.assets import (
    CLICKHOUSE_SINK,
    HooksFor,
    clickhouse_asset,
    hudi_asset,
    hudi_pool,
)
from eos_pipeline.components.checks import clickhouse_check, hudi_check
from eos_pipeline.components.config import Pipeline, PipelinesFile
from eos_pipeline.components.failover import failover_jobs
from eos_pipeline.components.replay import replay_jobs
from eos_pipeline.components.resources import build_resources, chdb_path
from eos_pipeline.components.sensors import (
    clickhouse_lag_sensor,
    hudi_lag_sensor,
    partitions_sensor,
)
from eos_pipeline.components.topics import topic_specs, topics_sensor
from eos_pipeline.sinks.hooks import NO_HOOKS

SENSOR_INTERVAL_ENV = "EOS_SENSOR_INTERVAL_SECONDS"
#: Pool of every ClickHouse step on an embedded chDB path: one process per data path, so those
#: runs are serialized (``dagster.yaml`` gives every pool one slot). Covers runs from sensors,
#: backfills and the UI alike.
CHDB_POOL = "chdb"


def iter_pipeline_assets(
    pipeline: Pipeline, clickhouse_pool: str | None, hooks: HooksFor | None = None
) -> Iterator[dg.AssetsDefinition | dg.AssetChecksDefinition]:
    """Each sink's asset followed by its exactly-once check."""
    if pipeline.clickhouse is not None:
        yield clickhouse_asset(
            pipeline, clickhouse_pool, hooks(pipeline, CLICKHOUSE_SINK) if hooks else NO_HOOKS
        )
        yield clickhouse_check(pipeline, clickhouse_pool)
    if pipeline.hudi is not None:
        pool = hudi_pool(pipeline)
        yield hudi_asset(pipeline, pool, hooks(pipeline, "hudi") if hooks else NO_HOOKS)
        yield hudi_check(pipeline, pool)


def build_definitions(config: PipelinesFile, hooks: HooksFor | None = None) -> dg.Definitions:
    """Assets, checks, sensors and resources for every pipeline of ``config``.

    ``hooks`` gives each sink's runs their hooks (:mod:`eos_pipeline.sinks.hooks`); the product
    passes none, the fault suite's code location does.
    """
    interval = int(os.environ.get(SENSOR_INTERVAL_ENV) or config.sensor_interval_seconds)
    url = config.clickhouse.url
    # A URL from a secret is only known at run time: serialize to be safe.
    path = chdb_path(url) if isinstance(url, str) else "(from environment)"
    pool = CHDB_POOL if path else None
    assets: list[dg.AssetsDefinition] = []
    checks: list[dg.AssetChecksDefinition] = []
    sensors: list[dg.SensorDefinition] = []
    # Kafka topics as external assets; two pipelines may read one topic: one spec for it.
    topics: dict[dg.AssetKey, dg.AssetSpec] = {}
    for pipeline in config.pipelines:
        for spec in topic_specs(pipeline):
            topics.setdefault(spec.key, spec)
        with warnings.catch_warnings():
            # Chosen on purpose and covered by tests: partitioned asset checks (preview) and
            # the single-run backfill policy (beta). Said once here, not on every load.
            warnings.simplefilter("ignore", dg.PreviewWarning)
            warnings.simplefilter("ignore", dg.BetaWarning)
            items = list(iter_pipeline_assets(pipeline, pool, hooks))
        for item in items:
            if isinstance(item, dg.AssetChecksDefinition):
                checks.append(item)
            else:
                assets.append(item)
        sensors.append(partitions_sensor(pipeline, interval))
        sensors.append(topics_sensor(pipeline, interval))
        if pipeline.clickhouse is not None:
            sensors.append(clickhouse_lag_sensor(pipeline, interval, path))
        if pipeline.hudi is not None:
            sensors.append(hudi_lag_sensor(pipeline, interval))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)  # code references: beta, chosen
        # "Code references" on each asset page: the file and line of the function that writes it
        referenced = list(dg.with_source_code_references(assets))
    return dg.Definitions(
        assets=[*referenced, *topics.values()],
        asset_checks=checks,
        sensors=sensors,
        jobs=[*failover_jobs(config), *replay_jobs(config, pool)],
        resources=build_resources(config),
        # One process per run: chDB allows one process per data path, and the Hudi asset and
        # its check share one Spark session instead of starting a JVM each.
        executor=dg.in_process_executor,
    )
