"""Run Apache Hudi's own HoodieStreamer once, as a peer of this project's Hudi sink.

HoodieStreamer (``org.apache.hudi.utilities.streamer.HoodieStreamer``) is what a Hudi user would
run instead of this project: it reads Kafka with its JSON source, writes one Hudi commit per
sync and keeps the Kafka position in that commit, in the same ``topic,partition:offset,...``
string this project writes. The hand-over test and the Hudi benchmark run it through here.

Which HoodieStreamer: the reachable Maven Central holds no ``hudi-utilities-bundle`` nor
``hudi-utilities-slim-bundle`` of any version, and no ``hudi-utilities`` newer than
``hudi-utilities_2.12:0.14.0``. That plain jar is built against Hudi's unshaded modules, while
the only Spark runtime for Hudi 0.14.0 there is ``hudi-spark3.4-bundle_2.12:0.14.0``, which
shades four packages the utilities use (JCommander, Dropwizard metrics, Apache HttpClient and
Hudi's Avro bridge in ``org.apache.spark.sql.avro``). Hudi's own utilities-bundle build resolves
this by relocating the utilities' references to the shaded names; :func:`relocate_class` does
exactly that to the pinned jar (constant-pool rewrite, nothing else changes), once, into the
artifact cache. Without it the run fails with ``ClassCastException: OperationConverter cannot
be cast to com.beust.jcommander.IStringConverter`` or ``NoClassDefFoundError:
org/apache/spark/sql/avro/HoodieAvroDeserializer``.

Facts of that combination (measured with PySpark 3.5.7): Hudi 0.14.0 has no Spark 3.5 adapter,
so ``HoodieSparkSessionExtension`` logs ``ClassNotFoundException: ...Spark2Adapter`` at start;
the JSON-to-Avro write path never needs the adapter and commits fine. It writes table version 6
and the checkpoint under ``deltastreamer.checkpoint.key`` (V1) only, and it reads only that key.
Do not add a transformer: that path converts rows through the missing adapter.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

STREAMER_CLASS: Final = "org.apache.hudi.utilities.streamer.HoodieStreamer"
JSON_KAFKA_SOURCE: Final = "org.apache.hudi.utilities.sources.JsonKafkaSource"
FILE_SCHEMA_PROVIDER: Final = "org.apache.hudi.utilities.schema.FilebasedSchemaProvider"
BUNDLE: Final = "hoodie-streamer"
UTILITIES_ARTIFACT: Final = "hudi-utilities_2.12"

#: Packages the Hudi 0.14.0 Spark bundle shades under ``org.apache.hudi.`` and that the plain
#: utilities jar refers to unshaded (found by listing the jar's constant pools).
RELOCATED_PACKAGES: Final = (
    "com/beust/jcommander/",
    "com/codahale/metrics/",
    "org/apache/http/",
    "org/apache/spark/sql/avro/",
)
SHADE_PREFIX: Final = "org/apache/hudi/"
# Bump when relocate_class changes, so a cached relocated jar is rebuilt.
_RELOCATOR_VERSION: Final = 1

TableType = Literal["COPY_ON_WRITE", "MERGE_ON_READ"]
StreamerOperation = Literal["UPSERT", "INSERT", "BULK_INSERT"]


class StreamerError(RuntimeError):
    """HoodieStreamer could not be prepared or its run failed."""


# ------------------------------------------------------------------------------ relocation
def _relocation_pattern(packages: Iterable[str]) -> re.Pattern[bytes]:
    alternatives = []
    for package in packages:
        for sep in ("/", "."):
            alternatives.append(re.escape(package.replace("/", sep).encode()))
    # The lookbehind keeps an already shaded name from being shaded twice.
    shaded = re.escape(SHADE_PREFIX.encode())
    shaded_dots = re.escape(SHADE_PREFIX.replace("/", ".").encode())
    return re.compile(
        b"(?<!" + shaded + b")(?<!" + shaded_dots + b")(" + b"|".join(alternatives) + b")"
    )


_PATTERN = _relocation_pattern(RELOCATED_PACKAGES)
# Constant-pool entry sizes after the tag byte, for every tag but Utf8 (1).
_FIXED_SIZES = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2}
_FIXED_SIZES.update({17: 4, 18: 4, 19: 2, 20: 2})


def _shade(match: re.Match[bytes]) -> bytes:
    name = match.group(1)
    sep = b"." if b"." in name else b"/"
    return SHADE_PREFIX.replace("/", sep.decode()).encode() + name


def relocate_class(data: bytes) -> bytes:
    """Rewrite a class file's names from the unshaded packages to the bundle's shaded ones.

    Only ``CONSTANT_Utf8`` entries change (class names, descriptors, signatures and string
    literals all live there, in slash or dot form); every other byte is kept, which is safe
    because nothing in a class file refers to a constant by byte offset.
    """
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise StreamerError("not a class file")
    count = int.from_bytes(data[8:10], "big")
    out = bytearray(data[:10])
    pos, index = 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            length = int.from_bytes(data[pos + 1 : pos + 3], "big")
            text = _PATTERN.sub(_shade, data[pos + 3 : pos + 3 + length])
            if len(text) > 0xFFFF:
                raise StreamerError("relocated constant does not fit a class file")
            out += b"\x01" + len(text).to_bytes(2, "big") + text
            pos += 3 + length
        elif tag in _FIXED_SIZES:
            size = 1 + _FIXED_SIZES[tag]
            out += data[pos : pos + size]
            pos += size
            if tag in (5, 6):  # longs and doubles take two constant-pool slots
                index += 1
        else:
            raise StreamerError(f"unknown constant-pool tag {tag} at byte {pos}")
        index += 1
    out += data[pos:]
    return bytes(out)


def relocate_jar(source: Path, target: Path) -> Path:
    """Write ``source`` with every class relocated to ``target`` (stored, same entry order).

    Entries are stored uncompressed with their original timestamps, so the same input gives
    the same bytes on any machine (deflate output depends on the zlib build).
    """
    partial = target.with_suffix(".part")
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".class"):
                data = relocate_class(data)
            entry = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            entry.external_attr = info.external_attr
            dst.writestr(entry, data)
    partial.replace(target)
    return target


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def streamer_jars(cache_dir: Path | None = None) -> tuple[Path, list[Path]]:
    """``(application jar, --jars)`` for spark-submit, fetched and relocated on first use."""
    from eos_pipeline.adapters.jvm_artifacts import ensure_bundle

    jars = ensure_bundle(BUNDLE, cache_dir)
    utilities = [j for j in jars if j.name.startswith(UTILITIES_ARTIFACT + "-")]
    if len(utilities) != 1:
        raise StreamerError(f"bundle {BUNDLE!r} must hold one {UTILITIES_ARTIFACT} jar")
    source = utilities[0]
    digest = _sha256(source)[:16]
    target = source.parent / "relocated" / f"{source.stem}-r{_RELOCATOR_VERSION}-{digest}.jar"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        relocate_jar(source, target)
    return target, [j for j in jars if j != source]


# ------------------------------------------------------------------------------ one run
@dataclass(frozen=True)
class StreamerTable:
    """One HoodieStreamer target: the Kafka topic, the table and how rows are keyed.

    ``avro_schema`` is the record schema of the JSON values, used as source and target schema
    (FilebasedSchemaProvider). ``props`` are extra properties (Hudi write configs, Kafka client
    settings) and win over the defaults built here.
    """

    topic: str
    table_path: str
    table_name: str
    avro_schema: Mapping[str, Any]
    record_key_fields: tuple[str, ...]
    ordering_field: str
    table_type: TableType = "COPY_ON_WRITE"
    operation: StreamerOperation = "UPSERT"
    partition_fields: tuple[str, ...] = ()
    props: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.record_key_fields:
            raise ValueError("record_key_fields must name at least one field")
        if self.table_type not in ("COPY_ON_WRITE", "MERGE_ON_READ"):
            raise ValueError(f"unknown table type {self.table_type!r}")
        if self.operation not in ("UPSERT", "INSERT", "BULK_INSERT"):
            raise ValueError(f"unknown operation {self.operation!r}")


def key_generator(table: StreamerTable) -> str:
    """The key generator this table needs; a table remembers it, so every writer must agree."""
    if table.partition_fields:
        return "org.apache.hudi.keygen.ComplexKeyGenerator"
    # Handles one or several record-key fields (``f1:v1,f2:v2`` for several).
    return "org.apache.hudi.keygen.NonpartitionedKeyGenerator"


def streamer_props(
    table: StreamerTable, bootstrap_servers: str, schema_file: Path
) -> dict[str, str]:
    """The properties file of one run; Kafka client settings go in unprefixed."""
    schema_uri = schema_file.resolve().as_uri()
    props = {
        "bootstrap.servers": bootstrap_servers,
        # A new table starts at the beginning of the topic, like this project's default.
        "auto.offset.reset": "earliest",
        # The Java client defaults to read_uncommitted; never read open or aborted transactions.
        "isolation.level": "read_committed",
        "hoodie.streamer.source.kafka.topic": table.topic,
        "hoodie.streamer.schemaprovider.source.schema.file": schema_uri,
        "hoodie.streamer.schemaprovider.target.schema.file": schema_uri,
        "hoodie.datasource.write.recordkey.field": ",".join(table.record_key_fields),
        "hoodie.datasource.write.partitionpath.field": ",".join(table.partition_fields),
        "hoodie.datasource.write.keygenerator.class": key_generator(table),
        "hoodie.datasource.write.precombine.field": table.ordering_field,
        "hoodie.datasource.hive_sync.enable": "false",
    }
    props.update({k: str(v) for k, v in table.props.items()})
    return props


def spark_home() -> Path:
    """PySpark's own Spark distribution (``bin/spark-submit``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def streamer_command(
    table: StreamerTable,
    props_file: Path,
    *,
    master: str = "local[2]",
    driver_memory: str = "1g",
    source_limit: int | None = None,
    spark_options: Mapping[str, str] | None = None,
    jars: tuple[Path, Sequence[Path]] | None = None,
) -> list[str]:
    """The spark-submit command line of one sync (no ``--continuous``)."""
    app, extra = jars if jars is not None else streamer_jars()
    conf = {
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.extraJavaOptions": "-Djol.skipHotspotSAAttach=true",
        **(spark_options or {}),
    }
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        master,
        "--driver-memory",
        driver_memory,
        "--jars",
        ",".join(str(j) for j in extra),
        "--class",
        STREAMER_CLASS,
    ]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += [
        str(app),
        "--props",
        props_file.resolve().as_uri(),
        "--table-type",
        table.table_type,
        "--target-base-path",
        table.table_path,
        "--target-table",
        table.table_name,
        "--source-class",
        JSON_KAFKA_SOURCE,
        "--schemaprovider-class",
        FILE_SCHEMA_PROVIDER,
        "--source-ordering-field",
        table.ordering_field,
        "--op",
        table.operation,
    ]
    if source_limit is not None:
        command += ["--source-limit", str(source_limit)]
    return command


