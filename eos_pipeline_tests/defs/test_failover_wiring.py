"""A pipeline's clusters in the pipelines file, and the failover job: no stack needed."""

from __future__ import annotations

import pytest

from eos_pipeline.adapters.failover import SwitchReport
from eos_pipeline.components.builder import build_definitions
from eos_pipeline.components.config import ConfigError, parse_config
from eos_pipeline.components.failover import describe, failover_pipeline
from eos_pipeline.core.failover import Flow, SwitchRefused

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
    # Only the pipeline's replay job: no failover job.
    assert [job.name for job in build_definitions(config).jobs] == ["orders_replay_clickhouse"]
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
    names = [job.name for job in build_definitions(config).jobs]
    assert names == ["failover", "orders_replay_clickhouse"]


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
