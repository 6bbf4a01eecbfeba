"""Pieces of the definitions that only tests ask for on their own.

The product builds its resources as part of each component's definitions
(:mod:`eos_pipeline.components.project`); the tests look at them one by one.
"""

from __future__ import annotations

from typing import Any

from eos_pipeline.components.config import PipelinesFile
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
