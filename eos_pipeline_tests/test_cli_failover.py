"""``eos-pipeline failover`` refuses the bad cases with a clear error and changes nothing.

Unknown alias, a cluster MirrorMaker 2 does not replicate to, and a switch while another is in
flight are all decided from the configuration and the keeper, before any Kafka cluster is
contacted, so the clusters here are addresses nobody listens on.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from eos_pipeline.adapters.failover import FailoverStates
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.cli import main as cli_main
from eos_pipeline.core.failover import ActiveState
from eos_pipeline_tests.support.defs_folder import write_defs

pytestmark = pytest.mark.integration


def test_the_failover_command_refuses_bad_switches_and_changes_nothing(
    zookeeper_hosts: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, root = f"p_cli_{uuid.uuid4().hex[:8]}", f"/eos_cli_fo_{uuid.uuid4().hex[:8]}"
    config = write_defs(
        f"""
keeper: {{hosts: '{zookeeper_hosts}', root: '{root}'}}
pipelines:
  - name: {name}
    kafka:
      bootstrap_servers: '127.0.0.1:1'
      topics: [orders]
      clusters: {{A: '127.0.0.1:1', B: '127.0.0.1:2'}}
      mirror_flows: ['B->A']
    schema: {{id: String}}
    clickhouse: {{database: db, table: events}}
""",
        tmp_path / "defs",
    )

    def failover(to: str) -> str:
        assert cli_main(["failover", "--pipeline", name, "--to", to, "--defs", str(config)]) == 1
        return capsys.readouterr().err

    with KeeperStateStore(KeeperSettings(hosts=zookeeper_hosts, root=root)) as store:
        states = FailoverStates(store)
        assert "unknown cluster 'C'" in failover("C")
        assert "does not replicate A -> B" in failover("B")
        assert states.read(name, "A") == (ActiveState("A"), None)  # nothing written
        _, version = states.read(name, "A")
        states.write(name, ActiveState("A").begun("B"), version)
        err = failover("A")
        assert "A -> B is in flight" in err and "rerun the failover to 'B'" in err
        assert states.read(name, "A")[0] == ActiveState("A").begun("B")
