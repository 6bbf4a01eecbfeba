"""``format:`` and ``registry:`` in the pipelines file reach the schema both sinks decode by."""

from __future__ import annotations

import pytest

from eos_pipeline.components.config import ConfigError, parse_config
from eos_pipeline.core.schema import Format, Secret

BASE = """
pipelines:
  - name: orders
    kafka: {bootstrap_servers: "127.0.0.1:9092", topics: [orders]}
    schema: {id: Int64}
    clickhouse: {database: shop, table: orders}
"""


def _with(extra: str) -> str:
    return BASE.replace("    schema:", f"{extra}\n    schema:")


def test_json_stays_the_default_without_a_registry() -> None:
    schema = parse_config(BASE, "p.yaml").pipeline("orders").table_schema
    assert schema.format.kind is Format.JSON and schema.format.registry is None


def test_avro_with_a_registry_and_a_password_from_the_environment() -> None:
    text = _with(
        "    format: avro\n"
        "    registry: {url: 'http://reg:8081/apis/ccompat/v7/', username: me,"
        " password: {env: REG_PASSWORD}, timeout_s: 3}"
    )
    fmt = parse_config(text, "p.yaml").pipeline("orders").table_schema.format
    assert fmt.kind is Format.AVRO
    assert fmt.registry is not None
    assert fmt.registry.url == "http://reg:8081/apis/ccompat/v7"
    assert (fmt.registry.username, fmt.registry.password) == ("me", Secret(env="REG_PASSWORD"))
    assert fmt.registry.timeout_s == 3


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("    format: protobuf", "needs a schema registry"),
        ("    format: xml", "format"),
        ("    format: avro\n    registry: {url: 'reg:8081'}", "url"),
        (
            "    format: avro\n    registry: {url: 'http://r', password: x}",
            "needs registry.username",
        ),
        (
            "    format: avro\n    registry: {url: 'http://r', username: u, token: {env: T}}",
            "not both",
        ),
    ],
)
def test_bad_format_settings_are_refused_at_load(extra: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config(_with(extra), "p.yaml")
