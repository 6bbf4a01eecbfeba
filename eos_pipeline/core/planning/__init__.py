"""Which runs the sensors ask for: a pure planner, from plain state to plain run requests.

The sensors (:mod:`eos_pipeline.components.sensors`) read the state through the adapters (Kafka's
end offsets, the keeper records, the Hudi checkpoint copy, the runs in flight and the failed
runs) and turn the plans made here into Dagster objects. Everything they decide is decided here.

Run keys contain the end offsets asked for and the sink's position, so re-evaluating with
nothing new yields the same keys and Dagster launches nothing; partitions with a run already
queued or running are left alone.

A run that fails (or is killed) without moving the position would leave the sensor asking for
the same run key, which Dagster never launches twice: the partition would be stuck. So each run
is tagged with the state it starts from (:data:`START_STATE_TAG`), the failed and canceled runs
are counted per partition and start state (:func:`failures_by_start`), and the count goes into
the run key: each failure yields a fresh key. Why the newest run failed decides what comes next
(:mod:`eos_pipeline.core.retries`): a transient fault is retried after a growing, capped wait,
without limit, and the skip reason says so; a fault that needs a person stops the requests at
once, naming the cause; any other is retried up to ``max_attempts`` runs from the same state,
then given up (a warning naming the partition, the position and the last failed run), so a
permanent error never becomes a crash loop.

* ClickHouse (:func:`plan_clickhouse`): on a server, one run per lagging partition, side by
  side; partitions left in ``BEFORE`` (a run died mid-step) first, with a higher
  ``dagster/priority``, so they recover first; at most :data:`MAX_RUNS_PER_TICK` runs per
  evaluation. On an embedded chDB path (one process at a time), ONE key-range run over all
  lagging partitions (:func:`clickhouse_range_run`), which handles ``BEFORE`` ones first.
* Hudi (:func:`plan_hudi`): one table takes one writer at a time, so all lagging partitions go
  into ONE run over a key range of the dynamic partitions (Dagster's range tags), which the
  asset turns into one commit.
* Partitions (:func:`plan_new_partitions`, in :mod:`eos_pipeline.core.partition_plan`): one
  key per Kafka partition not yet known; keys that match no Kafka partition are removed.
"""

from eos_pipeline.core.partition_plan import NewPartitions, plan_new_partitions, stray_keys
from eos_pipeline.core.planning.clickhouse import (
    TopicState,
    clickhouse_needs_log_starts,
    clickhouse_range_run,
    plan_clickhouse,
    recovery_order,
)
from eos_pipeline.core.planning.hudi import hudi_blocked, hudi_needs_log_starts, plan_hudi
from eos_pipeline.core.planning.runs import (
    ANY_PARTITION,
    CHDB_PATH_TAG,
    ENDS_TAG,
    HUDI_TABLE_TAG,
    MAX_RUNS_PER_TICK,
    NORMAL_PRIORITY,
    PARTITION_TAG,
    PRIORITY_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RECOVERY_PRIORITY,
    SINK_PARTITION_TAG,
    SINK_TAG,
    START_STATE_TAG,
    Plan,
    PlannedRun,
    RunInfo,
    asked_ends,
    failures_by_start,
    in_flight_keys,
)
from eos_pipeline.core.retries import Backoff, Failures, given_up_message

__all__ = [
    "ANY_PARTITION",
    "CHDB_PATH_TAG",
    "ENDS_TAG",
    "HUDI_TABLE_TAG",
    "MAX_RUNS_PER_TICK",
    "NORMAL_PRIORITY",
    "PARTITION_TAG",
    "PRIORITY_TAG",
    "RANGE_END_TAG",
    "RANGE_START_TAG",
    "RECOVERY_PRIORITY",
    "SINK_PARTITION_TAG",
    "SINK_TAG",
    "START_STATE_TAG",
    "Backoff",
    "Failures",
    "NewPartitions",
    "Plan",
    "PlannedRun",
    "RunInfo",
    "TopicState",
    "asked_ends",
    "clickhouse_needs_log_starts",
    "clickhouse_range_run",
    "failures_by_start",
    "given_up_message",
    "hudi_blocked",
    "hudi_needs_log_starts",
    "in_flight_keys",
    "plan_clickhouse",
    "plan_hudi",
    "plan_new_partitions",
    "recovery_order",
    "stray_keys",
]
