"""The Dagster code location (``workspace.yaml`` and ``[tool.dagster]`` point here).

Everything comes from the pipelines file (``EOS_PIPELINES_FILE``, else the repository's
``pipelines.yaml``); the Dagster layer itself lives in :mod:`eos_pipeline.defs`.
"""

from eos_pipeline.defs.builder import build_definitions
from eos_pipeline.defs.config import load_config
from eos_pipeline.defs.partitions import parse_partition_key, partition_key

defs = build_definitions(load_config())

__all__ = ["defs", "parse_partition_key", "partition_key"]
