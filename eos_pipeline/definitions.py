"""The Dagster code location (``workspace.yaml``, ``[tool.dagster]`` and ``[tool.dg]`` point here).

It loads the defs folder (``eos_pipeline/defs``, or ``EOS_DEFS_DIR``): one component per
pipeline and one for the shared resources (:mod:`eos_pipeline.components.project`), plus the
failover job that spans pipelines.
"""

from eos_pipeline.components.project import load_project
from eos_pipeline.core.planning import parse_partition_key, partition_key

defs = load_project().definitions()

__all__ = ["defs", "parse_partition_key", "partition_key"]
