"""Pieces of the definitions that only tests ask for on their own.

The product builds its resources as part of each component's definitions
(:mod:`eos_pipeline.components.project`); the tests look at them one by one.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from eos_pipeline.components.assets import HooksFor
from eos_pipeline.components.config import PipelinesFile
from eos_pipeline.components.project import (
    location_definitions,
    pipeline_definitions,
    resolve_subject,
    shared_definitions,
)
from eos_pipeline.components.resources import (
    SparkResource,
    kafka_resource_key,
    pipeline_resources,
    shared_resources,
)


def build_resources(config: PipelinesFile) -> dict[str, Any]:
    """Resource instances for a pipelines file; Kafka resources are keyed ``kafka_<pipeline>``."""
    resources = shared_resources(config.settings)
    for pipeline in config.pipelines:
        resources[kafka_resource_key(pipeline.name)] = pipeline_resources(pipeline)
    return resources


def is_remote(spark: SparkResource) -> bool:
    """Whether the resource's runs use a Spark Connect server (else Spark in-process)."""
    return bool(spark.remote)


def build_definitions(config: PipelinesFile, hooks: HooksFor | None = None) -> dg.Definitions:
    """The code location's definitions for a configuration held in memory (the product loads a
    defs folder); ``hooks``: each sink's, for the fault suite's code location."""
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
