"""Configuration values that reach SQL, znode paths or file paths are validated; secrets stay out
of logs, reprs and error messages.

Each injection attempt goes through the public entry point a configuration value reaches, and
the test checks both the refusal and that nothing happened (no table, no znode).
"""

from __future__ import annotations

import logging

import pytest
from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.clickhouse import ClickHouseSink, ClickHouseSinkError, parse_url
from eos_pipeline.adapters.kafka import KafkaReadError, KafkaSettings, end_offsets
from eos_pipeline.adapters.keeper import KeeperSettings
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline_tests.faults.harness import FaultRig

SECRET = "s3cr3t-Pa55w0rd-do-not-log"
SCHEMA = TableSchema.from_mapping({"id": "Int64", "name": "String"})

SQL_NAMES = [
    "db; DROP DATABASE system; --",
    "db`.`x",
    'db". "x',
    "db' OR '1'='1",
    "db\nDROP TABLE t",
    "",
    "a" * 300,
]


def _tables(client: Client) -> set[tuple[str, str]]:
    return {tuple(r) for r in client.query("SELECT database, name FROM system.tables").result_rows}


@pytest.mark.parametrize("name", SQL_NAMES)
def test_sql_injection_in_database_and_table_names_is_refused(
    chdb_client: Client, name: str
) -> None:
    sink = ClickHouseSink(chdb_client)
    before = _tables(chdb_client)
    with pytest.raises(ValueError, match=r"(?i)invalid|name|must"):
        sink.ensure_table(name, "events", SCHEMA)
    with pytest.raises(ValueError, match=r"(?i)invalid|name|must"):
        sink.ensure_table("safe_db_injection", name, SCHEMA)
    assert _tables(chdb_client) - before <= {("safe_db_injection", "events")}


@pytest.mark.parametrize(
    "mapping",
    [
        {"id`; DROP TABLE x; --": "Int64"},
        {"id": "Int64) ENGINE = Log; DROP TABLE x; --"},
        {"id": "String DEFAULT (SELECT 1)"},
        {"id": "Nullable(String')"},
    ],
)
def test_sql_injection_in_column_names_and_types_is_refused(mapping: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        TableSchema.from_mapping(mapping)


@pytest.mark.integration
def test_values_reaching_queries_are_bound_not_spliced(inproc_rig: FaultRig) -> None:
    """A topic name in a proof query is a bound parameter: a quote cannot widen the WHERE."""
    rig = inproc_rig
    rig.produce(5, partitions=[0])
    with rig.keeper() as store:
        rig.sync(store).run(TopicPartition(rig.topic, 0))
    assert len(rig.table_offsets()[0]) == 5
    assert rig.sink is not None
    rows = rig.sink.offsets_in_table(rig.database, rig.table, f"{rig.topic}' OR '1'='1", 0)
    assert rows == []


@pytest.mark.parametrize(
    "pipeline, sink, topic",
    [
        ("../../zookeeper", "clickhouse", "t"),
        ("p/../../x", "clickhouse", "t"),
        ("p", "..", "t"),
        ("p", "clickhouse", "../t"),
        ("p", "click/house", "t"),
        ("p\x00", "clickhouse", "t"),
        ("", "clickhouse", "t"),
    ],
)
def test_znode_path_injection_is_refused(pipeline: str, sink: str, topic: str) -> None:
    with pytest.raises(ValueError):
        KeeperKey.of(pipeline, sink, TopicPartition(topic, 0))


@pytest.mark.parametrize("root", ["relative", "/", "/a/../zookeeper", "/zookeeper/x", "/a//b/.."])
def test_keeper_root_injection_is_refused(root: str) -> None:
    with pytest.raises(ValueError):
        KeeperSettings(hosts="127.0.0.1:2181", root=root)


@pytest.mark.parametrize(
    "url",
    ["chdb://", "chdb://:memory:", "chdb:///tmp/x?cmd=rm", "chdb:///tmp/x#frag", "file:///etc"],
)
def test_clickhouse_urls_that_are_not_a_data_directory_are_refused(url: str) -> None:
    with pytest.raises(ClickHouseSinkError):
        parse_url(url)


def test_secrets_are_masked_in_reprs_and_urls() -> None:
    kafka = KafkaSettings(
        "127.0.0.1:1",
        {
            "sasl.username": "pipeline",
            "sasl.password": SECRET,
            "sasl.jaas.config": f'... password="{SECRET}";',
            "ssl.key.password": SECRET,
        },
    )
    keeper = KeeperSettings(hosts="127.0.0.1:2181", auth=("pipeline", SECRET))
    target = parse_url(f"https://pipeline:{SECRET}@ch.example:8443/db")
    for text in (repr(kafka), str(kafka), repr(keeper), repr(target), target.display):
        assert SECRET not in text, text
    assert "pipeline" in repr(kafka) and "***" in repr(kafka)


@pytest.mark.integration
def test_secrets_never_reach_logs_or_error_messages(
    inproc_rig: FaultRig, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A full sink run with SASL settings present (ignored by the PLAINTEXT test broker), a Kafka
    error and a ClickHouse connection error: no log line, message or librdkafka output holds
    the password."""
    caplog.set_level(logging.DEBUG)
    rig = inproc_rig
    rig.produce(6, bad_every=3, partitions=[0])
    rig.kafka = KafkaSettings(
        rig.kafka.bootstrap_servers, {"sasl.username": "pipeline", "sasl.password": SECRET}
    )
    with rig.keeper() as store:
        report = rig.sync(store, max_records=2).run(TopicPartition(rig.topic, 0))
    assert report.end == 6 and report.dead_letters == 2
    texts = [caplog.text, repr(report)]
    with pytest.raises(KafkaReadError) as kafka_error:
        end_offsets(rig.kafka, "no-such-topic-for-secrets", timeout=5)
    texts.append(str(kafka_error.value))
    with pytest.raises(ClickHouseSinkError) as ch_error:
        ClickHouseSink.connect(f"http://pipeline:{SECRET}@127.0.0.1:9/db", connect_timeout=1)
    texts.append(str(ch_error.value))
    out, err = capfd.readouterr()
    texts += [out, err, caplog.text]
    for text in texts:
        assert SECRET not in text
