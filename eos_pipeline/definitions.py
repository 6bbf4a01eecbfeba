"""The Dagster code location (``workspace.yaml`` and ``[tool.dagster]`` point here).

For now it holds the demo pipeline's ClickHouse asset, one partition per Kafka topic-partition,
each materialization running the exactly-once loop for its partition. Pipelines from
configuration files, sensors, checks and the Hudi asset grow from here.
"""


# No `from __future__ import annotations` here: Dagster reads the real annotation types.
import os

import dagster as dg

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.kafka import KafkaSettings, create_topic
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore, default_writer_id
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.demo import PIPELINE, SCHEMA, TOPIC
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec

DEMO_PARTITIONS = int(os.environ.get("EOS_DEMO_PARTITIONS", "3"))


def partition_key(tp: TopicPartition) -> str:
    """``topic__p0007``: no commas, pipes, brackets or spaces, sorts in partition order."""
    return f"{tp.topic}__p{tp.partition:04d}"


def parse_partition_key(key: str) -> TopicPartition:
    topic, _, number = key.rpartition("__p")
    if not topic or not number.isdigit():
        raise ValueError(f"partition key {key!r} is not of the form <topic>__p<NNNN>")
    return TopicPartition(topic, int(number))


class EosSettings(dg.ConfigurableResource):
    """Endpoints of the local stack by default; every value can come from the environment."""

    kafka_bootstrap: str = "127.0.0.1:9092"
    zookeeper_hosts: str = "127.0.0.1:2181"
    clickhouse_url: str = "chdb://.state/demo/chdb"


demo_partitions = dg.StaticPartitionsDefinition(
    [partition_key(TopicPartition(TOPIC, p)) for p in range(DEMO_PARTITIONS)]
)


@dg.asset(
    partitions_def=demo_partitions,
    group_name="demo",
    key_prefix=["clickhouse", "demo"],
    op_tags={"eos_pipeline/chdb_path": "demo"},
    description="Demo events in ClickHouse, exactly once per Kafka offset.",
)
def events(context: dg.AssetExecutionContext, eos: EosSettings) -> dg.MaterializeResult:
    tp = parse_partition_key(context.partition_key)
    kafka = KafkaSettings(eos.kafka_bootstrap)
    create_topic(kafka, f"{TOPIC}.dlq", 1)
    sink = ClickHouseSink.connect(eos.clickhouse_url)
    sink.ensure_table("demo", "events", SCHEMA)
    spec = ClickHouseTableSpec(PIPELINE, "demo", "events", SCHEMA)
    with KeeperStateStore(KeeperSettings(hosts=eos.zookeeper_hosts)) as store:
        report = ClickHousePartitionSync(
            spec,
            kafka,
            store,
            sink,
            DeadLetterWriter(kafka, f"{TOPIC}.dlq", PIPELINE),
            writer=default_writer_id(context.run_id),
        ).run(tp)
    return dg.MaterializeResult(
        metadata={
            "offset_range": f"[{report.start}, {report.end})",
            "records_read": report.records_read,
            "rows_sent": report.rows_sent,
            "dead_letters": report.dead_letters,
            "cases": ", ".join(report.cases) or "caught up",
            "lag_after": report.target_end - report.end,
            "epoch": report.epoch,
        }
    )


defs = dg.Definitions(
    assets=[events],
    resources={
        "eos": EosSettings(
            kafka_bootstrap=dg.EnvVar("EOS_KAFKA_BOOTSTRAP"),
            zookeeper_hosts=dg.EnvVar("EOS_ZOOKEEPER_HOSTS"),
            clickhouse_url=dg.EnvVar("EOS_CLICKHOUSE_URL"),
        )
        if os.environ.get("EOS_KAFKA_BOOTSTRAP")
        else EosSettings()
    },
)
