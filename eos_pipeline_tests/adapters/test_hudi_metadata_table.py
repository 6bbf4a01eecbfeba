"""Issue 17: a Hudi commit whose write starts by compacting the metadata table, in a fresh JVM.

Hudi 1.2.0 writes a metadata-table record through ``HoodieMetadataPayload.getInsertValue``, which
tells the record's plain schema from its schema-with-meta-fields by object identity against a
schema interned when that class is initialized. If the first thing a JVM does with the metadata
table is to compact it (the compaction runs at the start of a write, before this write's own
metadata records exist), the compaction's handle interns its own parsed copy of the schema
first; from then on every metadata record of that JVM takes the meta-fields branch and the write
fails with ``ArrayIndexOutOfBoundsException: Index 9 out of bounds for length 7`` (``column_stats``;
``Index 7`` for ``files``). A long-lived JVM never sees it once it wrote a plain commit; a fresh
process per transaction (every Dagster run) hits it at every metadata-table compaction.

So the risky write runs in a child process (a fresh JVM) through the product's
``write_transaction``, with the metadata table on (Hudi's default, as HoodieStreamer has it) and
compacted every few delta commits, which puts a compaction at the start of the child's write.
The set-up commits run in the session's JVM. About a minute on a 2-core machine.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from eos_pipeline.adapters.hudi import write_transaction
from eos_pipeline.adapters.hudi_timeline import latest_checkpoint
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.adapters.hudi_metadata_child import RESULT_PREFIX, ROW_SCHEMA, rows_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
TOPIC = "mdt-events"
PARTITIONS = 4
BATCH = 5  # offsets per partition and commit
#: Metadata table on, compacted every ``DELTAS`` delta commits. A new table's metadata table
#: starts with two (``files`` and ``column_stats`` initialized); the first ``write_transaction``
#: adds two more (the empty commit that starts the table's timeline, then the data): the second
#: write starts with a compaction, and then every ``DELTAS``-th.
DELTAS = 4
OPTIONS = {
    "hoodie.metadata.enable": "true",
    "hoodie.metadata.compact.max.delta.commits": str(DELTAS),
}
_CAUSE = re.compile(r"Caused by: ([\w.$]+(?:Exception|Error)[^\n]*)")


class MetadataWriteFailed(AssertionError):
    """A write in a fresh JVM failed: issue 17's symptom (anything else fails the test)."""


def _ranges(n: int) -> dict[str, list[int]]:
    """Offsets of commit ``n`` (1-based): ``[(n-1)*BATCH, n*BATCH)`` in every partition."""
    return {str(p): [(n - 1) * BATCH, n * BATCH] for p in range(PARTITIONS)}


def _after(n: int) -> dict[str, int]:
    return {str(p): n * BATCH for p in range(PARTITIONS)}


def _checkpoint(n: int) -> dict[TopicPartition, int]:
    return {TopicPartition(TOPIC, int(p)): o for p, o in _after(n).items()}


def _write_here(spark: SparkSession, table: str, n: int) -> None:
    df = spark.createDataFrame(rows_for(TOPIC, _ranges(n)), ROW_SCHEMA)
    write_transaction(df, table, "mdt", _checkpoint(n), options=OPTIONS)


def _write_in_fresh_jvm(table: str, n: int) -> dict[str, Any]:
    job = {
        "topic": TOPIC,
        "table_path": table,
        "table_name": "mdt",
        "ranges": _ranges(n),
        "after": _after(n),
        "options": OPTIONS,
    }
    done = subprocess.run(
        [sys.executable, "-m", "eos_pipeline_tests.adapters.hudi_metadata_child", json.dumps(job)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise RuntimeError(f"child exited {done.returncode} without a result:\n{done.stderr[-3000:]}")


def _why(outcome: dict[str, Any]) -> str:
    causes = _CAUSE.findall(outcome.get("error", ""))
    return causes[-1] if causes else outcome.get("error", "")[:500]


def _metadata_compactions(table: str) -> set[str]:
    """Requested times of the metadata table's completed compactions (``<req>_<done>.commit``)."""
    timeline = Path(table) / ".hoodie" / "metadata" / ".hoodie" / "timeline"
    return {p.name.split("_")[0] for p in timeline.glob("[0-9]*_[0-9]*.commit")}


def test_commits_that_start_by_compacting_the_metadata_table_in_a_fresh_jvm(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = str(tmp_path / "mdt")
    _write_here(spark, table, 1)
    assert not _metadata_compactions(table)
    n = 1
    for round_ in (1, 2):
        compacted = _metadata_compactions(table)
        n += 1
        outcome = _write_in_fresh_jvm(table, n)
        if not outcome["ok"]:
            raise MetadataWriteFailed(f"round {round_}: commit {n} failed: {_why(outcome)}")
        # The point of the test: this write compacted the metadata table before writing to it.
        assert _metadata_compactions(table) - compacted, (
            f"round {round_}: commit {n} did not compact the metadata table; the test no longer "
            "exercises the risky path (did Hudi's compaction scheduling change?)"
        )
        if round_ == 1:  # plain commits in this JVM until the next compaction is due
            for _ in range(DELTAS - 1):
                n += 1
                _write_here(spark, table, n)
    assert latest_checkpoint(table) == _checkpoint(n)
    rows = spark.read.format("hudi").load(table).groupBy("_partition", "_offset").count().collect()
    stored = sorted((r["_partition"], r["_offset"], r["count"]) for r in rows)
    assert stored == [(p, o, 1) for p in range(PARTITIONS) for o in range(n * BATCH)]
