"""The Dagster code location (``workspace.yaml`` and ``[tool.dagster]`` point here).

Everything comes from the pipelines file (``EOS_PIPELINES_FILE``, else the repository's
``pipelines.yaml``); the Dagster layer itself lives in :mod:`eos_pipeline.components`.
"""

from eos_pipeline.components.builder import build_definitions
from eos_pipeline.components.config import load_config
from eos_pipeline.components.partitions import parse_partition_key, partition_key

defs = build_definitions(load_config())

__all__ = ["defs", "parse_partition_key", "partition_key"]
