"""The formats benchmark runs end to end on a few records against the real registry.

No timing is asserted (CI machines are noisy). What is checked: JSON, Avro and Protobuf each
went through the product's path, and chDB's own AvroConfluent parse ran as the floor; every
table held every Kafka offset once and the same rows as the JSON one; the registry was asked
once for each format's schema and every other record came from the cache; the figures went
into ``formats.json`` and beside the main benchmark's in ``latest.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.formats import AVRO_FLOOR, JSON_PATH
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline_tests.support.benchmark_child import run_smoke

pytestmark = pytest.mark.integration


def test_formats_smoke_run_measures_every_format_and_checks_the_rows(
    kafka_settings: KafkaSettings, zookeeper_hosts: str, schema_registry: str, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    (out / "latest.json").write_text(json.dumps({"figures": []}))  # the main benchmark's
    stdout = run_smoke(
        "benchmarks.formats",
        kafka_settings,
        zookeeper_hosts,
        out,
        timeout=300,
        extra=["--registry-url", schema_registry],
    )
    doc = json.loads((out / "formats.json").read_text())
    figures = {f["name"]: f for f in doc["figures"]}
    assert set(figures) == {
        JSON_PATH,
        "product path, Avro (registry, Confluent framing)",
        "product path, Protobuf (registry, Confluent framing)",
        AVRO_FLOOR,
    }
    for fig in figures.values():
        assert fig["records"] == 400 and fig["seconds"] > 0
    assert figures[AVRO_FLOOR]["ratio"] is not None
    # every run was checked on the data, the floor's table too, and every check passed
    # (3 offset checks, 4 same-rows checks, the floor's count)
    assert len(doc["checks"]) == 3 + 4 + 1 and all(doc["checks"].values()), doc["checks"]
    runs = {r["format"]: r for r in doc["registry"]["runs"]}
    assert runs["avro"]["lookups"] == runs["protobuf"]["lookups"] == 1
    assert runs["avro"]["cache_hits"] == runs["protobuf"]["cache_hits"] == 399
    assert doc["registry"]["lookup_ms_median"] > 0
    assert {"avro_vs_json", "protobuf_vs_json", "avro_vs_avro_floor"} <= set(doc["ratios"])
    assert json.loads((out / "latest.json").read_text())["formats"]["ratios"] == doc["ratios"]
    assert "| measurement |" in stdout and "checks: all passed" in stdout
