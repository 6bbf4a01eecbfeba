"""Class-data sharing for the Spark JVMs this project starts: most of a short-lived driver's CPU
goes to loading Spark's classes, which Java 17 can archive once (``-XX:ArchiveClassesAtExit``)
and map at every start (measured: a session's start and first job 10.9 s -> 5.4-7.3 s).

``eos-pipeline fetch`` builds the archive once per Spark version with a short training session.
Only Spark's own ``jars/`` are archived; a JVM whose class path or JDK differs runs without it
(the JVM checks; :data:`QUIET` keeps its notice out of the logs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

#: The JVM options that map the archive, without a word when it does not match.
QUIET = ("-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")

#: The training session: the SQL, Arrow and Parquet paths of every sink run, without the bundles
#: (not archived; it runs while they download), so without Hudi's settings either.
_TRAINING = """
import sys, tempfile
from eos_pipeline.adapters.spark import spark_conf
from pyspark.sql import SparkSession
conf = spark_conf("local[2]", jars=[], quick_start=True, cds=False)
for key in ("spark.kryo.registrator", "spark.sql.extensions", "spark.sql.catalog.spark_catalog"):
    conf.pop(key)
conf["spark.driver.extraJavaOptions"] += " -XX:ArchiveClassesAtExit=" + sys.argv[1]
builder = SparkSession.builder
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
df = spark.range(2000).selectExpr("id", "id % 7 AS k", "cast(id AS string) AS s")
df.groupBy("k").count().collect()
with tempfile.TemporaryDirectory() as out:
    df.write.mode("overwrite").partitionBy("k").parquet(out)
    spark.read.parquet(out).where("k = 3").count()
df.mapInArrow(lambda batches: batches, df.schema).count()
spark.stop()
"""


def archive_path(cache_dir: Path | None = None) -> Path:
    """Where the archive of this Spark version lives (beside the cached jars)."""
    import pyspark

    from eos_pipeline.adapters.jvm_artifacts import default_cache_dir

    base = cache_dir if cache_dir is not None else default_cache_dir()
    return base / "spark-cds" / f"spark-{pyspark.__version__}.jsa"


def java_options(cache_dir: Path | None = None) -> list[str]:
    """Options mapping the archive into a Spark driver's JVM; none when it was not built."""
    path = archive_path(cache_dir)
    return [f"-XX:SharedArchiveFile={path}", *QUIET] if path.is_file() else []


def ensure_archive(
    cache_dir: Path | None = None, progress: Callable[[str], None] = lambda _line: None
) -> Path | None:
    """Build the archive if it is missing; returns it, or None when the build failed (Spark
    then starts as before: the archive only saves time)."""
    path = archive_path(cache_dir)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    progress(f"spark-cds: building the class-data archive of Spark's JVM ({path.name}) ...")
    with tempfile.TemporaryDirectory(dir=path.parent) as work:
        partial = Path(work) / path.name
        done = subprocess.run(
            [sys.executable, "-c", _TRAINING, str(partial)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )
        if done.returncode != 0 or not partial.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            progress("spark-cds: not built, Spark starts without it: " + " | ".join(tail))
            return None
        partial.replace(path)  # atomic: a JVM never maps a half-written archive
    progress(f"spark-cds: {path}")
    return path
