"""One Hudi transaction's rows in Spark: the counting job, dead letters, the table's columns.

Shared by the sink (:mod:`eos_pipeline.sinks.hudi`) and the replay
(:mod:`eos_pipeline.sinks.hudi_replay`), so a replayed range is decoded, dead-lettered and written
exactly like the transaction that first wrote it.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from eos_pipeline.adapters.dlq import DeadLetter, DeadLetterWriter
from eos_pipeline.adapters.hudi import SOURCE_KEY_FIELDS
from eos_pipeline.adapters.spark import (
    ERROR_CLASS_COLUMN,
    ERROR_COLUMN,
    TIMESTAMP_COLUMN,
    spark_failure,
)
from eos_pipeline.adapters.spark_remote import connect_error
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hudi_spec import HudiSinkError

log = logging.getLogger(__name__)

__all__ = [
    "ReadCounts",
    "computed_once",
    "count_read",
    "dead_letter",
    "send_dead_letters",
    "sink_write_options",
    "table_rows",
]


@dataclass(frozen=True, slots=True)
class ReadCounts:
    """What the counting job saw per partition read."""

    records: dict[TopicPartition, int]
    #: Offset of the last record read per partition (partitions with a record only).
    last: dict[TopicPartition, int]
    any_bad: bool


@contextlib.contextmanager
def computed_once(spark: SparkSession, frame: DataFrame) -> Iterator[DataFrame]:
    """``frame`` as a cached table: the first action computes it, the following ones read memory.

    Not ``frame.persist()``: a Spark Connect client sends the plan again with every action and
    the server analyzes it afresh, and a plan holding a Python function (the decoder's
    ``mapInArrow``) is then never equal to the persisted one, so the cache is never used: every
    action read Kafka and decoded again (the counting job and three jobs of Hudi's upsert, each
    paying a Kafka fetch and a Python worker per partition). A temporary view keeps the analyzed
    plan itself, and ``CACHE LAZY TABLE`` caches exactly that plan, so every frame built on
    ``spark.table(view)`` uses the cache, over Connect as in a local session. The view has a
    random name (runs that share a server session never meet) and is dropped at the end.
    """
    name = f"eos_rows_{uuid.uuid4().hex}"
    frame.createOrReplaceTempView(name)
    try:
        spark.sql(f"CACHE LAZY TABLE {name}")
        yield spark.table(name)
    finally:
        try:
            spark.sql(f"UNCACHE TABLE IF EXISTS {name}")
            spark.catalog.dropTempView(name)
        except Exception as exc:  # a lost session took its view and cache with it
            log.warning("could not drop the cached rows %s: %s", name, exc)


def count_read(
    spark: SparkSession,
    tagged: DataFrame,
    ranges: Mapping[TopicPartition, OffsetRange],
    *,
    table_name: str,
    topic: str,
) -> ReadCounts:
    """Run the ONE job that reads, decodes and counts records and bad rows per partition.

    ``tagged`` is cached by the caller (:func:`computed_once`): this job fills the cache and the
    write reads it. Every
    failure of this action is a failed read, whatever raised it (PySpark's errors, Connect's,
    gRPC's, or a JVM error a classic session passes on raw): it becomes one clear error.
    """
    counts = tagged.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("records"),
        F.count(ERROR_COLUMN).alias("bad"),
        F.max("offset").alias("last"),
    )
    try:
        rows = counts.collect()
    except Exception as exc:
        clear = connect_error(spark, exc)
        if clear is not None:
            raise clear from exc
        named = ", ".join(f"{tp.partition}:{r}" for tp, r in sorted(ranges.items()))
        raise HudiSinkError(
            f"{table_name}: reading Kafka ranges {named} of {topic!r} "
            f"failed in Spark, nothing was committed: {spark_failure(exc)}"
        ) from exc
    records = {tp: 0 for tp in ranges}
    last: dict[TopicPartition, int] = {}
    any_bad = False
    for row in rows:
        tp = TopicPartition(row["topic"], row["partition"])
        records[tp] = row["records"]
        last[tp] = row["last"]
        any_bad = any_bad or row["bad"] > 0
    return ReadCounts(records, last, any_bad)


def dead_letter(row: Row) -> DeadLetter:
    """A bad row as a dead letter (Spark hands binary columns over as bytearray)."""
    return DeadLetter(
        row["offset"],
        None if row["key"] is None else bytes(row["key"]),
        None if row["value"] is None else bytes(row["value"]),
        row[ERROR_CLASS_COLUMN],
        row[ERROR_COLUMN],
    )


def send_dead_letters(
    writer: DeadLetterWriter, bad: DataFrame, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """Send the bad rows, per partition in offset order; how many went per partition."""
    letters: dict[TopicPartition, list[DeadLetter]] = {}
    # Rows come per Spark partition (one per Kafka partition); sorted below, no shuffle.
    for row in bad.toLocalIterator():
        letters.setdefault(TopicPartition(row["topic"], row["partition"]), []).append(
            dead_letter(row)
        )
    for batch in letters.values():
        batch.sort(key=lambda letter: letter.offset)
    sent = {tp: writer.send(tp, batch) for tp, batch in sorted(letters.items())}
    for tp, count in sent.items():
        log.warning("%s: %d records sent to dead-letter topic %s", tp, count, writer.topic)
    return {tp: sent.get(tp, 0) for tp in partitions}


def table_rows(good: DataFrame, schema: TableSchema) -> DataFrame:
    """Decoded rows in the table's column names (the contract already filled defaults)."""
    source = schema.source
    columns = [
        F.col("_topic").alias(source.topic),
        F.col("_partition").alias(source.partition),
        F.col("_offset").alias(source.offset),
    ]
    if source.timestamp is not None:
        columns.append(F.col(TIMESTAMP_COLUMN).alias(source.timestamp))
    columns += [F.col(col.name) for col in schema.columns]
    return good.select(*columns)


def sink_write_options(
    record_key_fields: Sequence[str], hudi_options: Mapping[str, str]
) -> dict[str, str]:
    """The table's Hudi options, plus what the sink knows about its rows.

    Keyed by the Kafka coordinates, the rows of one transaction have distinct keys (one
    row per offset, each offset read once), so Hudi's pre-write de-duplication (a shuffle
    of every row, ``combine.before.upsert``) cannot find anything; a key without them can.
    Such keys are almost always new, so the index is the bloom filter in each base file's
    footer (cost per file) rather than Spark's default SIMPLE index, which joins with every
    key of the table (cost per row, growing with the table). Key ranges cannot prune files:
    ``…,_offset:10`` sorts before ``…,_offset:9``, and every file spans several partitions.
    """
    options: dict[str, str] = {}
    if set(SOURCE_KEY_FIELDS) <= set(record_key_fields):
        options["hoodie.combine.before.upsert"] = "false"
        options["hoodie.index.type"] = "BLOOM"
        options["hoodie.bloom.index.prune.by.ranges"] = "false"
    options.update(hudi_options)
    return options
