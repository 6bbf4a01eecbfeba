"""``registry.subject`` instead of ``schema:``: the columns come from the subject's latest schema,
resolved once when the definitions load, and the assets show them (issue 27)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from confluent_kafka.schema_registry import Schema

from eos_pipeline.adapters.registry import schemas_for
from eos_pipeline.components.assets import clickhouse_key, hudi_key
from eos_pipeline.components.config import ConfigError, parse_config
from eos_pipeline.components.project import (
    SubjectUnavailableError,
    resolve_subject,
)
from eos_pipeline.core.errors import Fault
from eos_pipeline.core.schema import RegistrySettings, SchemaError
from eos_pipeline_tests.support.definitions import build_definitions

AVRO = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "amount", "type": "double"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "level", "type": "int", "default": 3},
        ],
    }
)


def _yaml(url: str, subject: str = "orders-value", extra: str = "") -> str:
    return f"""
pipelines:
  - name: orders
    kafka: {{bootstrap_servers: "127.0.0.1:1", topics: [orders]}}
    format: avro
    registry: {{url: "{url}", subject: {subject}, timeout_s: 2}}
    clickhouse: {{database: shop, table: orders}}
    hudi: {{path: /tmp/nowhere/orders, table: orders}}
{extra}"""


def _registered(url: str) -> int:
    client = schemas_for(RegistrySettings(url, timeout_s=2)).client
    return int(client.register_schema("orders-value", Schema(AVRO, "AVRO")))


def test_the_columns_come_from_the_subject_and_the_assets_show_them() -> None:
    url = "mock://subject-columns"
    schema_id = _registered(url)
    config = parse_config(_yaml(url), "p.yaml")
    pipeline = resolve_subject(config.pipelines[0])
    schema = pipeline.table_schema
    assert schema.schema_id == schema_id
    assert [(c.name, c.sql_type, c.default) for c in schema.columns] == [
        ("id", "Int64", None),
        ("amount", "Float64", None),
        ("note", "Nullable(String)", None),
        ("level", "Int32", 3),
    ]
    repo = build_definitions(config).get_repository_def()
    for key in (clickhouse_key(pipeline), hudi_key(pipeline)):
        spec = repo.assets_defs_by_key[key].specs_by_key[key]
        shown = spec.metadata["dagster/column_schema"].columns
        assert [c.name for c in shown][-4:] == ["id", "amount", "note", "level"]
        note = shown[-2]
        assert "registry subject orders-value" in (note.description or "")
        assert f"schema id {schema_id}" in (note.description or "")
    ch = repo.assets_defs_by_key[clickhouse_key(pipeline)].specs_by_key[clickhouse_key(pipeline)]
    assert [c.type for c in ch.metadata["dagster/column_schema"].columns][-2:] == [
        "Nullable(String)",
        "Int32",
    ]


def test_schema_and_subject_are_one_or_the_other() -> None:
    both = _yaml("mock://x") + "    schema: {id: Int64}\n"
    with pytest.raises(ConfigError, match=r"either 'schema:' or 'registry\.subject'"):
        parse_config(both, "p.yaml")
    neither = _yaml("mock://x").replace(", subject: orders-value", "")
    with pytest.raises(ConfigError, match="give the payload columns"):
        parse_config(neither, "p.yaml")
    with pytest.raises(ConfigError, match="subject"):
        parse_config(_yaml("mock://x", subject="'has space'"), "p.yaml")


def test_unresolved_columns_are_not_guessed() -> None:
    with pytest.raises(SchemaError, match="not resolved yet"):
        _ = parse_config(_yaml("mock://x"), "p.yaml").pipelines[0].table_schema


def test_a_registry_down_at_load_is_one_named_line_and_transient() -> None:
    config = parse_config(_yaml("http://127.0.0.1:9"), "p.yaml")
    with pytest.raises(SubjectUnavailableError) as caught:
        build_definitions(config)
    message = str(caught.value)
    assert message.startswith("p.yaml: pipeline 'orders': columns from registry subject")
    assert "could not be reached" in message and "reload the code location" in message
    assert "\n" not in message and caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert caught.value.fault is Fault.TRANSIENT


def test_an_unknown_subject_or_hudi_key_is_a_config_error() -> None:
    url = "mock://subject-unknown"
    _registered(url)
    with pytest.raises(ConfigError, match="no subject 'other-value'"):
        build_definitions(parse_config(_yaml(url, subject="other-value"), "p.yaml"))
    hudi = "path: /tmp/nowhere/orders, table: orders"
    keyed = _yaml(url).replace(hudi, hudi + ", record_key: [nope]")
    with pytest.raises(ConfigError, match=r"hudi.record_key: \['nope'\] not among"):
        build_definitions(parse_config(keyed, "p.yaml"))


def test_a_written_schema_needs_no_registry_at_load() -> None:
    text = _yaml("http://127.0.0.1:9").replace(", subject: orders-value", "")
    text += "    schema: {id: Int64}\n"
    defs = build_definitions(parse_config(text, "p.yaml"))
    assert isinstance(defs, dg.Definitions)


def test_an_evolution_is_in_the_materialization_and_needs_a_person_when_refused() -> None:
    from eos_pipeline.components.assets import evolution_metadata, person_cause
    from eos_pipeline.core.evolution import IncompatibleSchemaChange, avro_columns, plan_evolution
    from eos_pipeline.core.schema import Column, Format, PayloadFormat, TableSchema
    from eos_pipeline.sinks.clickhouse import SchemaFollower

    fmt = PayloadFormat(Format.AVRO, RegistrySettings("mock://meta"))
    follower = SchemaFollower(TableSchema(avro_columns(AVRO), format=fmt, schema_id=4))
    assert evolution_metadata(follower) == {"schema_id": 4}
    newer = (*follower.schema.columns, Column("channel", "String", default="web"))
    follower.adopt(plan_evolution(follower.schema, newer, writer_id=8))
    metadata = evolution_metadata(follower)
    assert metadata["schema_id"] == 8
    (applied,) = metadata["schema_evolution"].data
    assert applied["columns_added"] == ["channel String"] and applied["from_schema_id"] == 4
    # hand-written schemas never evolve: no such metadata
    assert evolution_metadata(SchemaFollower(TableSchema(avro_columns(AVRO), format=fmt))) == {}
    refused = IncompatibleSchemaChange("field 'x': ...", "x", 4, 9)
    assert person_cause(refused) is not None


def _clickhouse_only(url: str) -> str:
    return _yaml(url).replace("    hudi: {path: /tmp/nowhere/orders, table: orders}\n", "")


def test_a_defs_folder_pipeline_resolves_its_subject_when_the_component_loads(
    tmp_path: Path,
) -> None:
    from eos_pipeline.components.project import load_project
    from eos_pipeline_tests.support.defs_folder import write_defs

    url = "mock://subject-component"
    schema_id = _registered(url)
    folder = write_defs(_clickhouse_only(url), tmp_path / "defs")
    project = load_project(folder)
    assert project.config.pipeline("orders").table_schema.schema_id == schema_id
    repo = project.definitions().get_repository_def()
    key = dg.AssetKey(["clickhouse", "shop", "orders"])
    shown = repo.assets_defs_by_key[key].specs_by_key[key].metadata["dagster/column_schema"]
    assert [c.name for c in shown.columns][-4:] == ["id", "amount", "note", "level"]
    # the registry down when the component loads: Dagster names the component, the cause is
    # the one line
    down = write_defs(_clickhouse_only("http://127.0.0.1:9"), tmp_path / "down")
    with pytest.raises(Exception, match="orders") as failed:
        load_project(down)
    cause = failed.value.__cause__
    assert isinstance(cause, SubjectUnavailableError), failed.value
    assert "orders/defs.yaml: pipeline 'orders': columns from registry subject" in str(cause)
