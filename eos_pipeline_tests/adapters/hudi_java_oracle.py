"""Hudi's own Java timeline API, over py4j: the reference the JVM-free reader is checked against.

The product reads commits with hudi-rs (``eos_pipeline.adapters.hudi_timeline``). A test with
a classic session reads the same table through ``HoodieTableMetaClient`` here and compares:
any difference in which commits count, their order, completion times (derived from file names
or, on version 6 tables, file times) or metadata fails the test rather than a production run.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from eos_pipeline.adapters.hudi import CommitInfo
from eos_pipeline.core.checkpoint import checkpoint_from_metadata


def _timeline(spark: SparkSession, table_path: str) -> Any | None:
    jvm = spark.sparkContext._jvm
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    props = jvm.org.apache.hadoop.fs.Path(table_path.rstrip("/") + "/.hoodie/hoodie.properties")
    if not props.getFileSystem(hadoop).exists(props):
        return None
    meta = (
        jvm.org.apache.hudi.common.table.HoodieTableMetaClient.builder()
        .setConf(jvm.org.apache.hudi.hadoop.fs.HadoopFSUtils.getStorageConf(hadoop))
        .setBasePath(table_path)
        .build()
    )
    # Completed instants of the commits timeline only, as the product reads.
    return meta.getActiveTimeline().getCommitsTimeline().filterCompletedInstants()


def java_commits(
    spark: SparkSession, table_path: str
) -> list[tuple[str, str | None, str, dict[str, str]]]:
    """``(instant_time, completion_time, action, extra metadata)`` of every completed commit,
    newest first (by completion time, then requested time: the product's order)."""
    timeline = _timeline(spark, table_path)
    if timeline is None:
        return []
    instants = sorted(
        timeline.getInstants(),
        key=lambda i: (str(i.getCompletionTime() or ""), str(i.requestedTime())),
        reverse=True,
    )
    found = []
    for instant in instants:
        extra = timeline.readCommitMetadata(instant).getExtraMetadata()
        completion = instant.getCompletionTime()
        found.append(
            (
                str(instant.requestedTime()),
                str(completion) if completion else None,
                str(instant.getAction()),
                {str(k): str(v) for k, v in extra.items() if v is not None},
            )
        )
    return found


def java_checkpoint_history(spark: SparkSession, table_path: str) -> list[CommitInfo]:
    """The commits that carry a checkpoint, newest first, as the product's CommitInfo."""
    history = []
    for instant_time, completion_time, action, metadata in java_commits(spark, table_path):
        checkpoint = checkpoint_from_metadata(metadata)
        if checkpoint is not None:
            history.append(
                CommitInfo(
                    instant_time=instant_time,
                    completion_time=completion_time,
                    action=action,
                    checkpoint=checkpoint,
                    extra_metadata=metadata,
                )
            )
    return history


def java_latest_commit(spark: SparkSession, table_path: str) -> CommitInfo | None:
    history = java_checkpoint_history(spark, table_path)
    return history[0] if history else None
