"""Spark: the session configuration, the fencing jar, exact offset-range reads of Kafka and their
decoding by the core's contract.

Jars are local files fetched and verified by :mod:`eos_pipeline.adapters.jvm_artifacts`
(``spark.jars``, never Ivy at start-up: a session starts the same way offline). Kafka is read in
batch mode with explicit per-partition start and end offsets: a retry asks for the very same
positions and, a committed range of a log never changing, gets the very same records.

Spark's JSON reader is lenient where the contract is strict (numbers read as text, ``"12"`` as
an integer, no range checks), so each task runs the core decoder (:mod:`core.decode`) on its
Arrow batches instead (``mapInArrow``): both sinks judge alike. The executors' Python must
import ``eos_pipeline``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from eos_pipeline.adapters.jvm_artifacts import ArtifactError
from eos_pipeline.adapters.kafka import RANGE_FETCH_WAIT_MS
from eos_pipeline.adapters.registry import decode_values
from eos_pipeline.core import decode as core_decode
from eos_pipeline.core.contract import ErrorClass, compile_contract, oversized, unwrap
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import SchemaError, TableSchema

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

# Kafka client settings that would break exactness if a caller could change them.
_FORCED_CLIENT_OPTIONS = {"isolation.level": "read_committed"}

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
    """Local paths of the Hudi bundle, the Kafka connector (fetched on first use) and the fencing
    strategy (built by ``eos-pipeline fetch``)."""
    from eos_pipeline.adapters.jvm_artifacts import ensure_bundle

    jars = [p for name in ("hudi", "spark-kafka") for p in ensure_bundle(name)]
    hudi = [p for p in jars if "hudi-spark" in p.name]
    return [str(p) for p in jars] + [str(fencing_jar(h)) for h in hudi[:1]]


#: Hudi conflict-resolution strategy refusing a commit when a checkpoint-carrying commit completed
#: after the one named by :data:`FENCING_EXPECTED_OPTION` ("" for a new table): Hudi's own compare
#: touched files only, and two writers that both create new file groups never conflict there.
FENCING_STRATEGY_CLASS = "eos.hudi.CheckpointFencingStrategy"
FENCING_EXPECTED_OPTION = "hoodie.eos.fencing.expected.completion"
FENCING_JAR_STEM = "eos-hudi-fencing"
#: Spark plugin in the same jar: Hudi's payload class initialized before any Hudi work (issue 17).
HUDI_CLASS_INIT_PLUGIN = "eos.hudi.HudiClassInit"
#: Its Java sources, shipped with the package and compiled by :func:`build_fencing_jar`.
FENCING_SOURCE = Path(__file__).parent / "java" / "CheckpointFencingStrategy.java"


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home, "bin", "javac") if home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    return shutil.which("javac")


class FencingJarError(ArtifactError):
    """The fencing jar is missing or cannot be built: Hudi commits would not be fenced."""


def _fencing_target(hudi_jar: Path, cache_dir: Path | None) -> tuple[Path, list[Path]]:
    from eos_pipeline.adapters.jvm_artifacts import default_cache_dir

    sources = sorted(FENCING_SOURCE.parent.glob("*.java"))
    java = "\0".join(p.read_text() for p in sources)
    digest = hashlib.sha256(f"{java}\0{hudi_jar.name}".encode()).hexdigest()[:16]
    target = (cache_dir or default_cache_dir()) / "eos-hudi" / f"{FENCING_JAR_STEM}-{digest}.jar"
    return target, sources


def fencing_jar(hudi_jar: Path, cache_dir: Path | None = None) -> Path:
    """The fencing strategy built for ``hudi_jar``; missing, the run is refused (without it two
    writers racing on one table could both commit)."""
    target, _ = _fencing_target(hudi_jar, cache_dir)
    if not target.exists():
        raise FencingJarError(
            f"the Hudi fencing jar {target} is missing: run `eos-pipeline fetch` (it compiles "
            "the project's fencing strategy with a JDK's javac) before any Hudi run"
        )
    return target


def build_fencing_jar(hudi_jar: Path, cache_dir: Path | None = None) -> Path:
    """Compile the fencing strategy against ``hudi_jar`` (cached by source digest): project code
    that must match the Hudi bundle in use."""
    target, sources = _fencing_target(hudi_jar, cache_dir)
    if target.exists():
        return target
    javac = _javac()
    if javac is None:
        raise FencingJarError(
            "javac not found: the Hudi fencing jar needs a JDK (17+); install one or set "
            "JAVA_HOME, then run `eos-pipeline fetch` again"
        )
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars" / "*"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
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
                *map(str, sources),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise FencingJarError(
                f"compiling {FENCING_SOURCE.parent} failed:\n{done.stderr[-2000:]}"
            )
        staged = Path(tmp, target.name)
        with zipfile.ZipFile(staged, "w") as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(staged, target)  # atomic: a concurrent builder never sees half a jar
    return target


def _local_cores(master: str) -> int | None:
    match = re.match(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$", master.strip())
    if not match:
        return None
    cores = match.group(1)
    if cores is None:
        return 1
    return (os.cpu_count() or 1) if cores == "*" else int(cores)


#: Spark's Python workers fork from a daemon that has imported the decoder already
#: (:mod:`eos_pipeline.adapters.spark_daemon`): a fresh worker starts decoding at once.
PYTHON_WORKER_CONF = {"spark.python.daemon.module": "eos_pipeline.adapters.spark_daemon"}


def spark_conf(
    master: str = "local[2]",
    extra: Mapping[str, str] | None = None,
    *,
    jars: Sequence[str | Path] | None = None,
    driver_memory: str = "2g",
    quick_start: bool = False,
    cds: bool = True,
) -> dict[str, str]:
    """Configuration for the session behind the Dagster ``PySparkResource``; ``extra`` wins.

    ``local[N]``: shuffles N wide (200 tasks cost seconds on small batches), no UI, loopback.
    ``quick_start``: the fast-starting JIT tier and serial GC, half the first Hudi write of a
    short-lived session, less throughput on large batches. ``cds``: Spark's class-data archive
    (:mod:`eos_pipeline.adapters.spark_cds`) when one was built.
    """
    # Tasks decode with eos_pipeline: their Python must be ours, and an in-process session
    # takes it from the environment, not from the conf.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Hudi sizes objects with JOL, which warns loudly when it cannot attach to its own JVM.
    java_options = ["-Djdk.attach.allowAttachSelf=true", "-Djol.skipHotspotSAAttach=true"]
    if quick_start:
        java_options += ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    if cds:
        from eos_pipeline.adapters.spark_cds import java_options as cds_options

        java_options += cds_options()
    conf: dict[str, str] = {
        "spark.master": master,
        "spark.app.name": "eos_pipeline",
        "spark.jars": ",".join(str(j) for j in (default_jars() if jars is None else jars)),
        "spark.sql.session.timeZone": "UTC",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.extraJavaOptions": " ".join(java_options),
        **HUDI_SPARK_CONF,
        **PYTHON_WORKER_CONF,
    }
    if FENCING_JAR_STEM in conf["spark.jars"]:
        conf["spark.plugins"] = HUDI_CLASS_INIT_PLUGIN
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
    """Options for ``spark.read.format("kafka")`` reading exactly ``ranges`` (none empty);
    ``client_options`` are Java Kafka client properties, ``kafka.``-prefixed here.

    ``failOnDataLoss`` stays true: an offset no longer (or not yet) in the log fails the read
    instead of being skipped; markers and aborted records are the log's own gaps and read fine.
    """
    if not ranges:
        raise SparkKafkaError("no offset range to read")
    # A default a caller may override: librdkafka's 500 ms fetch wait was paid once per partition
    # read, most of a small read; the ranges are in the log, so an early answer costs nothing.
    options = {"kafka.fetch.max.wait.ms": str(RANGE_FETCH_WAIT_MS)}
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
    """The committed records of exactly ``ranges`` (half-open), columns of :data:`KAFKA_SCHEMA`;
    every action reads the same records again. A range ending past the partition's committed
    end fails the read rather than return fewer records a checkpoint would jump over.
    """
    wanted = {tp: r for tp, r in ranges.items() if not r.is_empty}
    if not wanted:
        return spark.createDataFrame([], KAFKA_SCHEMA)
    options = kafka_source_options(kafka_bootstrap, client_options or {}, wanted, source_options)
    return spark.read.format("kafka").options(**options).load().select(*KAFKA_COLUMNS)


def spark_failure(exc: BaseException) -> str:
    """One line naming why a Spark job failed: the stage failure and its innermost cause (a
    Python worker's last exception, else the Java trace's root ``Caused by:``)."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    stage = next((line for line in lines if "Job aborted due to stage failure" in line), "")
    stage = stage[stage.find("Job aborted") :].split(", most recent failure")[0]
    # An exception line of a Python traceback (the executor's worker): no dotted module path.
    python = re.findall(r"^\s*((?!Py4J)[A-Za-z_]\w*(?:Error|Exception): .+)$", text, re.M)
    java = re.findall(r"^\s*Caused by: ([\w.$]+: .+)$", text, re.M)
    cause = python[-1] if python else java[-1] if java else lines[0] if lines else repr(exc)
    return f"{stage}: {cause}" if stage and stage not in cause else cause


