"""Pipelines as Dagster components: a defs folder loads into the same configuration the old
single file gave, templates render from the environment, secrets stay references, and ``dg``
sees every definition."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from eos_pipeline import cli
from eos_pipeline.components.config import ConfigError, EnvRef, parse_config
from eos_pipeline.components.project import load_project
from eos_pipeline_tests.support.defs_folder import write_defs

REPO = Path(__file__).resolve().parents[2]
OLD = """
keeper:
  hosts: ${ZK:-127.0.0.1:2181}
  root: /eos_components
  username: pipeline
  password: {env: EOS_TEST_KEEPER_PASSWORD}
clickhouse: {url: "chdb://${DATA:-/tmp/chdb}"}
sensor_interval_seconds: 7
pipelines:
  - name: orders
    kafka:
      bootstrap_servers: ${BOOT:-127.0.0.1:9092}
      topics: [orders]
      client: {sasl.password: {env: EOS_TEST_KAFKA_PASSWORD}}
    schema: {id: Int64, who: String}
    clickhouse: {database: shop, table: orders}
  - name: refunds
    kafka: {bootstrap_servers: "127.0.0.1:9092", topics: [orders]}
    schema: {id: Int64}
    clickhouse: {database: shop, table: refunds}
"""


def test_a_migrated_folder_loads_into_what_the_old_file_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOOT", "kafka:9093")
    monkeypatch.setenv("EOS_TEST_KAFKA_PASSWORD", "not-for-the-ui")
    folder = write_defs(OLD, tmp_path / "defs")
    assert sorted(p.name for p in folder.iterdir()) == ["orders", "refunds", "shared"]
    written = yaml.safe_load((folder / "orders" / "defs.yaml").read_text())
    assert written["type"] == "eos_pipeline.KafkaTablesComponent"
    assert (
        written["attributes"]["kafka"]["bootstrap_servers"] == "{{ env.BOOT or '127.0.0.1:9092' }}"
    )
    project = load_project(folder)
    old = parse_config(OLD, "p.yaml", environ={"BOOT": "kafka:9093"})
    assert project.config.model_dump() == old.model_dump()
    assert project.config.pipeline("orders").kafka.bootstrap_servers == "kafka:9093"
    # Secrets stay references: never read at load, shown by name only.
    assert project.config.keeper.password == EnvRef(env="EOS_TEST_KEEPER_PASSWORD")
    defs = project.definitions()
    kafka = defs.resources["kafka_orders"]
    assert "not-for-the-ui" not in repr(kafka) and kafka.client_secrets
    assert "not-for-the-ui" not in repr(defs.resources["keeper"])
    # Two pipelines on one topic: one topic asset; both tables; the sensors at the interval.
    keys = {k.to_user_string() for k in defs.resolve_all_asset_keys()}
    assert {"kafka/orders", "clickhouse/shop/orders", "clickhouse/shop/refunds"} <= keys
    sensors = defs.get_repository_def().sensor_defs
    assert {s.minimum_interval_seconds for s in sensors} == {7}


def test_migrate_config_writes_once_and_the_cli_finds_pipelines_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "pipelines.yaml"
    old.write_text(OLD)
    folder = tmp_path / "defs"
    assert cli.main(["migrate-config", str(old), "--defs", str(folder)]) == 0
    assert "orders/defs.yaml" in capsys.readouterr().out
    assert cli.main(["migrate-config", str(old), "--defs", str(folder)]) == 1
    assert "not overwritten" in capsys.readouterr().err
    # The failover command finds the pipeline by name in the folder (and refuses: one cluster).
    args = ["failover", "--pipeline", "orders", "--to", "B", "--defs", str(folder)]
    assert cli.main(args) == 1
    assert "no 'kafka.clusters'" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(OLD.replace("table: refunds", "table: orders"))
    assert cli.main(["migrate-config", str(bad), "--defs", str(tmp_path / "other")]) == 1
    assert "both write clickhouse.shop.orders" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_two_pipelines_on_one_table_are_refused_across_folders(tmp_path: Path) -> None:
    folder = write_defs(OLD, tmp_path / "defs")
    path = folder / "refunds" / "defs.yaml"
    path.write_text(path.read_text().replace("table: refunds", "table: orders"))
    with pytest.raises(ConfigError, match=r"both write clickhouse\.shop\.orders"):
        load_project(folder)


def test_a_rendered_value_is_checked_by_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_defs(OLD, tmp_path / "defs")
    shared = folder / "shared" / "defs.yaml"
    shared.write_text(
        "type: eos_pipeline.SharedResourcesComponent\n"
        "attributes:\n  spark: {remote: \"{{ env.REMOTE or 'local' }}\"}\n"
    )
    assert load_project(folder).config.spark.remote is None  # unset: in-process Spark
    monkeypatch.setenv("REMOTE", "spark:15002")
    with pytest.raises(Exception, match="shared") as failed:  # Dagster names the component
        load_project(folder)
    cause = failed.value.__cause__
    assert isinstance(cause, ConfigError), failed.value
    assert "shared/defs.yaml: spark.remote: remote must be an sc://host:port URL" in str(cause)


def test_dg_checks_and_lists_every_definition() -> None:
    """``dg check yaml``, ``dg check defs`` and ``dg list defs`` from the repository root."""
    dg_cli = shutil.which("dg") or str(Path(sys.executable).parent / "dg")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "devtools")])}

    def run(*args: str) -> str:
        result = subprocess.run(
            [dg_cli, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    assert "All component YAML validated successfully" in run("check", "yaml")
    assert "All definitions loaded successfully" in run("check", "defs")
    listed = json.loads(run("list", "defs", "--json"))
    from eos_pipeline.definitions import defs

    repo = defs.get_repository_def()
    names = {
        "assets": {k.to_user_string() for k in defs.resolve_all_asset_keys()},
        "asset_checks": {
            f"{c.asset_key.to_user_string()}:{c.name}"
            for d in defs.asset_checks or ()
            for c in d.check_specs
        },
        "sensors": {s.name for s in repo.sensor_defs},
        "jobs": {j.name for j in repo.get_all_jobs() if not j.name.startswith("__")},
    }
    assert {a["asset_key"] for a in listed["assets"]} == names["assets"]
    assert {c["key"] for c in listed["asset_checks"]} == names["asset_checks"]
    assert {s["name"] for s in listed["sensors"]} == names["sensors"]
    assert {j["name"] for j in listed["jobs"]} >= names["jobs"]
    assert dg.AssetKey(["kafka", "demo-events"]) in defs.resolve_all_asset_keys()


def test_tables_carry_freshness_from_the_lag_target_and_column_lineage_from_the_topic(
    tmp_path: Path,
) -> None:
    folder = write_defs(
        OLD.replace("  - name: refunds\n", "  - name: refunds\n    lag_target_seconds: 600\n"),
        tmp_path / "defs",
    )
    defs = load_project(folder).definitions()
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    refunds, orders = specs["clickhouse/shop/refunds"], specs["clickhouse/shop/orders"]
    assert refunds.freshness_policy == dg.FreshnessPolicy.time_window(
        fail_window=timedelta(minutes=10), warn_window=timedelta(minutes=5)
    )
    assert orders.freshness_policy is None  # no target, no policy
    lineage = orders.metadata["dagster/column_lineage"].deps_by_column
    topic = dg.AssetKey(["kafka", "orders"])
    assert lineage["who"] == [dg.TableColumnDep(asset_key=topic, column_name="who")]
    assert lineage["_offset"] == [dg.TableColumnDep(asset_key=topic, column_name="offset")]
    assert lineage["_timestamp"] == [dg.TableColumnDep(asset_key=topic, column_name="timestamp")]
    table_columns = {c.name for c in orders.metadata["dagster/column_schema"].columns}
    assert set(lineage) == table_columns
    # Every column named in the lineage exists on the topic asset.
    topic_columns = specs["kafka/orders"].metadata["dagster/column_schema"].columns
    assert {d.column_name for deps in lineage.values() for d in deps} <= {
        c.name for c in topic_columns
    }
    # The demo's pipeline sets one: its tables show in Asset Health.
    from eos_pipeline.definitions import defs as demo

    demo_specs = {s.key.to_user_string(): s for s in demo.resolve_all_asset_specs()}
    assert demo_specs["hudi/demo_events"].freshness_policy is not None


def test_a_scaffolded_pipeline_loads_beside_the_others(tmp_path: Path) -> None:
    """What ``dg scaffold defs eos_pipeline.KafkaTablesComponent payments`` writes."""
    from eos_pipeline.components.project import PipelineScaffolder

    folder = write_defs(OLD, tmp_path / "defs")
    target = folder / "payments"
    target.mkdir()
    PipelineScaffolder().scaffold(
        dg.ScaffoldRequest(
            type_name="eos_pipeline.KafkaTablesComponent",
            target_path=target,
            scaffold_format="yaml",
            project_root=tmp_path,
            params=None,
        )
    )
    pipeline = load_project(folder).config.pipeline("payments")
    assert pipeline.kafka.topics == ["payments-events"]
    assert pipeline.kafka.bootstrap_servers == "127.0.0.1:9092"  # the template's default
