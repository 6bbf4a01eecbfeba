"""The two-cluster MirrorMaker 2 stack: its configuration, and replication on the real thing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from eos_dev.stack.mirror import (
    MirrorCluster,
    MirrorConfig,
    MirrorStack,
    mirror_config,
    mm2_properties,
)
from eos_dev.stack.services import StackError, pid_alive
from eos_pipeline.adapters.kafka import KafkaSettings, admin_client, create_topic
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.mirror_fixtures import (
    event_id,
    produce_events,
    wait_for_records,
    wait_until_replicating,
)


def _config(tmp_path: Path, **options: object) -> MirrorConfig:
    return mirror_config(tmp_path, [(9101, 9102), (9201, 9202)], rest_port=9300, **options)


def _properties(config: MirrorConfig) -> dict[str, str]:
    return dict(line.split("=", 1) for line in mm2_properties(config).splitlines())


def test_properties_replicate_both_ways_exactly_once(tmp_path: Path) -> None:
    props = _properties(_config(tmp_path))
    assert props["clusters"] == "A,B"
    assert props["A.bootstrap.servers"] == "127.0.0.1:9101"
    assert props["B.bootstrap.servers"] == "127.0.0.1:9201"
    assert props["A->B.enabled"] == props["B->A.enabled"] == "true"
    # Exactly-once source is enabled per target cluster (the unprefixed key is ignored by MM2).
    assert props["A.exactly.once.source.support"] == "enabled"
    assert props["B.exactly.once.source.support"] == "enabled"
    assert "exactly.once.source.support" not in props
    assert props["A->B.consumer.isolation.level"] == "read_committed"
    assert props["listeners"] == "http://127.0.0.1:9300"
    assert props["offset.lag.max"] == "100"
    assert props["offset-syncs.topic.location"] == "source"
    for key in (
        "replication.factor",
        "checkpoints.topic.replication.factor",
        "heartbeats.topic.replication.factor",
        "offset-syncs.topic.replication.factor",
        "offset.storage.replication.factor",
        "status.storage.replication.factor",
        "config.storage.replication.factor",
    ):
        assert props[key] == "1", key


def test_mirrormaker_recovers_from_a_broker_restart_in_seconds_not_minutes(tmp_path: Path) -> None:
    """Connect's default rebalance delay (300 s) stalled B->A for five minutes after A's broker
    restarted (issue 29): both target clusters' workers get a delay of seconds."""
    props = _properties(_config(tmp_path))
    for prefix in ("A.", "B."):
        assert int(props[f"{prefix}scheduled.rebalance.max.delay.ms"]) <= 5000
        assert int(props[f"{prefix}reconnect.backoff.max.ms"]) <= 1000


