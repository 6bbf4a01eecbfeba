"""The pipelines file: a good one loads; a bad one fails at load, naming the field and the fault."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from eos_pipeline.components.assets import clickhouse_spec, hudi_spec
from eos_pipeline.components.config import ConfigError, parse_config
from eos_pipeline.components.project import load_project
from eos_pipeline.components.resources import KafkaResource, MissingSecretError
from eos_pipeline.core.planning import DEFAULT_BULK_INSERT_MIN_RECORDS
from eos_pipeline_tests.support.definitions import build_resources, is_remote

GOOD = """
keeper: {hosts: "${ZK:-127.0.0.1:2181}"}
pipelines:
  - name: orders
    kafka:
      bootstrap_servers: "${BOOT:-127.0.0.1:9092}"
      topics: [orders]
      client: {security.protocol: SASL_SSL, sasl.password: {env: ORDERS_KAFKA_PASSWORD}}
    schema: {id: Int64, note: Nullable(String)}
    batch: {max_records: 500}
    clickhouse: {database: shop, table: orders}
    hudi: {path: /data/orders, table: orders, partition_fields: [id]}
"""


def test_good_file_loads_with_defaults_and_interpolation() -> None:
    config = parse_config(GOOD, "p.yaml", environ={"BOOT": "kafka:9093"})
    pipeline = config.pipeline("orders")
    assert pipeline.kafka.bootstrap_servers == "kafka:9093"
    assert config.keeper.hosts == "127.0.0.1:2181"  # the default after ':-'
    assert pipeline.dead_letter_topic == "orders.dlq"
    assert pipeline.table_schema.column_names[-2:] == ("id", "note")
    assert pipeline.hudi is not None and pipeline.hudi.table_type == "COPY_ON_WRITE"


def test_record_size_limit_reaches_both_sinks() -> None:
    config = parse_config(GOOD.replace("max_records: 500", "max_record_bytes: 4096"), "p.yaml")
    pipeline = config.pipeline("orders")
    assert clickhouse_spec(pipeline).max_record_bytes == 4096
    assert hudi_spec(pipeline, {}).max_record_bytes == 4096
    unlimited = parse_config(GOOD, "p.yaml").pipeline("orders")
    assert clickhouse_spec(unlimited).max_record_bytes is None
    assert hudi_spec(unlimited, {}).max_record_bytes is None


def test_request_and_connect_timeouts_reach_the_clients_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """How long a stopped broker or keeper is waited for, from the file to the clients."""
    monkeypatch.setenv("ORDERS_KAFKA_PASSWORD", "pw")
    default = build_resources(parse_config(GOOD, "p.yaml"))
    assert default["kafka_orders"].settings().timeout() == 10.0
    assert default["keeper"].settings().connect_timeout_s == 10.0
    text = GOOD.replace(
        "topics: [orders]", "topics: [orders]\n      request_timeout_s: 2.5"
    ).replace('"${ZK:-127.0.0.1:2181}"}', '"${ZK:-127.0.0.1:2181}", connect_timeout_s: 1.5}')
    resources = build_resources(parse_config(text, "p.yaml"))
    kafka = resources["kafka_orders"].settings()
    assert (kafka.timeout(), kafka.timeout(7.0)) == (2.5, 7.0)  # a caller's own wins
    assert resources["keeper"].settings().connect_timeout_s == 1.5


def test_hudi_operation_auto_and_its_threshold_reach_the_spec() -> None:
    default = hudi_spec(parse_config(GOOD, "p.yaml").pipeline("orders"), {})
    assert default.bulk_insert_min_records == DEFAULT_BULK_INSERT_MIN_RECORDS
    text = GOOD.replace("partition_fields: [id]", "operation: auto, bulk_insert_min_records: 5")
    spec = hudi_spec(parse_config(text, "p.yaml").pipeline("orders"), {})
    assert (spec.operation, spec.bulk_insert_min_records) == ("auto", 5)


def test_secrets_are_read_from_the_environment_only_when_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = parse_config(GOOD, "p.yaml", environ={})
    kafka: KafkaResource = build_resources(config)["kafka_orders"]
    assert kafka.client_config == {"security.protocol": "SASL_SSL"}
    assert kafka.client_secrets == {"sasl.password": "ORDERS_KAFKA_PASSWORD"}
    monkeypatch.delenv("ORDERS_KAFKA_PASSWORD", raising=False)
    with pytest.raises(MissingSecretError, match="ORDERS_KAFKA_PASSWORD"):
        kafka.settings()
    monkeypatch.setenv("ORDERS_KAFKA_PASSWORD", "s3cret")
    assert kafka.settings().config()["sasl.password"] == "s3cret"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("table: orders}", "table: or-ders}"), "pipelines[0].clickhouse.table: invalid name"),
        (("Int64", "Int65"), "pipelines[0].schema: invalid type of column 'id' 'Int65'"),
        (("Int64", "Int128"), "column 'id': type Int128 is not supported by both sinks"),
        (("topics: [orders]", "topics: []"), "pipelines[0].kafka.topics: List should have at"),
        (("topics: [orders]", "topics: [or/ders]"), "pipelines[0].kafka.topics: "),
        (("bootstrap_servers", "bootstrap"), "pipelines[0].kafka.bootstrap: unknown field"),
        (("bootstrap_servers", "bootstrap"), "pipelines[0].kafka.bootstrap_servers: required"),
        (("[id]", "[nope]"), "pipelines[0]: hudi.partition_fields: ['nope'] not among"),
        (("name: orders", "name: 9orders"), "pipelines[0].name: '9orders' is not a valid"),
        (("{env: ORDERS", "{envv: ORDERS"), "kafka.client.sasl.password.envv: unknown field"),
        (("max_records: 500", "max_records: 0"), "pipelines[0].batch.max_records: Input should"),
        (
            ("max_records: 500", "max_record_bytes: -1"),
            "pipelines[0].batch.max_record_bytes: Input should be greater than 0",
        ),
        (("topics: [orders]", "topics: [a, b]"), "a Hudi table's checkpoint covers exactly one"),
        (("security.protocol", "isolation.level"), "set by the pipeline itself"),
        (
            ("partition_fields: [id]", "bulk_insert_min_records: 0"),
            "pipelines[0].hudi.bulk_insert_min_records: Input should be greater than or equal",
        ),
        (
            ("partition_fields: [id]", "operation: merge"),
            "pipelines[0].hudi.operation: Input should be 'upsert', 'insert', 'bulk_insert' or",
        ),
        (
            ("partition_fields: [id]", "table_type: CoW"),
            "pipelines[0].hudi.table_type: Input should be 'COPY_ON_WRITE' or 'MERGE_ON_READ'",
        ),
    ],
)
def test_bad_field_is_named_with_what_is_wrong(change: tuple[str, str], message: str) -> None:
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(ConfigError) as err:
        parse_config(text, "p.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("p.yaml: ")


def test_two_pipelines_writing_one_table_are_refused() -> None:
    second = GOOD.split("pipelines:\n")[1].replace("name: orders", "name: orders2")
    with pytest.raises(ConfigError, match=r"both write clickhouse\.shop\.orders"):
        parse_config(GOOD + second, "p.yaml")


def test_missing_variable_without_default_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="environment variable NOPE is not set"):
        parse_config(GOOD.replace("${ZK:-127.0.0.1:2181}", "${NOPE}"), "p.yaml", environ={})
    with pytest.raises(ConfigError, match="EOS_DEFS_DIR"):
        load_project(tmp_path / "missing")
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_config("pipelines: [", "p.yaml")


def test_spark_remote_and_token_come_from_the_file_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = GOOD + 'spark: {remote: "${REMOTE:-}", token: {env: EOS_SPARK_TOKEN}}\n'
    local = build_resources(parse_config(text, "p.yaml", environ={}))["spark"]
    assert local.remote is None and not is_remote(local)  # empty variable: in-process Spark
    named = parse_config(text, "p.yaml", environ={"REMOTE": "local"})
    assert build_resources(named)["spark"].remote is None  # said so: in-process Spark
    config = parse_config(text, "p.yaml", environ={"REMOTE": "sc://spark:15002"})
    monkeypatch.setenv("EOS_SPARK_TOKEN", "t0k")
    with dg.build_resources({"spark": build_resources(config)["spark"]}) as res:
        assert res.spark.remote == "sc://spark:15002"
        assert res.spark.token == "t0k"  # resolved in the run's process only
    with pytest.raises(ConfigError, match=r"spark\.remote: .*sc://host:port"):
        parse_config(GOOD + "spark: {remote: 'spark:15002'}\n", "p.yaml")
