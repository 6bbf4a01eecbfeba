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

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema

log = logging.getLogger(__name__)

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
#: decoder names them (``Tombstone``, ``DecodeError``, ``TypeMismatch``, ``MissingField``,
#: ``Oversized``), and a message.
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
    """Local paths of the Hudi bundle, the Kafka connector and the fencing strategy.

    The bundles are fetched on first use; the fencing strategy is compiled on first use (see
    :func:`fencing_jar`) and left out, with a warning, where no ``javac`` is installed.
    """
    from eos_pipeline.stack.artifacts import ensure_bundle

    jars = [p for name in ("hudi", "spark-kafka") for p in ensure_bundle(name)]
    hudi = [p for p in jars if "hudi-spark" in p.name]
    fencing = fencing_jar(hudi[0]) if hudi else None
    return [str(p) for p in jars] + ([str(fencing)] if fencing else [])


#: Hudi conflict-resolution strategy (run under Hudi's commit lock with optimistic concurrency
#: control) that refuses a commit when a checkpoint-carrying commit completed after the one the
#: write started from, named by :data:`FENCING_EXPECTED_OPTION` (its completion time, "" for a
#: new table). Hudi's own strategies compare touched files only: two writers that both create
#: new file groups (a new table, or inserts that fit no small file) never conflict there.
FENCING_STRATEGY_CLASS = "eos.hudi.CheckpointFencingStrategy"
FENCING_EXPECTED_OPTION = "hoodie.eos.fencing.expected.completion"
FENCING_JAR_STEM = "eos-hudi-fencing"
#: Its Java source, shipped with the package and compiled on first use (:func:`fencing_jar`).
FENCING_SOURCE = Path(__file__).parent / "java" / "CheckpointFencingStrategy.java"


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home, "bin", "javac") if home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    return shutil.which("javac")


def fencing_jar(hudi_jar: Path, cache_dir: Path | None = None) -> Path | None:
    """The fencing strategy compiled against ``hudi_jar`` (cached by source digest), or None.

    Compiled here rather than fetched: it is project code, a few dozen lines, and must match the
    Hudi bundle in use. Without a JDK the sink still checks the checkpoint before writing, but
    that check is not atomic with the commit, so a warning says so.
    """
    from eos_pipeline.stack.artifacts import default_cache_dir

    java = FENCING_SOURCE.read_text()
    digest = hashlib.sha256(f"{java}\0{hudi_jar.name}".encode()).hexdigest()[:16]
    target = (cache_dir or default_cache_dir()) / "eos-hudi" / f"{FENCING_JAR_STEM}-{digest}.jar"
    if target.exists():
        return target
    javac = _javac()
    if javac is None:
        log.warning(
            "javac not found: Hudi commits run without the checkpoint fencing strategy; two "
            "writers racing on one table could both commit. Install a JDK to close that gap"
        )
        return None
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars" / "*"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        source = Path(tmp, "src", *FENCING_STRATEGY_CLASS.split(".")).with_suffix(".java")
        source.parent.mkdir(parents=True)
        source.write_text(java)
        classes = Path(tmp, "classes")
        done = subprocess.run(
            [
                javac,
                "--release",
                "17",
                "-nowarn",
                "-cp",
                f"{hudi_jar}{os.pathsep}{spark_jars}",
                "-d",
                str(classes),
                str(source),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"compiling {source.name} failed:\n{done.stderr[-2000:]}")
        staged = Path(tmp, target.name)
        with zipfile.ZipFile(staged, "w") as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(staged, target)  # atomic: a concurrent builder never sees half a jar
    return target


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


def _permissive(text: Column, schema: T.StructType) -> Column:
    return F.from_json(text, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})