@dataclass(frozen=True)
class StreamerRun:
    """A finished sync: how long the spark-submit took and where its log is."""

    seconds: float
    log_path: Path
    command: tuple[str, ...]


def run_streamer(
    table: StreamerTable,
    bootstrap_servers: str,
    work_dir: Path,
    *,
    master: str = "local[2]",
    driver_memory: str = "1g",
    source_limit: int | None = None,
    spark_options: Mapping[str, str] | None = None,
    timeout: float = 600.0,
) -> StreamerRun:
    """Run one HoodieStreamer sync to completion in its own JVM; raise if it fails.

    HoodieStreamer resumes from the checkpoint of the table's latest commit (the V1 key), or
    from ``auto.offset.reset`` for a new table, reads up to the end of the topic (or
    ``source_limit`` records) and writes one commit. Nothing to read: no commit.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    schema_file = work_dir / f"{table.table_name}.avsc"
    schema_file.write_text(json.dumps(table.avro_schema, indent=1))
    props_file = work_dir / f"{table.table_name}.properties"
    props = streamer_props(table, bootstrap_servers, schema_file)
    props_file.write_text("".join(f"{k}={v}\n" for k, v in sorted(props.items())))
    command = streamer_command(
        table,
        props_file,
        master=master,
        driver_memory=driver_memory,
        source_limit=source_limit,
        spark_options=spark_options,
    )
    log_path = work_dir / f"{table.table_name}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    env = {**os.environ, "SPARK_HOME": str(spark_home())}
    if shutil.which("java") is None and "JAVA_HOME" not in env:
        raise StreamerError("no Java runtime found (java on PATH or JAVA_HOME)")
    began = time.monotonic()
    with log_path.open("wb") as log:
        try:
            result = subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise StreamerError(
                f"HoodieStreamer did not finish in {timeout} s; log {log_path}"
            ) from exc
    seconds = time.monotonic() - began
    if result.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-40:]
        raise StreamerError(
            f"HoodieStreamer exited with {result.returncode}; log {log_path}:\n" + "\n".join(tail)
        )
    return StreamerRun(seconds, log_path, tuple(command))


__all__ = [
    "RELOCATED_PACKAGES",
    "STREAMER_CLASS",
    "StreamerError",
    "StreamerRun",
    "StreamerTable",
    "key_generator",
    "relocate_class",
    "relocate_jar",
    "run_streamer",
    "spark_home",
    "streamer_command",
    "streamer_jars",
    "streamer_props",
]
