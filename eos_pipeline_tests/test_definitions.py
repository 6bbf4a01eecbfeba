"""The Dagster code location: it loads the repository's defs folder and validates."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from eos_pipeline import definitions
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.definitions import parse_partition_key, partition_key

REPO = Path(__file__).resolve().parents[1]


def test_code_location_loads_the_demo_pipelines() -> None:
    dg.Definitions.validate_loadable(definitions.defs)
    repo = definitions.defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert keys == {
        "kafka/demo-events",
        "clickhouse/demo/events",
        "hudi/demo_events",
        "kafka/demo-events.dlq",
        # the Avro pipeline (eos_pipeline/defs/demo_avro)
        "kafka/demo-avro",
        "clickhouse/demo/events_avro",
        "hudi/demo_events_avro",
        "kafka/demo-avro.dlq",
    }
    assert {s.name for s in repo.sensor_defs} == {
        f"{pipeline}_{sensor}"
        for pipeline in ("demo", "demo_avro")
        for sensor in ("partitions", "topics", "clickhouse_lag", "hudi_lag")
    }
    hudi = repo.assets_defs_by_key[dg.AssetKey(["hudi", "demo_events"])]
    assert hudi.backfill_policy == dg.BackfillPolicy.single_run()
    assert isinstance(hudi.partitions_def, dg.DynamicPartitionsDefinition)


def test_dagster_definitions_validate_passes_on_the_workspace() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    dagster = str(Path(sys.executable).with_name("dagster"))
    result = subprocess.run(
        [dagster, "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation successful" in result.stdout + result.stderr


def test_a_bad_pipeline_stops_the_code_location_with_the_field(tmp_path: Path) -> None:
    folder = tmp_path / "defs"
    shutil.copytree(REPO / "eos_pipeline" / "defs", folder)
    bad = folder / "demo" / "defs.yaml"
    bad.write_text(bad.read_text().replace("table: events", "table: ev-ents"))
    result = subprocess.run(
        [sys.executable, "-c", "import eos_pipeline.definitions"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "EOS_DEFS_DIR": str(folder)},
        check=False,
    )
    assert result.returncode != 0
    # Dagster names the file, line and field; the model's rule says what is wrong.
    assert f"attributes.clickhouse.table at {bad}:" in result.stderr
    assert "invalid name 'ev-ents'" in result.stderr


@pytest.mark.parametrize("tp", [TopicPartition("orders", 7), TopicPartition("a.b-c_d", 1234)])
def test_partition_keys_round_trip_without_awkward_characters(tp: TopicPartition) -> None:
    key = partition_key(tp)
    assert not set(key) & set(", |[] ")
    assert parse_partition_key(key) == tp


def test_bad_partition_key_names_the_expected_form() -> None:
    with pytest.raises(ValueError, match="<topic>__p<NNNN>"):
        parse_partition_key("orders-7")


def test_every_resource_and_each_of_its_settings_has_a_description() -> None:
    """The UI's resource pages show these; an empty one leaves a user guessing what it is for."""
    from dagster._core.remote_representation.external_data import RepositorySnap

    snap = RepositorySnap.from_def(definitions.defs.get_repository_def())
    assert {r.name for r in snap.resources} == {
        "clickhouse",
        "keeper",
        "spark",
        "kafka_demo",
        "kafka_demo_avro",
    }
    for resource in snap.resources:
        assert len(resource.resource_snapshot.description or "") > 40, resource.name
        undescribed = [f.name for f in resource.config_field_snaps if not f.description]
        assert not undescribed, f"{resource.name}: settings without a description: {undescribed}"


def test_each_sink_has_a_replay_job_that_is_a_dry_run_unless_told_otherwise() -> None:
    repo = definitions.defs.get_repository_def()
    for sink, pool in (("clickhouse", "chdb"), ("hudi", "hudi_demo_events")):
        job = repo.get_job(f"demo_replay_{sink}")
        (node,) = job.graph.node_defs
        assert node.pool == pool, "a replay waits for the sink's own runs of its table"
        fields = node.config_schema.config_type.fields
        assert fields["dry_run"].default_value is True
        assert fields["start"].is_required and not fields["end"].is_required
        assert all(f.description for f in fields.values())