def _decode_error(
    key: Column,
    value: Column,
    text: Column,
    parsed: Column,
    schema: T.StructType,
    max_record_bytes: int | None,
) -> tuple[Column, Column]:
    required = [f.name for f in schema.fields if not f.nullable]
    missing = F.concat_ws(", ", *(F.when(parsed[name].isNull(), F.lit(name)) for name in required))
    trimmed = F.trim(text)
    is_object = trimmed.startswith("{")
    # Every field read as a string: Spark turns any JSON token into its text for a string field,
    # so this parse fails only on malformed JSON, and a record that fails the typed parse but
    # not this one holds a value of the wrong JSON type. Case branches are evaluated lazily:
    # the extra parses run for the failing records only.
    loose = _permissive(
        text,
        T.StructType(
            [T.StructField(f.name, T.StringType(), True) for f in schema.fields]
            + [T.StructField(_CORRUPT, T.StringType(), True)]
        ),
    )
    mismatched = F.concat_ws(
        ", ",
        *(
            F.when(
                loose[f.name].isNotNull()
                & _permissive(text, T.StructType([T.StructField(f.name, f.dataType, True)]))[
                    f.name
                ].isNull(),
                F.lit(f"{f.name} ({f.dataType.simpleString()})"),
            )
            for f in schema.fields
        ),
    )
    size = F.coalesce(F.octet_length(key), F.lit(0)) + F.coalesce(F.octet_length(value), F.lit(0))
    # (condition, class, message), checked in order; the first that holds names the problem.
    rules: list[tuple[Column, str, Column]] = []
    if max_record_bytes is not None:
        rules.append(
            (
                size > F.lit(max_record_bytes),
                "Oversized",
                F.format_string(
                    "key + value is %d bytes, above the pipeline's max_record_bytes of %d",
                    size,
                    F.lit(max_record_bytes),
                ),
            )
        )
    rules += [
        (value.isNull(), "Tombstone", F.lit("value is null (tombstone)")),
        (F.encode(text, "UTF-8") != value, "DecodeError", F.lit("value is not valid UTF-8")),
        (parsed.isNull() | ~is_object, "DecodeError", F.lit("value is not a JSON object")),
        (
            parsed[_CORRUPT].isNotNull() & loose[_CORRUPT].isNotNull(),
            "DecodeError",
            F.lit("malformed JSON object"),
        ),
        (
            parsed[_CORRUPT].isNotNull(),
            "TypeMismatch",
            F.concat(F.lit("field(s) of the wrong JSON type for their column: "), mismatched),
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


def decode_json(
    df: DataFrame, schema: T.StructType, *, max_record_bytes: int | None = None
) -> tuple[DataFrame, DataFrame]:
    """Split Kafka rows into decoded rows and bad rows; no record is dropped.

    Error classes match the ClickHouse sink's decoder: ``Tombstone``, ``DecodeError`` (not UTF-8,
    not JSON, not an object), ``TypeMismatch`` (a field of the wrong JSON type), ``MissingField``,
    and ``Oversized`` for a record whose key + value bytes exceed ``max_record_bytes``.

    Good rows: the source coordinates (``_topic``, ``_partition``, ``_offset``,
    ``_kafka_timestamp``) followed by the fields of ``schema``. Bad rows: the raw Kafka columns
    plus ``error_class`` and ``error``, ready for a dead-letter topic. A field declared
    non-nullable in ``schema`` is required: a JSON ``null`` or an absent key makes it bad.
    Fields not in ``schema`` are ignored. Spark's JSON reader stops after the first complete
    value, so two objects concatenated in one message would decode as the first one; a value
    that does not end with ``}`` is refused, which catches most trailing garbage but not
    ``{...} {...}``.

    Both frames derive from ``df``: persist it first if reading the source twice is costly, or
    persist :func:`tag_json`'s frame and split it with :func:`split_tagged` to parse only once.
    """
    return split_tagged(tag_json(df, schema, max_record_bytes=max_record_bytes), schema)


def tag_json(
    df: DataFrame, schema: T.StructType, *, max_record_bytes: int | None = None
) -> DataFrame:
    """Every Kafka row, parsed, with ``error``/``error_class`` set on the bad ones only.

    The one pass of :func:`decode_json` that reads and parses; a caller that needs several
    results (counts, dead letters, the rows to write) persists this frame and splits it with
    :func:`split_tagged`, so the JSON is parsed once. ``key`` and ``value`` are kept on bad rows
    only (the dead-letter topic needs them), which keeps a persisted frame small.
    """
    clash = set(schema.fieldNames()) & {*SOURCE_COLUMNS.values(), TIMESTAMP_COLUMN, _CORRUPT}
    if clash:
        raise ValueError(f"schema fields {sorted(clash)} clash with reserved column names")
    parse_schema = T.StructType(
        [T.StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields]
        + [T.StructField(_CORRUPT, T.StringType(), True)]
    )
    text = F.col("value").cast("string")
    parsed = _permissive(text, parse_schema)
    message, error_class = _decode_error(
        F.col("key"), F.col("value"), text, F.col("_eos_parsed"), schema, max_record_bytes
    )
    tagged = (
        df.select(*KAFKA_COLUMNS, parsed.alias("_eos_parsed"))
        .withColumn(ERROR_COLUMN, message)
        .withColumn(ERROR_CLASS_COLUMN, error_class)
    )
    is_bad = F.col(ERROR_COLUMN).isNotNull()
    return tagged.select(
        *(c for c in tagged.columns if c not in ("key", "value")),
        F.when(is_bad, F.col("key")).alias("key"),
        F.when(is_bad, F.col("value")).alias("value"),
    )


def split_tagged(tagged: DataFrame, schema: T.StructType) -> tuple[DataFrame, DataFrame]:
    """Good and bad rows of :func:`tag_json`'s frame, as :func:`decode_json` returns them."""
    good = tagged.where(F.col(ERROR_COLUMN).isNull()).select(
        *(F.col(src).alias(dst) for src, dst in SOURCE_COLUMNS.items()),
        F.col("timestamp").alias(TIMESTAMP_COLUMN),
        *(F.col("_eos_parsed")[f.name].alias(f.name) for f in schema.fields),
    )
    bad = tagged.where(F.col(ERROR_COLUMN).isNotNull()).select(
        *KAFKA_COLUMNS, ERROR_CLASS_COLUMN, ERROR_COLUMN
    )
    return good, bad


def fail_tasks(df: DataFrame, step: str, failing_attempts: int | None) -> DataFrame:
    """Test-only: every task over ``df`` raises on its first ``failing_attempts`` attempts.

    ``None`` fails every attempt. The check runs in the executor's Python worker, inside the
    task, so Spark's own task retry (``local[N,maxFailures]`` or ``spark.task.maxFailures``) is
    what a transient failure exercises. Wired to ``EOS_FAULT_STEP`` by the Hudi sink.
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


# An exception line of a Python traceback (the executor's Python worker): no dotted module path.
_PY_ERROR = re.compile(r"^\s*((?!Py4J)[A-Za-z_]\w*(?:Error|Exception): .+)$", re.MULTILINE)
_JAVA_CAUSE = re.compile(r"^\s*Caused by: ([\w.$]+: .+)$", re.MULTILINE)


def spark_failure(exc: BaseException) -> str:
    """One line naming why a Spark job failed: the stage failure and its innermost cause.

    The cause is the last exception of a Python worker's traceback if there is one (a UDF or
    injected fault), else the root ``Caused by:`` of the Java trace (a Kafka or Hudi error).
    """
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    stage = next((line for line in lines if "Job aborted due to stage failure" in line), "")
    stage = stage[stage.find("Job aborted") :].split(", most recent failure")[0]
    python = [m.group(1) for m in _PY_ERROR.finditer(text)]
    java = [m.group(1) for m in _JAVA_CAUSE.finditer(text)]
    cause = python[-1] if python else java[-1] if java else lines[0] if lines else repr(exc)
    return f"{stage}: {cause}" if stage and stage not in cause else cause


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
    "fail_tasks",
    "fencing_jar",
    "kafka_source_options",
    "read_kafka_ranges",
    "spark_conf",
    "spark_failure",
    "spark_schema",
    "spark_type",
    "split_tagged",
    "tag_json",
    "with_source_columns",
]