def test_aliases_and_mm2_options_are_configurable(tmp_path: Path) -> None:
    config = mirror_config(
        tmp_path,
        [(1, 2), (3, 4)],
        rest_port=5,
        aliases=("east", "west"),
        offset_lag_max=0,
        offset_syncs_location="target",
    )
    props = _properties(config)
    assert props["clusters"] == "east,west"
    assert props["east->west.enabled"] == props["west->east.enabled"] == "true"
    assert props["west.exactly.once.source.support"] == "enabled"
    assert props["offset.lag.max"] == "0"
    assert props["offset-syncs.topic.location"] == "target"
    assert MirrorConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"aliases": ("A", "A")}, "distinct aliases"),
        ({"aliases": ("A.x", "B")}, "no '.'"),
        ({"offset_syncs_location": "elsewhere"}, "'source' or 'target'"),
        ({"offset_lag_max": -1}, ">= 0"),
    ],
)
def test_bad_configs_are_refused(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(StackError, match=message):
        _config(tmp_path, **change)


def test_unknown_alias_and_missing_state_are_named(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="unknown cluster alias 'C'"):
        _config(tmp_path).bootstrap("C")
    with pytest.raises(StackError, match="no mirror stack was started"):
        MirrorStack.from_state_dir(tmp_path / "nothing")


def test_an_unmanaged_cluster_is_neither_started_nor_stopped(tmp_path: Path) -> None:
    config = MirrorConfig(
        state_dir=tmp_path,
        clusters=(MirrorCluster("A", 1, 0, managed=False), MirrorCluster("B", 3, 4)),
        rest_port=5,
    )
    statuses = MirrorStack(config, say=lambda _: None).status()
    assert [s.name for s in statuses] == ["kafka-A", "kafka-B", "mirrormaker"]
    assert not any(s.running for s in statuses)
    assert statuses[0].pid is None  # an existing broker: no pid file of ours


@pytest.mark.integration
def test_records_flow_both_ways_and_never_back(
    mirror_stack: MirrorStack, cluster_settings: dict[str, KafkaSettings]
) -> None:
    topic = "t-mirror-both-ways"
    a, b = cluster_settings["A"], cluster_settings["B"]
    for settings in (a, b):
        create_topic(settings, topic, partitions=1)
    on_a = produce_events(a, topic, 1, 40, prefix="from-a")[0]
    on_b = produce_events(b, topic, 1, 30, prefix="from-b")[0]
    copies_on_b = wait_for_records(b, TopicPartition(f"A.{topic}", 0), len(on_a))
    copies_on_a = wait_for_records(a, TopicPartition(f"B.{topic}", 0), len(on_b))
    assert [event_id(r) for r in copies_on_b] == [i for _, i in on_a]
    assert [event_id(r) for r in copies_on_a] == [i for _, i in on_b]
    # MM2 never copies a replica back to the cluster it came from.
    time.sleep(2 * mirror_stack.config.refresh_seconds)
    for settings, looped in ((a, f"B.A.{topic}"), (b, f"A.B.{topic}")):
        assert looped not in admin_client(settings).list_topics(timeout=10).topics


@pytest.mark.integration
def test_status_and_a_second_up_prove_replication_again(mirror_stack: MirrorStack) -> None:
    statuses = {s.name: s for s in mirror_stack.status()}
    assert set(statuses) == {"kafka-A", "kafka-B", "mirrormaker"}
    assert all(s.running and s.pid and pid_alive(s.pid) for s in statuses.values())
    assert statuses["mirrormaker"].endpoint == mirror_stack.config.rest_url
    again = MirrorStack.from_state_dir(mirror_stack.config.state_dir, say=lambda _: None)
    started = time.monotonic()
    again.up()  # already running: only the replication proof runs
    assert time.monotonic() - started < 30
    assert {s.name: s.pid for s in again.status()} == {n: s.pid for n, s in statuses.items()}


def test_cli_status_lists_the_failover_stack_once_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from eos_dev import cli as dev_cli
    from eos_pipeline.cli import main

    def must_not_start(self: object) -> None:
        raise AssertionError("a bad --aliases must be refused before anything starts")

    monkeypatch.setattr(dev_cli.Stack, "up", must_not_start)

    state = tmp_path / "stack"
    mirror = MirrorConfig(
        state_dir=state / "mirror",
        clusters=(MirrorCluster("A", 1, 2, managed=False), MirrorCluster("B", 3, 4)),
        rest_port=5,
    )
    mirror.state_dir.mkdir(parents=True)
    (mirror.state_dir / "mirror.json").write_text(mirror.to_json())
    assert main(["stack", "status", "--state-dir", str(state)]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names[-2:] == ["kafka-B", "mirrormaker"]
    assert main(["stack", "up", "--mirror", "--aliases", "A", "--state-dir", str(state)]) == 1
    assert "--aliases needs two comma-separated aliases" in capsys.readouterr().err
    assert main(["stack", "up", "--mirror", "--aliases", "A,A.x", "--state-dir", str(state)]) == 1
    assert "no '.'" in capsys.readouterr().err


@pytest.mark.integration
def test_replication_resumes_by_itself_after_a_broker_restart_and_restart_mirror_restarts_it(
    mirror_stack: MirrorStack,
) -> None:
    """Issue 29: B->A stalled five minutes after A's broker restarted (Connect's rebalance
    delay). Here B's broker (a managed one) stops for a few seconds and starts again: both flows
    replicate again by themselves, MM2 untouched, well before that delay. Then
    ``restart_mirror`` gives a new MM2 process that replicates both ways."""

    broker = mirror_stack._brokers["B"]
    mirror_pid = {s.name: s.pid for s in mirror_stack.status()}["mirrormaker"]
    broker.down(30.0)
    time.sleep(5)
    broker.up()
    wait_until_replicating(mirror_stack)
    assert {s.name: s.pid for s in mirror_stack.status()}["mirrormaker"] == mirror_pid

    mirror_stack.restart_mirror()
    after = {s.name: s for s in mirror_stack.status()}["mirrormaker"]
    assert after.running and after.pid != mirror_pid
