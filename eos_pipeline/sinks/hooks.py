"""Hook points of a sink run: where a caller may act, by default nothing happens.

Each sink calls its ``fault`` hook (a :data:`FaultHook`) with the name of every step boundary it
passes, in order:

* ClickHouse, per step of a batch: ``before_keeper_before``, ``after_keeper_before``,
  ``after_insert``, ``after_keeper_after``; and ``after_alter`` after each schema evolution a
  step's writer schemas asked for (between the ``ALTER TABLE`` and the step's insert);
* Hudi, per transaction: ``before_hudi_write``, ``after_hudi_commit``;
* both Dagster assets, with their sink's hook: ``before_materialization_event``, after the sink
  returned and before Dagster records the materialization.

The Hudi sink also passes the Kafka source frame of a transaction through its ``source_hook``
(a :data:`SourceHook`), if it has one, before decoding.

The product sets no hook: :func:`no_fault` does nothing and there is no source hook. The fault
suite injects hooks that kill the process or fail Spark tasks at chosen points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Called with the name of each step boundary a sink passes.
FaultHook = Callable[[str], None]
#: Takes the Hudi sink's Kafka source frame and returns the frame to decode.
SourceHook = Callable[["DataFrame"], "DataFrame"]


def no_fault(step: str) -> None:
    """The default hook: nothing happens at a step boundary."""


@dataclass(frozen=True)
class SinkHooks:
    """The hooks of one sink's Dagster runs: the sink's and the asset's own."""

    fault: FaultHook = no_fault
    source_hook: SourceHook | None = None


NO_HOOKS: Final = SinkHooks()

__all__ = ["NO_HOOKS", "FaultHook", "SinkHooks", "SourceHook", "no_fault"]