# ------------------------------------------------------------------ decoding by the contract

#: Source coordinates as carried into sink tables; ``(_topic, _partition, _offset)`` is the
#: default Hudi record key.
SOURCE_COLUMNS = {"topic": "_topic", "partition": "_partition", "offset": "_offset"}
TIMESTAMP_COLUMN = "_kafka_timestamp"
#: Bad rows only: the contract's error class and message.
ERROR_COLUMN = "error"
ERROR_CLASS_COLUMN = "error_class"
PARSED_COLUMN = "_eos_parsed"

_SCALARS: dict[str, T.DataType] = {
    "Bool": T.BooleanType(),
    "Int8": T.ByteType(),
    "Int16": T.ShortType(),
    "Int32": T.IntegerType(),
    "Int64": T.LongType(),
    "UInt8": T.ShortType(),
    "UInt16": T.IntegerType(),
    "UInt32": T.LongType(),
    "UInt64": T.DecimalType(20, 0),
    "Float32": T.FloatType(),
    "Float64": T.DoubleType(),
    "String": T.StringType(),
    "UUID": T.StringType(),
    "IPv4": T.StringType(),
    "IPv6": T.StringType(),
    "Date": T.DateType(),
    "Date32": T.DateType(),
}


def spark_type(ch_type: str) -> T.DataType:
    """The Spark type that holds the contract's values for a canonical ClickHouse type
    (``UInt64``: ``decimal(20,0)``, Spark having no unsigned longs)."""
    base, _ = unwrap(ch_type)
    if base in _SCALARS:
        return _SCALARS[base]
    name, _, rest = base.partition("(")
    args = [a.strip() for a in rest[:-1].split(",")] if rest else []
    if name == "FixedString":
        return T.StringType()
    if name in ("DateTime", "DateTime64"):
        return T.TimestampType()
    if name == "Decimal":
        return T.DecimalType(int(args[0]), int(args[1]))
    if name in ("Array", "Map"):
        inner = rest[:-1]
        if name == "Array":
            return T.ArrayType(spark_type(inner), True)
        depth = 0
        for i, ch in enumerate(inner):  # split at the top-level comma
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                return T.MapType(
                    spark_type(inner[:i].strip()), spark_type(inner[i + 1 :].strip()), True
                )
    raise SchemaError(f"ClickHouse type {ch_type} has no Spark counterpart in the contract")


