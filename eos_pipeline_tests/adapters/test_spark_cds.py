"""Spark's class-data archive: built by ``fetch``, mapped by the Spark drivers we start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eos_dev.stack.config import StackConfig
from eos_dev.stack.spark_connect import server_conf
from eos_pipeline.adapters import spark_cds
from eos_pipeline.adapters.jvm_artifacts import DEFAULT_CACHE_ENV
from eos_pipeline.adapters.spark import spark_conf

#: A session started from the product's Spark settings, with ``-Xshare:on`` appended: the JVM
#: refuses to start unless it maps the archive (the quiet default only drops it).
_MAPPED_SESSION = """
import sys
from eos_pipeline.adapters.spark import spark_conf
from pyspark.sql import SparkSession
conf = spark_conf("local[1]", quick_start=sys.argv[1] == "quick")
assert "-XX:SharedArchiveFile=" in conf["spark.driver.extraJavaOptions"]
conf["spark.driver.extraJavaOptions"] += " -Xshare:on"
builder = SparkSession.builder
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
print("rows", spark.range(10).count())
spark.stop()
"""


def test_the_archive_is_mapped_only_when_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEFAULT_CACHE_ENV, str(tmp_path))
    assert spark_cds.java_options() == []
    assert "SharedArchiveFile" not in spark_conf(jars=[])["spark.driver.extraJavaOptions"]
    path = spark_cds.archive_path()
    assert path.parent == tmp_path / "spark-cds"
    path.parent.mkdir()
    path.write_bytes(b"")
    option = f"-XX:SharedArchiveFile={path}"
    assert option in spark_conf(jars=[])["spark.driver.extraJavaOptions"].split()
    assert option not in spark_conf(jars=[], cds=False)["spark.driver.extraJavaOptions"].split()
    # The Connect server's driver maps it; its executors (another class path) do not.
    server = server_conf(StackConfig(state_dir=tmp_path), tmp_path)
    assert option in server["spark.driver.extraJavaOptions"].split()
    assert option not in server["spark.executor.extraJavaOptions"].split()


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.parametrize("jit", ["quick", "default"])
def test_a_spark_driver_started_by_the_product_maps_the_archive(jit: str) -> None:
    # Built by `eos-pipeline fetch` (make test runs it first); built here when missing.
    assert spark_cds.ensure_archive() is not None
    done = subprocess.run(
        [sys.executable, "-c", _MAPPED_SESSION, jit],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and "rows 10" in done.stdout, done.stderr[-3000:]
