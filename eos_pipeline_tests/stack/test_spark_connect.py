"""How the stack starts its Spark, checked without starting it (no JVM here).

The real server is started, queried and stopped by
``eos_pipeline_tests/adapters/test_spark_connect_hudi.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eos_dev.stack.connect_auth import INTERCEPTOR_CLASS, JAR_STEM, LOOPBACK_INTERCEPTOR_CLASS
from eos_dev.stack.services import Stack, StackConfig, StackError
from eos_dev.stack.spark_connect import (
    CONNECT,
    CONNECT_SERVER_CLASS,
    MASTER,
    connect_command,
    spark_services,
)
from eos_pipeline.adapters.jvm_artifacts import load_lock
from eos_pipeline.adapters.spark import HUDI_SPARK_CONF
from eos_pipeline.cli import main


def _conf(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_connect_jar_is_pinned_at_pysparks_version() -> None:
    import pyspark

    _, bundles = load_lock()
    [jar] = bundles["spark-connect"]
    assert jar.coords == f"org.apache.spark:spark-connect_2.12:{pyspark.__version__}"
    assert len(jar.sha256) == 64 and jar.size > 1_000_000


def test_server_command_carries_the_products_jars_and_hudi_settings(tmp_path: Path) -> None:
    config = StackConfig(state_dir=tmp_path, spark=True, spark_connect_port=4321, spark_memory="3g")
    jars = [Path("/j/spark-connect.jar"), Path("/j/hudi.jar"), Path("/j/eos-hudi-fencing-x.jar")]
    command = connect_command(config, jars, tmp_path)
    assert command[0].endswith("bin/spark-submit")
    assert command[command.index("--class") + 1] == CONNECT_SERVER_CLASS
    assert command[command.index("--master") + 1] == "local[2]"
    assert command[command.index("--driver-memory") + 1] == "3g"
    assert command[command.index("--jars") + 1] == ",".join(map(str, jars))
    conf = _conf(command)
    assert conf["spark.connect.grpc.binding.port"] == "4321"
    assert HUDI_SPARK_CONF.items() <= conf.items()
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.local.dir"].startswith(str(tmp_path))

    cluster = StackConfig(state_dir=tmp_path, spark=True, spark_workers=2, spark_master_port=7)
    command = connect_command(cluster, jars, tmp_path)
    assert command[command.index("--master") + 1] == "spark://127.0.0.1:7"
    assert _conf(command)["spark.sql.shuffle.partitions"] == "4"  # 2 workers x 2 cores


def test_server_serves_loopback_only_unless_configured_otherwise(tmp_path: Path) -> None:
    jars = [Path("/j/spark-connect.jar"), Path(f"/j/{JAR_STEM}abc.jar")]
    key = "spark.connect.grpc.interceptor.classes"
    local = StackConfig(state_dir=tmp_path, spark=True)
    assert _conf(connect_command(local, jars, tmp_path))[key] == LOOPBACK_INTERCEPTOR_CLASS
    both = _conf(connect_command(local, jars, tmp_path, interceptors=[INTERCEPTOR_CLASS]))
    assert both[key] == f"{LOOPBACK_INTERCEPTOR_CLASS},{INTERCEPTOR_CLASS}"
    remote = StackConfig(state_dir=tmp_path, spark=True, spark_connect_remote=True)
    assert key not in _conf(connect_command(remote, jars, tmp_path))
    assert key not in _conf(connect_command(local, jars[:1], tmp_path))  # no interceptor jar


def test_services_follow_the_config_and_what_is_left_running(tmp_path: Path) -> None:
    def names(**kw: object) -> list[str]:
        return spark_services(Stack(StackConfig(state_dir=tmp_path, **kw)))  # type: ignore[arg-type]

    assert names() == []
    assert names(spark=True) == [CONNECT]
    assert names(spark=True, spark_workers=2) == [
        MASTER,
        "spark-worker-1",
        "spark-worker-2",
        CONNECT,
    ]
    # A worker started earlier with other settings is still stopped by `down`.
    (tmp_path / "spark-worker-10").mkdir()
    (tmp_path / "spark-worker-10" / "pid").write_text("999999999")
    assert names(spark=True, spark_workers=2)[-2:] == ["spark-worker-10", CONNECT]
    assert names() == ["spark-worker-10"]


def test_spark_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOS_SPARK", "1")
    monkeypatch.setenv("EOS_SPARK_CONNECT_PORT", "15999")
    monkeypatch.setenv("EOS_SPARK_MEMORY", "4g")
    monkeypatch.setenv("EOS_SPARK_WORKERS", "1")
    config = StackConfig.from_env(spark_cores=3)
    assert (config.spark, config.spark_connect_port, config.spark_memory) == (True, 15999, "4g")
    assert (config.spark_workers, config.spark_cores) == (1, 3)
    assert config.spark_connect_url == "sc://127.0.0.1:15999"
    assert StackConfig.from_env(spark=False).spark is False  # a flag wins over the variable
    monkeypatch.setenv("EOS_SPARK_WORKERS", "two")
    with pytest.raises(StackError, match="EOS_SPARK_WORKERS='two' is not a whole number"):
        StackConfig.from_env()


def test_status_shows_spark_only_when_it_was_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stack", "status", "--state-dir", str(tmp_path)]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [
        "zookeeper",
        "kafka",
    ]
    (tmp_path / CONNECT).mkdir()
    (tmp_path / CONNECT / "pid").write_text("999999999")  # its process is gone
    assert main(["stack", "status", "--state-dir", str(tmp_path), "--spark-connect-port", "7"]) == 0
    last = capsys.readouterr().out.splitlines()[-1].split()
    assert last[:3] == [CONNECT, "stopped", "sc://127.0.0.1:7"]