def spark_schema(schema: TableSchema) -> T.StructType:
    """Payload fields of ``schema`` as Spark types (validated by the contract first)."""
    contract = compile_contract(schema)
    return T.StructType(
        [
            T.StructField(col.name, spark_type(col.ch_type), not rule.required)
            for col, rule in zip(schema.columns, contract.fields, strict=True)
        ]
    )


def _python_for_arrow(ch_type: str) -> Callable[[Any], Any] | None:
    """How a canonical value becomes what ``pa.array`` takes for its Spark type (None: as is)."""
    base, _ = unwrap(ch_type)
    if base == "UInt64":
        return Decimal
    name = base.partition("(")[0]
    if name == "Array":
        inner = _python_for_arrow(base[len("Array(") : -1])
        if inner is None:
            return None
        return lambda items: [None if v is None else inner(v) for v in items]
    if name == "Map":
        inner_type = base[len("Map(") : -1].split(",", 1)[1].strip()
        inner = _python_for_arrow(inner_type)
        if inner is None:
            return lambda mapping: list(mapping.items())
        return lambda mapping: [(k, None if v is None else inner(v)) for k, v in mapping.items()]
    return None


def _payload_arrays(
    schema: TableSchema, target: pa.StructType, values: list[bytes | None], count: int
) -> tuple[list[pa.Array], dict[int, tuple[str, str]]]:
    """Payload arrays for ``count`` rows and the bad rows ``{position: (class, message)}``."""
    fast = core_decode.decode_json_arrow(values, schema) if values else None
    if fast is not None:
        try:
            arrays = [
                fast.column(i).combine_chunks().cast(target.field(i).type)
                for i in range(target.num_fields)
            ]
            return arrays, {}
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # a cast Arrow cannot vouch for: take the reference path
    decoded = decode_values(values, schema)  # JSON, or framed via the registry (per worker)
    bad = {b.index: (str(b.error_class), b.message) for b in decoded.bad}
    arrays = []
    for i, col in enumerate(schema.columns):
        to_python = _python_for_arrow(col.ch_type)
        column = iter(decoded.columns[col.name])
        full: list[Any] = []
        for position in range(count):
            if position in bad:
                full.append(None)
                continue
            value = next(column)
            full.append(value if to_python is None or value is None else to_python(value))
        arrays.append(pa.array(full, type=target.field(i).type))
    return arrays, bad


