"""``eos-pipeline failover status`` on the real two-cluster stack: MM2's lag, both ways.

Records produced on each cluster are counted on the other once MM2 copied them: both flows
caught up, lag 0, found by the replica's last record. With MM2 frozen, records written on B are
B->A's exact lag, shown as stalled (no sync lately, the replica does not move), and a failback
from B to A is said to have to wait for them; once MM2 runs again the flow catches up by itself.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from eos_dev.stack.mirror import MirrorStack
from eos_pipeline.adapters.failover import FailoverStates, FailoverStatus, read_status
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.cli import main as cli_main
from eos_pipeline.components.project import load_project
from eos_pipeline.components.source import failover_pipeline, find_pipeline
from eos_pipeline.core.failover import CAUGHT_UP, STALLED, ActiveState, Flow
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.mirror_fixtures import (
    clickhouse_pipeline_yaml,
    mirror_paused,
    produce_events,
    two_cluster_topic,
    wait_for_records,
)
from eos_pipeline_tests.support.defs_folder import write_defs

pytestmark = pytest.mark.integration


def _flows(status: FailoverStatus) -> dict[Flow, tuple[str, int, list[bool]]]:
    return {f.flow: (f.state, f.lag, [p.exact for p in f.partitions]) for f in status.flows}


def test_status_shows_each_direction_s_lag_and_whether_a_failback_must_wait(
    mirror_stack: MirrorStack,
    cluster_settings: dict[str, KafkaSettings],
    zookeeper_hosts: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    suffix, topic = two_cluster_topic(cluster_settings, "t-status")
    name = f"p_status_{suffix}"
    a, b = cluster_settings["A"], cluster_settings["B"]
    defs = write_defs(
        clickhouse_pipeline_yaml(zookeeper_hosts, str(tmp_path), cluster_settings, name, topic),
        tmp_path / "defs",
    )
    fp = failover_pipeline(find_pipeline(load_project(defs).config, name))
    produce_events(a, topic, 1, 50, prefix="a")
    produce_events(b, topic, 1, 20, prefix="b")
    wait_for_records(b, TopicPartition(f"A.{topic}", 0), 50)
    wait_for_records(a, TopicPartition(f"B.{topic}", 0), 20)
    ab, ba = Flow("A", "B"), Flow("B", "A")
    with KeeperStateStore(KeeperSettings(hosts=zookeeper_hosts, root=f"/eos_{name}")) as store:
        status = read_status(store, fp, sample_s=0.5)
        assert _flows(status) == {ab: (CAUGHT_UP, 0, [True]), ba: (CAUGHT_UP, 0, [True])}
        assert "a switch to B need not wait: A->B has copied everything" in status.lines()

        # Failed over to B (the state alone: this test reads, it does not switch).
        FailoverStates(store).write(name, ActiveState("B", None, 1), None)
        with mirror_paused(mirror_stack):
            produce_events(b, topic, 1, 30, prefix="late")
            status = read_status(store, fp, sample_s=1.0, fresh_s=0.0)
            assert _flows(status)[ba] == (STALLED, 30, [True])
            assert _flows(status)[ab] == (CAUGHT_UP, 0, [True])
            argv = ["failover", "status", "--pipeline", name, "--defs", str(defs)]
            assert cli_main([*argv, "--sample-seconds", "0.5", "--fresh-seconds", "0"]) == 0
            out = capsys.readouterr().out
            print(out)
            assert f"{name}: active cluster B (1 switch so far); no switch in flight" in out
            assert "B->A: stalled, lag 30 records" in out
            assert f"  {topic}[0]: stalled, lag 30; source end 50" in out
            assert "a switch to A would wait for 30 records" in out and "restart-mirror" in out
        deadline = time.monotonic() + 60
        while _flows(status)[ba][0] != CAUGHT_UP and time.monotonic() < deadline:
            time.sleep(1.0)
            status = read_status(store, fp, sample_s=0.0)
        assert _flows(status)[ba] == (CAUGHT_UP, 0, [True]), status.lines()
