"""A pipeline's clusters in the pipelines file, and the failover job: no stack needed."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from eos_pipeline.adapters.failover import FailoverStatus, SwitchReport
from eos_pipeline.components.assets import topic_key
from eos_pipeline.components.config import ConfigError, parse_config
from eos_pipeline.components.source import (
    describe,
    failover_pipeline,
    shape_status,
    status_metadata,
)
from eos_pipeline.core.failover import (
    ActiveState,
    Flow,
    FlowReplication,
    ReplicaFacts,
    SwitchRefused,
    partition_replication,
)
from eos_pipeline_tests.support.definitions import build_definitions

ONE = """
pipelines:
  - name: orders
    kafka: {bootstrap_servers: "a:9092", topics: [orders]}
    schema: {id: Int64}
    clickhouse: {database: shop, table: orders}
"""
TWO = ONE.replace(
    "topics: [orders]}", 'topics: [orders], clusters: {east: "a:9092", west: "b:9092"}}'
)


def test_a_single_cluster_file_is_unchanged_and_cannot_switch() -> None:
    config = parse_config(ONE, "p.yaml")
    assert config.pipeline("orders").kafka.initial_cluster is None
    # Only the pipeline's replay job: no failover job, and the topic's page says why
    defs = build_definitions(config)
    assert [job.name for job in defs.jobs] == ["orders_replay_clickhouse"]
    assert "Failover: not configured (one cluster), so the code location has no `failover` " in (
        _topic_description(defs)
    )
    assert "add kafka.clusters to switch clusters, see docs/failover.md" in _topic_description(defs)
    with pytest.raises(SwitchRefused, match=r"no 'kafka\.clusters'"):
        failover_pipeline(config.pipeline("orders"))


def test_named_clusters_give_a_failover_pipeline_and_the_job() -> None:
    config = parse_config(TWO, "p.yaml")
    fp = failover_pipeline(config.pipeline("orders"))
    assert (fp.initial, fp.clusters.aliases, fp.sinks) == (
        "east",
        ("east", "west"),
        ("clickhouse",),
    )
    assert fp.clusters.flows == {Flow("east", "west"), Flow("west", "east")}
    assert fp.settings["west"].bootstrap_servers == "b:9092"
    defs = build_definitions(config)
    assert [job.name for job in defs.jobs] == ["failover", "orders_replay_clickhouse"]
    assert "Failover: clusters east, west; the `failover` job" in _topic_description(defs)


def _topic_description(defs: dg.Definitions) -> str:
    graph = defs.resolve_asset_graph()
    return graph.get(topic_key("orders")).description or ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TWO.replace('east: "a:9092", ', ""), "two or more"),
        (TWO.replace('"a:9092", west', '"c:9092", west'), "bootstrap_servers must be one of"),
        (TWO.replace("east:", "e.ast:"), "cluster alias"),
        (TWO.replace("}}", "}, mirror_flows: [east->north]}"), "not '<alias>-><alias>'"),
    ],
)
def test_bad_clusters_fail_at_load(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text, "p.yaml")


def test_the_switch_report_says_re_read_for_records_through_the_copy_only() -> None:
    """The docs' terms: the re-read ends at the copy; what the check read after it is apart."""
    report = SwitchReport("orders", "east", "west", ("begin",))
    report.checked = {"west:east.orders[0]": (1193, 25), "hudi west:east.orders[0]": (30, 30)}
    report.starts = {
        "west:east.orders[0]": {"start": 400, "bound": "timestamp", "syncs_start": 378},
        "west:east.orders[1]": {"start": 7, "bound": "syncs", "syncs_start": 7},  # open window
    }
    shown = {k: v.value for k, v in describe(report).items()}
    assert shown["records re-read (through the copy, skipped)"] == 55
    assert shown["records read past the copy (to check)"] == 1168
    assert shown["re-read starts"]["west:east.orders[0]"] == {
        "start": 400,
        "bound": "timestamp",
        "syncs_start": 378,
        "re-read": 25,
        "read past the copy": 1168,
    }
    assert shown["re-read starts"]["west:east.orders[1]"]["re-read"] is None
    assert not [k for k in shown if "to check" in k and "past the copy" not in k]


def test_the_failover_status_is_shaped_for_the_topic_page() -> None:
    """What ``eos-pipeline failover status`` prints, as a topic's metadata: the printout, and
    each flow's state and MM2 lag (none for a flow that could not be read)."""
    facts = ReplicaFacts("orders", 0, source_end=50, remote_end=48, synced_to=40, copied_to=47)
    flows = (
        FlowReplication(Flow("east", "west"), (partition_replication(facts, fresh_s=0.0),)),
        FlowReplication(Flow("west", "east"), unreachable=(("west", "b:9092: timed out"),)),
    )
    status = FailoverStatus("orders", ActiveState("east", None, 2), flows)
    summary = shape_status(status, at=0.0)
    assert json.loads(json.dumps(summary)) == summary  # kept in the sensor's cursor
    shown = {k: v.value for k, v in status_metadata(summary).items()}
    assert shown["mm2 east->west"] == "stalled" and shown["mm2_lag east->west"] == 3
    assert shown["mm2 west->east"] == "unreachable" and "mm2_lag west->east" not in shown
    assert shown["failover_status_read_at"] == "1970-01-01T00:00:00+00:00"
    printed = shown["failover_status"]
    assert printed.startswith("```\norders: active cluster east (2 switches so far)")
    for line in status.lines():  # the command's lines, as they are
        assert line in printed
    assert "a switch to west would wait for 3 records" in printed