def _decode_batch(
    batch: pa.RecordBatch,
    schema: TableSchema,
    target: pa.StructType,
    max_record_bytes: int | None,
) -> pa.RecordBatch:
    count = batch.num_rows
    keys: list[bytes | None] = batch.column("key").to_pylist()
    values: list[bytes | None] = batch.column("value").to_pylist()
    errors: dict[int, tuple[str, str]] = {}
    if max_record_bytes is not None:
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            message = oversized(key, value, max_record_bytes)
            if message is not None:
                errors[i] = (str(ErrorClass.OVERSIZED), message)
    kept = [i for i in range(count) if i not in errors]
    arrays, bad = _payload_arrays(schema, target, [values[i] for i in kept], len(kept))
    for position, verdict in bad.items():
        errors[kept[position]] = verdict
    if len(kept) != count:  # spread the kept rows back over the whole batch
        where = {row: n for n, row in enumerate(kept)}
        take = pa.array([where.get(i) for i in range(count)], pa.int64())
        arrays = [array.take(take) for array in arrays]
    is_bad = [i in errors for i in range(count)]
    payload = pa.StructArray.from_arrays(arrays, fields=list(target))
    columns = [
        *(batch.column(name) for name in ("topic", "partition", "offset", "timestamp")),
        pa.array([k if b else None for k, b in zip(keys, is_bad, strict=True)], pa.binary()),
        pa.array([v if b else None for v, b in zip(values, is_bad, strict=True)], pa.binary()),
        pa.array([errors[i][0] if i in errors else None for i in range(count)], pa.string()),
        pa.array([errors[i][1] if i in errors else None for i in range(count)], pa.string()),
        payload,
    ]
    names = [*KAFKA_COLUMNS, ERROR_CLASS_COLUMN, ERROR_COLUMN, PARSED_COLUMN]
    return pa.RecordBatch.from_arrays(columns, names=names)


def tag_json(
    df: DataFrame, schema: TableSchema, *, max_record_bytes: int | None = None
) -> DataFrame:
    """Every Kafka row of ``df`` judged by the contract in one pass: the Kafka columns (``key``
    and ``value`` of bad rows only), ``error_class``/``error`` and the payload as a struct. Persist
    it and split it with :func:`split_tagged` to decode each record once.
    """
    # Nullable: bad rows carry no payload (the contract sees to good rows' required fields).
    payload = T.StructType([T.StructField(f.name, f.dataType, True) for f in spark_schema(schema)])
    reserved = {*SOURCE_COLUMNS.values(), TIMESTAMP_COLUMN}
    clash = set(payload.fieldNames()) & reserved
    if clash:
        raise SchemaError(f"schema fields {sorted(clash)} clash with reserved column names")
    out = T.StructType(
        [
            *(T.StructField(f.name, f.dataType) for f in KAFKA_SCHEMA),
            T.StructField(ERROR_CLASS_COLUMN, T.StringType()),
            T.StructField(ERROR_COLUMN, T.StringType()),
            T.StructField(PARSED_COLUMN, payload),
        ]
    )
    target = to_arrow_type(payload)

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield _decode_batch(batch, schema, target, max_record_bytes)

    return df.select(*KAFKA_COLUMNS).mapInArrow(decode, out)


def split_tagged(tagged: DataFrame, schema: TableSchema) -> tuple[DataFrame, DataFrame]:
    """Good rows (source columns + payload fields) and bad rows (Kafka columns + error)."""
    good = tagged.where(F.col(ERROR_CLASS_COLUMN).isNull()).select(
        *(F.col(src).alias(dst) for src, dst in SOURCE_COLUMNS.items()),
        F.col("timestamp").alias(TIMESTAMP_COLUMN),
        *(F.col(PARSED_COLUMN)[c.name].alias(c.name) for c in schema.columns),
    )
    bad = tagged.where(F.col(ERROR_CLASS_COLUMN).isNotNull()).select(
        *KAFKA_COLUMNS, ERROR_CLASS_COLUMN, ERROR_COLUMN
    )
    return good, bad
