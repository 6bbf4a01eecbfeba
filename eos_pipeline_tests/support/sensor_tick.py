"""One sensor tick, evaluated in the test's process as Dagster's sensor daemon evaluates it."""

from __future__ import annotations

import dagster as dg

# No public way exists to give a tick the instance as its dynamic-partitions store: the daemon
# sets this context itself. Tests only; the product imports nothing private from Dagster.
from dagster._core.definitions.partitions.context import partition_loading_context


def tick(
    defs: dg.Definitions,
    name: str,
    instance: dg.DagsterInstance,
    cursor: str | None = None,
) -> dg.SensorResult:
    """Sensor ``name`` of ``defs`` ticked once (``evaluate_tick``) on the definitions'
    resources and ``instance``, from ``cursor``: its run requests, skip reason and events."""
    sensor = defs.get_repository_def().get_sensor_def(name)
    with (
        dg.build_sensor_context(
            instance=instance, resources=defs.resources, definitions=defs, cursor=cursor
        ) as context,
        partition_loading_context(dynamic_partitions_store=instance),
    ):
        return sensor.evaluate_tick(context)  # type: ignore[return-value]
