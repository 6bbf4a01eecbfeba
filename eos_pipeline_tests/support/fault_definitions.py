"""The fault suite's Dagster code location: the product's definitions, with fault hooks.

``test_dagster_kills.py`` runs ``dagster dev`` over a workspace naming this module instead of
:mod:`eos_pipeline.definitions`. Assets, checks, sensors and resources are the product's, built
by :func:`eos_pipeline_tests.support.definitions.build_definitions` from the same defs folder
(``EOS_DEFS_DIR``); only the sinks' hooks differ: they are the ones of
:mod:`eos_pipeline_tests.support.faults`, armed by ``EOS_FAULT_STEP`` in the run's environment.

* ClickHouse runs: each step boundary and ``before_materialization_event`` (arms plain or scoped
  ``clickhouse:``), and ``mid_insert`` on an embedded chDB path;
* Hudi runs: the same (scoped ``hudi:``), ``mid_hudi_write``, and the Spark task failures.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from typing import Any

from eos_pipeline.components.assets import CLICKHOUSE_SINK, HooksFor
from eos_pipeline.components.config import Pipeline, PipelinesFile
from eos_pipeline.components.project import load_project
from eos_pipeline.components.resources import chdb_path
from eos_pipeline.sinks.hooks import SinkHooks
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.faults import clickhouse_fault, hudi_fault, scoped_fault


def _fail_armed_tasks(raw: Any) -> Any:
    # Imported on use: loading the code location (code server, sensor daemon) starts no Spark.
    from eos_pipeline_tests.support.spark_faults import fail_armed_tasks

    return fail_armed_tasks(raw)


def fault_hooks(config: PipelinesFile) -> HooksFor:
    """The hooks of each pipeline's sinks, for :func:`build_definitions`."""
    url = config.clickhouse.url
    path = chdb_path(url) if isinstance(url, str) else None

    def hooks(pipeline: Pipeline, sink: str) -> SinkHooks:
        if sink == CLICKHOUSE_SINK:
            return SinkHooks(fault=clickhouse_fault(path, CLICKHOUSE_SINK))
        assert pipeline.hudi is not None
        return SinkHooks(
            fault=hudi_fault(pipeline.hudi.path, scoped_fault(sink)),
            source_hook=_fail_armed_tasks,
        )

    return hooks


_config = load_project().config
defs = build_definitions(_config, hooks=fault_hooks(_config))

__all__ = ["defs", "fault_hooks"]
