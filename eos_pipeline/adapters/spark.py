"""Spark: the session configuration, exact offset-range reads of Kafka, JSON decoding.

The session carries the Hudi Spark bundle and Spark's Kafka connector as local jars fetched and
verified by :mod:`eos_pipeline.stack.artifacts` (``spark.jars``, never Ivy resolution at start-up,
so a session starts the same way offline and never picks up a different jar version).

Kafka is read in batch mode with explicit per-partition start and end offsets: a retry of a run
asks for the very same positions and, because a committed range of a Kafka log never changes,
gets the very same records. Each Kafka partition becomes one Spark partition, so the tasks of a
read are the per-partition participants of the transaction that the Hudi commit then closes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema

#: Columns of :func:`read_kafka_ranges`, as Spark's Kafka source names them.
KAFKA_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("offset", T.LongType(), False),
        T.StructField("timestamp", T.TimestampType(), True),
        T.StructField("key", T.BinaryType(), True),
        T.StructField("value", T.BinaryType(), True),
    ]
)
KAFKA_COLUMNS = tuple(KAFKA_SCHEMA.fieldNames())

#: Source coordinates as carried into sink tables; underscored so they never clash with payload
#: fields. ``(_topic, _partition, _offset)`` is the default Hudi record key.
SOURCE_COLUMNS = {"topic": "_topic", "partition": "_partition", "offset": "_offset"}
TIMESTAMP_COLUMN = "_kafka_timestamp"

#: Columns holding why a record could not be decoded (bad rows only): a class, as the Python
#: decoder names them (``Tombstone``, ``DecodeError``, ``MissingField``), and a message.
ERROR_COLUMN = "error"
ERROR_CLASS_COLUMN = "error_class"
_CORRUPT = "_eos_corrupt_record"

# Kafka client settings that would break exactness if a caller could change them.
_FORCED_CLIENT_OPTIONS = {"isolation.level": "read_committed"}

_LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")

HUDI_SPARK_CONF = {
    # Hudi requires Kryo and its own registrator (it ships Avro and Hudi types between tasks).
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
    "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
}


class SparkKafkaError(RuntimeError):
    """A Kafka read through Spark was asked for something that cannot be read exactly."""


def default_jars() -> list[str]:
    """Local paths of the Hudi bundle and the Kafka connector, fetched on first use."""
    from eos_pipeline.stack.artifacts import ensure_bundle

    return [str(p) for name in ("hudi", "spark-kafka") for p in ensure_bundle(name)]


def _local_cores(master: str) -> int | None:
    match = _LOCAL_MASTER.match(master.strip())
    if not match:
        return None
    cores = match.group(1)
    if cores is None:
        return 1
    return (os.cpu_count() or 1) if cores == "*" else int(cores)


def spark_conf(
    master: str = "local[2]",
    extra: Mapping[str, str] | None = None,
    *,
    jars: Sequence[str | Path] | None = None,
    driver_memory: str = "2g",
    quick_start: bool = False,
) -> dict[str, str]:
    """Configuration for the session behind the Dagster ``PySparkResource``.

    For a ``local[N]`` master the shuffle width is N (Spark's default of 200 tasks per shuffle
    costs seconds on small incremental batches), the UI is off and the driver binds to loopback.
    ``quick_start`` keeps the JVM on its fast-starting JIT tier: it halves the first Hudi write of
    a short-lived session (tests, one-off local runs) but costs throughput on large batches.
    Everything in ``extra`` wins over the defaults here.
    """
    # Hudi sizes objects with JOL, which warns loudly when it cannot attach to its own JVM.
    java_options = ["-Djdk.attach.allowAttachSelf=true", "-Djol.skipHotspotSAAttach=true"]
    if quick_start:
        java_options.append("-XX:TieredStopAtLevel=1")
    conf: dict[str, str] = {
        "spark.master": master,
        "spark.app.name": "eos_pipeline",
        "spark.jars": ",".join(str(j) for j in (default_jars() if jars is None else jars)),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": " ".join(java_options),
        **HUDI_SPARK_CONF,
    }
    cores = _local_cores(master)
    if cores is not None:
        conf.update(
            {
                "spark.driver.memory": driver_memory,
                "spark.sql.shuffle.partitions": str(cores),
                "spark.default.parallelism": str(cores),
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            }
        )
    conf.update(extra or {})
    return conf


def _offsets_json(ranges: Mapping[TopicPartition, int]) -> str:
    doc: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(ranges.items()):
        doc.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return json.dumps(doc, sort_keys=True)


def kafka_source_options(
    kafka_bootstrap: str,
    client_options: Mapping[str, str],
    ranges: Mapping[TopicPartition, OffsetRange],
    source_options: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Options for ``spark.read.format("kafka")`` reading exactly ``ranges`` (none empty).

    ``client_options`` are Java Kafka client properties (``security.protocol``,
    ``sasl.jaas.config``...); the ``kafka.`` prefix Spark wants is added here.
    ``failOnDataLoss`` stays true: an offset that is no longer in the log (retention, topic
    recreated), or not in it yet (beyond the end, or inside a still-open transaction), fails the
    read instead of being skipped silently. Gaps that belong to the log itself (transaction
    markers, aborted records under read_committed) are not data loss to Spark and read fine.
    """
    if not ranges:
        raise SparkKafkaError("no offset range to read")
    options: dict[str, str] = {}
    for key, value in client_options.items():
        name = key.removeprefix("kafka.")
        forced = _FORCED_CLIENT_OPTIONS.get(name)
        if forced is not None and str(value) != forced:
            raise SparkKafkaError(
                f"Kafka client option {name}={value!r} is not allowed: exact reads need "
                f"{name}={forced} (records of open or aborted transactions must never be read)"
            )
        options[f"kafka.{name}"] = str(value)
    assign: dict[str, list[int]] = {}
    for tp in sorted(ranges):
        assign.setdefault(tp.topic, []).append(tp.partition)
    options.update(
        {
            "kafka.bootstrap.servers": kafka_bootstrap,
            **{f"kafka.{k}": v for k, v in _FORCED_CLIENT_OPTIONS.items()},
            "assign": json.dumps(assign, sort_keys=True),
            "startingOffsets": _offsets_json({tp: r.start for tp, r in ranges.items()}),
            "endingOffsets": _offsets_json({tp: r.end for tp, r in ranges.items()}),
            "failOnDataLoss": "true",
            "includeHeaders": "false",
            # Spark's default (spark.network.timeout, 120 s, tried twice) turns a range that
            # reaches into an open transaction into a four-minute hang before the failure.
            "kafkaConsumer.pollTimeoutMs": "30000",
        }
    )
    for key, value in (source_options or {}).items():
        if key == "failOnDataLoss" and str(value).lower() != "true":
            raise SparkKafkaError("failOnDataLoss=false would skip lost offsets silently")
        if key in ("assign", "subscribe", "subscribePattern", "startingOffsets", "endingOffsets"):
            raise SparkKafkaError(f"source option {key!r} is set from the offset ranges")
        options[key] = str(value)
    return options


