"""The exactly-once path run as Dagster materializations: what the orchestration layer costs.

One partitioned asset, one partition per Kafka partition, materialized in-process with
``dg.materialize`` (as a sensor-triggered run would execute it, minus the run launcher).
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Sequence
from typing import Any

import dagster as dg

from eos_pipeline.core.offsets import TopicPartition

_QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def materialize_all(sync: Any, topic: str, partitions: Sequence[int]) -> None:
    """Materialize one asset partition per Kafka partition; raise if any run fails."""
    keys = dg.StaticPartitionsDefinition([str(p) for p in partitions])

    @dg.asset(partitions_def=keys, name="bench_events")
    def bench_events(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        report = sync.run(TopicPartition(topic, int(context.partition_key)))
        return dg.MaterializeResult(
            metadata={
                "offset_range": f"[{report.start}, {report.end})",
                "rows_sent": report.rows_sent,
                "cases": ", ".join(report.cases) or "caught up",
            }
        )

    instance = dg.DagsterInstance.ephemeral()
    for key in keys.get_partition_keys():
        result = dg.materialize(
            [bench_events], partition_key=key, instance=instance, run_config=_QUIET
        )
        if not result.success:
            raise RuntimeError(f"materialization of partition {key} failed")
