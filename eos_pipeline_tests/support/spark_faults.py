"""Spark task failures for the Hudi fault tests, through the Hudi sink's ``source_hook``.

``EOS_FAULT_STEP=hudi_task_fails_once`` fails every task that reads Kafka on its first attempt
(Spark's task retry must absorb it); ``hudi_task_always_fails`` fails every attempt.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from eos_pipeline_tests.support.faults import SPARK_TASK_STEPS, armed_step


def fail_tasks(df: DataFrame, step: str, failing_attempts: int | None) -> DataFrame:
    """Every task over ``df`` raises on its first ``failing_attempts`` attempts.

    ``None`` fails every attempt. The check runs in the executor's Python worker, inside the
    task, so Spark's own task retry (``local[N,maxFailures]`` or ``spark.task.maxFailures``) is
    what a transient failure exercises.
    """

    def check(partition: int) -> bool:
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        if failing_attempts is None or attempt < failing_attempts:
            raise RuntimeError(
                f"eos fault injection ({step}): task over Kafka partition {partition} "
                f"failed on attempt {attempt}"
            )
        return True

    return df.where(F.udf(check, T.BooleanType())(F.col("partition")))


def fail_armed_tasks(raw: DataFrame) -> DataFrame:
    """The Hudi sink's ``source_hook``: ``raw``, failing its tasks when a task step is armed.

    The armed step is read on every transaction, so a test may arm it between two runs of one
    sink.
    """
    step = armed_step()
    if step is not None and step in SPARK_TASK_STEPS:
        raw = fail_tasks(raw, step, 1 if step == "hudi_task_fails_once" else None)
    return raw


__all__ = ["fail_armed_tasks", "fail_tasks"]