def read_kafka_ranges(
    spark: SparkSession,
    kafka_bootstrap: str,
    client_options: Mapping[str, str] | None,
    ranges: Mapping[TopicPartition, OffsetRange],
    *,
    source_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The committed records of exactly ``ranges`` (half-open), columns of :data:`KAFKA_SCHEMA`.

    Lazy, like any DataFrame: every action reads Kafka again, and gets the same records because
    the ranges are fixed. Empty ranges are left out (they hold no record but still count as
    read: the caller advances its checkpoint over them). A range ending beyond what the
    partition holds fails the read (Spark reports it as possible data loss) rather than
    returning fewer records, which would let a checkpoint jump over unread offsets; take range
    ends from Kafka's committed end offsets.
    """
    wanted = {tp: r for tp, r in ranges.items() if not r.is_empty}
    if not wanted:
        return spark.createDataFrame([], KAFKA_SCHEMA)
    options = kafka_source_options(kafka_bootstrap, client_options or {}, wanted, source_options)
    return spark.read.format("kafka").options(**options).load().select(*KAFKA_COLUMNS)


def with_source_columns(df: DataFrame) -> DataFrame:
    """Kafka rows with their coordinates renamed for a sink (``_topic``, ``_partition``...)."""
    return df.select(
        *(F.col(src).alias(dst) for src, dst in SOURCE_COLUMNS.items()),
        F.col("timestamp").alias(TIMESTAMP_COLUMN),
        "key",
        "value",
    )


def _decode_error(
    value: Column, text: Column, parsed: Column, schema: T.StructType
) -> tuple[Column, Column]:
    required = [f.name for f in schema.fields if not f.nullable]
    missing = F.concat_ws(", ", *(F.when(parsed[name].isNull(), F.lit(name)) for name in required))
    trimmed = F.trim(text)
    is_object = trimmed.startswith("{")
    # (condition, class, message), checked in order; the first that holds names the problem.
    rules = [
        (value.isNull(), "Tombstone", F.lit("value is null (tombstone)")),
        (F.encode(text, "UTF-8") != value, "DecodeError", F.lit("value is not valid UTF-8")),
        (parsed.isNull() | ~is_object, "DecodeError", F.lit("value is not a JSON object")),
        (
            parsed[_CORRUPT].isNotNull(),
            "DecodeError",
            F.lit("malformed JSON object, or a field does not fit its declared type"),
        ),
        (~trimmed.endswith("}"), "DecodeError", F.lit("unexpected content after the JSON object")),
        (
            missing != "",
            "MissingField",
            F.concat(F.lit("missing required field(s): "), missing),
        ),
    ]
    message = F.when(rules[0][0], rules[0][2])
    error_class = F.when(rules[0][0], F.lit(rules[0][1]))
    for condition, cls, text_ in rules[1:]:
        message = message.when(condition, text_)
        error_class = error_class.when(condition, F.lit(cls))
    return message, error_class


_SPARK_SCALARS: dict[str, T.DataType] = {
    "Bool": T.BooleanType(),
    "Int8": T.ByteType(),
    "Int16": T.ShortType(),
    "Int32": T.IntegerType(),
    "Int64": T.LongType(),
    "UInt8": T.ShortType(),
    "UInt16": T.IntegerType(),
    "UInt32": T.LongType(),
    "UInt64": T.DecimalType(20, 0),
    "Int128": T.DecimalType(38, 0),
    "UInt128": T.DecimalType(38, 0),
    "Float32": T.FloatType(),
    "Float64": T.DoubleType(),
    "BFloat16": T.FloatType(),
    "String": T.StringType(),
    "UUID": T.StringType(),
    "IPv4": T.StringType(),
    "IPv6": T.StringType(),
    "JSON": T.StringType(),
    "Date": T.DateType(),
    "Date32": T.DateType(),
}


def _split_args(inner: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        current += ch
    parts.append(current.strip())
    return parts


def spark_type(ch_type: str) -> T.DataType:
    """The Spark type that holds a canonical ClickHouse type (see ``core.schema``) without loss.

    Unsigned 64-bit and 128-bit integers become decimals, strings of every kind become strings,
    and ``DateTime``/``DateTime64`` become timestamps (microseconds in Spark).
    """
    if ch_type in _SPARK_SCALARS:
        return _SPARK_SCALARS[ch_type]
    name, _, rest = ch_type.partition("(")
    args = _split_args(rest[:-1]) if rest else []
    if name in ("LowCardinality", "Nullable"):
        return spark_type(args[0])
    if name in ("FixedString", "Enum8", "Enum16", "Enum"):
        return T.StringType()
    if name in ("DateTime", "DateTime64"):
        return T.TimestampType()
    if name.startswith("Decimal"):
        if name == "Decimal" and len(args) == 2:
            precision, scale = int(args[0]), int(args[1])
        else:  # Decimal32(S), Decimal64(S), Decimal128(S)
            precision = {"Decimal32": 9, "Decimal64": 18, "Decimal128": 38}.get(name, 38)
            scale = int(args[-1])
        if precision > 38:
            raise ValueError(f"{ch_type}: Spark decimals hold at most 38 digits")
        return T.DecimalType(precision, scale)
    if name == "Array":
        return T.ArrayType(spark_type(args[0]), True)
    if name == "Map":
        return T.MapType(spark_type(args[0]), spark_type(args[1]), True)
    raise ValueError(f"ClickHouse type {ch_type} has no Spark counterpart in this project yet")


def spark_schema(schema: TableSchema) -> T.StructType:
    """Payload fields of ``schema`` for :func:`decode_json`.

    A field is required (non-nullable) unless the column is nullable or has a default, the same
    rule as the ClickHouse decoder, so a record goes to the dead-letter topic from both sinks.
    """
    return T.StructType(
        [
            T.StructField(
                c.name,
                spark_type(c.ch_type),
                c.nullable or c.default is not None or c.ch_type.startswith("Nullable("),
            )
            for c in schema.columns
        ]
    )


def decode_json(df: DataFrame, schema: T.StructType) -> tuple[DataFrame, DataFrame]:
    """Split Kafka rows into decoded rows and bad rows; no record is dropped.

    Good rows: the source coordinates (``_topic``, ``_partition``, ``_offset``,
    ``_kafka_timestamp``) followed by the fields of ``schema``. Bad rows: the raw Kafka columns
    plus ``error_class`` and ``error``, ready for a dead-letter topic. A field declared
    non-nullable in ``schema`` is required: a JSON ``null`` or an absent key makes it bad.
    Fields not in ``schema`` are ignored. Spark's JSON reader stops after the first complete
    value, so two objects concatenated in one message would decode as the first one; a value
    that does not end with ``}`` is refused, which catches most trailing garbage but not
    ``{...} {...}``.

    Both frames derive from ``df``: persist it first if reading the source twice is costly.
    """
    clash = set(schema.fieldNames()) & {*SOURCE_COLUMNS.values(), TIMESTAMP_COLUMN, _CORRUPT}
    if clash:
        raise ValueError(f"schema fields {sorted(clash)} clash with reserved column names")
    parse_schema = T.StructType(
        [T.StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields]
        + [T.StructField(_CORRUPT, T.StringType(), True)]
    )
    text = F.col("value").cast("string")
    parsed = F.from_json(
        text, parse_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    )
    message, error_class = _decode_error(F.col("value"), text, F.col("_eos_parsed"), schema)
    tagged = (
        df.select(*KAFKA_COLUMNS, parsed.alias("_eos_parsed"))
        .withColumn(ERROR_COLUMN, message)
        .withColumn(ERROR_CLASS_COLUMN, error_class)
    )
    good = tagged.where(F.col(ERROR_COLUMN).isNull()).select(
        *(F.col(src).alias(dst) for src, dst in SOURCE_COLUMNS.items()),
        F.col("timestamp").alias(TIMESTAMP_COLUMN),
        *(F.col("_eos_parsed")[f.name].alias(f.name) for f in schema.fields),
    )
    bad = tagged.where(F.col(ERROR_COLUMN).isNotNull()).select(
        *KAFKA_COLUMNS, ERROR_CLASS_COLUMN, ERROR_COLUMN
    )
    return good, bad


__all__ = [
    "ERROR_CLASS_COLUMN",
    "ERROR_COLUMN",
    "HUDI_SPARK_CONF",
    "KAFKA_COLUMNS",
    "KAFKA_SCHEMA",
    "SOURCE_COLUMNS",
    "TIMESTAMP_COLUMN",
    "SparkKafkaError",
    "decode_json",
    "default_jars",
    "kafka_source_options",
    "read_kafka_ranges",
    "spark_conf",
    "spark_schema",
    "spark_type",
    "with_source_columns",
]
