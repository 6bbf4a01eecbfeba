"""``build_definitions(config)``: the whole Dagster code location from a pipelines file."""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import os
import warnings

import dagster as dg

from eos_pipeline.defs.assets import HooksFor, iter_pipeline_assets
from eos_pipeline.defs.config import PipelinesFile
from eos_pipeline.defs.failover import failover_jobs
from eos_pipeline.defs.resources import build_resources, chdb_path
from eos_pipeline.defs.sensors import clickhouse_lag_sensor, hudi_lag_sensor, partitions_sensor

SENSOR_INTERVAL_ENV = "EOS_SENSOR_INTERVAL_SECONDS"
#: Pool of every ClickHouse step on an embedded chDB path: one process per data path, so those
#: runs are serialized (``dagster.yaml`` gives every pool one slot). Covers runs from sensors,
#: backfills and the UI alike.
CHDB_POOL = "chdb"


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
    for pipeline in config.pipelines:
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
        if pipeline.clickhouse is not None:
            sensors.append(clickhouse_lag_sensor(pipeline, interval, path))
        if pipeline.hudi is not None:
            sensors.append(hudi_lag_sensor(pipeline, interval))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)  # code references: beta, chosen
        # "Code references" on each asset page: the file and line of the function that writes it
        referenced = list(dg.with_source_code_references(assets))
    return dg.Definitions(
        assets=referenced,
        asset_checks=checks,
        sensors=sensors,
        jobs=failover_jobs(config),
        resources=build_resources(config),
        # One process per run: chDB allows one process per data path, and the Hudi asset and
        # its check share one Spark session instead of starting a JVM each.
        executor=dg.in_process_executor,
    )
