"""Two writers race on a NEW Hudi table, and the one that loses leaves nothing visible.

Hudi counts a file slice as committed when its instant is completed *or older than the first
completed instant* (it takes older ones for archived). Writers share tables with lazy clean-up of
failed writes, so a fenced writer's files stay on disk until their heartbeat expires. On a table
with no completed commit, a writer that took the older instant but finished last would be fenced
correctly and still have its files read: every record twice. ``write_transaction`` therefore
completes an empty commit before a new table's first data commit.

The order is forced, not hoped for: writer A's tasks block (inside Hudi's write, after A's
instant is on the timeline) until writer B has committed. Both are threads of the session's
in-process Spark; A's data is one partition, so B's tasks get the other core.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from eos_pipeline.adapters.hudi import (
    SMALL_TABLE_OPTIONS,
    CommitInfo,
    HudiFencedError,
    write_transaction,
)
from eos_pipeline.adapters.hudi_timeline import checkpoint_history, completed_commits
from eos_pipeline.core.offsets import TopicPartition

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "orders"
TPS = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
CHECKPOINT = {TPS[0]: 5, TPS[1]: 5}


def rows(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        [(TOPIC, i % 2, i // 2, f"v{i}".encode()) for i in range(10)],
        "_topic string, _partition int, _offset long, value binary",
    )


def held_until(df: DataFrame, started: Path, release: Path) -> DataFrame:
    """``df`` in one task that signals ``started`` and then waits for ``release`` (2 min max)."""

    def hold(_: int) -> bool:
        started.touch()
        deadline = time.monotonic() + 120
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return True

    return df.coalesce(1).where(F.udf(hold, T.BooleanType())(F.col("_offset")))


def write(df: DataFrame, table: str) -> CommitInfo:
    return write_transaction(
        df, table, "t", CHECKPOINT, expected_previous=None, options=SMALL_TABLE_OPTIONS
    )


def test_a_fenced_writer_with_the_older_instant_leaves_nothing_on_a_new_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = str(tmp_path / "t")
    started, release = tmp_path / "a.started", tmp_path / "a.release"
    outcome: dict[str, object] = {}

    def writer_a() -> None:
        try:
            outcome["a"] = write(held_until(rows(spark), started, release), table)
        except Exception as exc:  # the outcome under test
            outcome["a"] = exc

    thread = threading.Thread(target=writer_a, daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while not started.exists():  # A's data is being written: its instant is on the timeline
        assert thread.is_alive(), f"writer A ended before writing: {outcome}"
        assert time.monotonic() < deadline, "writer A never started writing"
        time.sleep(0.1)
    try:
        b = write(rows(spark), table)
    finally:
        release.touch()
        thread.join(180)
    assert not thread.is_alive(), "writer A did not finish"

    assert isinstance(outcome["a"], HudiFencedError), outcome
    assert [c.instant_time for c in checkpoint_history(table)] == [b.instant_time]
    got = (
        spark.read.format("hudi")
        .load(table)
        .select("_partition", "_offset")
        .rdd.map(tuple)
        .collect()
    )
    assert sorted(got) == sorted((i % 2, i // 2) for i in range(10))  # each record once
    # The table's first completed commit is the empty one that started the timeline.
    first = completed_commits(table)[-1][0]
    assert first < b.instant_time
