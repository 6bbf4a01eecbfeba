"""Each known fault, on real stopped endpoints (a free port nobody listens on), in a sensor
tick and in a run: the skip reason or the failure names the resource, the endpoint and the fix,
never a traceback."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from eos_dev.stack.processes import free_port
from eos_pipeline.components.assets import CHECK_NAME
from eos_pipeline.components.config import PipelinesFile, parse_config
from eos_pipeline.components.health import Streak
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.components.topics import SOURCE_CHECK
from eos_pipeline.core.planning import keys_for
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.sensor_tick import tick

from .conftest import pipeline_yaml

#: Seconds a request to a stopped endpoint waits before it is named unreachable. The product's
#: 10 s default would be waited out once per tick or step here; what is tested is the message.
DOWN_TIMEOUT_S = 1.0


def _config(
    tmp_path: Path,
    bootstrap: str,
    keeper: str,
    hudi: bool = False,
    chdb: str | None = None,
    keeper_down: bool = True,
) -> PipelinesFile:
    """The pipelines file; the broker is always stopped, the keeper unless ``keeper_down`` is
    False (a live keeper keeps the default timeout: a loaded machine may need it)."""
    text = pipeline_yaml(
        "down",
        "down-events",
        bootstrap,
        keeper,
        chdb or str(tmp_path / "chdb"),
        "db_down",
        str(tmp_path / "hudi") if hudi else None,
    )
    config = parse_config(text, "test.yaml")
    (pipeline,) = config.pipelines
    kafka = pipeline.kafka.model_copy(update={"request_timeout_s": DOWN_TIMEOUT_S})
    config = config.model_copy(update={"pipelines": [pipeline.model_copy(update={"kafka": kafka})]})
    return _with(config, "keeper", connect_timeout_s=DOWN_TIMEOUT_S) if keeper_down else config


def test_a_stopped_broker_is_a_skip_reason_naming_it_in_every_sensor(tmp_path: Path) -> None:
    broker = f"127.0.0.1:{free_port()}"
    keeper = f"127.0.0.1:{free_port()}"
    defs = build_definitions(_config(tmp_path, broker, keeper, hudi=True))
    with dg.instance_for_test() as instance:
        for name in ("down_hudi_lag", "down_topics", "down_partitions"):
            first = tick(defs, name, instance)
            message = first.skip_message or ""
            assert f"Kafka broker {broker} unreachable since" in message, (name, message)
            assert "(1 failed tick)" in message and "next try at" in message, message
            assert "Fix: start the broker" in message, message
        # the next tick counts on from the cursor, keeping when the outage began
        second = tick(defs, "down_partitions", instance, first.cursor)
        assert "(2 failed ticks)" in (second.skip_message or ""), second.skip_message
        assert Streak.parse(second.cursor).since == Streak.parse(first.cursor).since
        # the topics say so on their own pages: unreachable since when, where, why
        topics = tick(defs, "down_topics", instance)
        events = topics.asset_events
        observed = {
            tuple(e.asset_key.path): e.metadata
            for e in events
            if isinstance(e, dg.AssetObservation)
        }
        assert len(observed) == 2  # the source topic and the dead-letter topic
        for metadata in observed.values():
            assert metadata["unreachable"].value == f"Kafka broker {broker}"
            assert metadata["unreachable_since"].value
        # ... and so do the tables: their source_reachable check fails as a warning, naming
        # the broker, since when and the fix
        checks = [e for e in events if isinstance(e, dg.AssetCheckEvaluation)]
        assert sorted(c.asset_key.path[0] for c in checks) == ["clickhouse", "hudi"]
        for c in checks:
            assert (c.check_name, c.passed, c.severity) == (
                SOURCE_CHECK,
                False,
                dg.AssetCheckSeverity.WARN,
            )
            assert f"Kafka broker {broker} unreachable since" in (c.description or "")
            assert "Fix: start the broker" in (c.description or ""), c.description


def test_a_stopped_keeper_is_a_skip_reason_naming_it(tmp_path: Path) -> None:
    keeper = f"127.0.0.1:{free_port()}"
    defs = build_definitions(_config(tmp_path, f"127.0.0.1:{free_port()}", keeper))
    with dg.instance_for_test() as instance:
        message = tick(defs, "down_clickhouse_lag", instance).skip_message or ""
    assert f"keeper (ZooKeeper) {keeper} unreachable since" in message, message
    assert "Fix: start ZooKeeper" in message, message


KEY = keys_for("down-events", 1)[0]


def _with(config: PipelinesFile, section: str, **values: object) -> PipelinesFile:
    part = getattr(config, section).model_copy(update=values)
    return config.model_copy(update={section: part})


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, asset: dg.AssetKey, checks: bool):
    """One run of the table (or of its check only) for partition 0, as the UI launches it."""
    instance.add_dynamic_partitions(partitions_name("down"), [KEY])
    # the check's own Execute button: exactly_once alone
    check = dg.AssetSelection.checks(dg.AssetCheckKey(asset, CHECK_NAME))
    selection = check if checks else dg.AssetSelection.assets(asset)
    tables = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition) and a.key == asset]
    return dg.materialize(
        [*tables, *defs.asset_checks],
        selection=selection,
        # a check alone names its partition by tag, as Dagster's own check runs do
        tags={"dagster/partition": KEY},
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )


def _table(defs: dg.Definitions, kind: str) -> dg.AssetKey:
    (key,) = [a.key for a in defs.assets if a.key.path[0] == kind]
    return key


def _failure(result: dg.ExecuteInProcessResult) -> str:
    (event,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return event.step_failure_data.user_failure_data.description or ""


def _not_evaluated(result: dg.ExecuteInProcessResult) -> str:
    """The run is green and files no evaluation; its observation says why."""
    assert result.success
    assert not result.get_asset_check_evaluations()
    (observation,) = result.asset_observations_for_node(result.all_node_events[0].node_name)
    return observation.metadata["exactly_once_not_evaluated"].value


def test_a_run_meeting_a_stopped_keeper_fails_naming_it_and_its_check_is_not_run(
    tmp_path: Path, chdb_path: str
) -> None:
    # chDB runs one data path per process: the run opens the session's, as every test does.
    keeper = f"127.0.0.1:{free_port()}"
    config = _config(tmp_path, f"127.0.0.1:{free_port()}", keeper, chdb=chdb_path)
    defs = build_definitions(config)
    asset = _table(defs, "clickhouse")
    with dg.instance_for_test() as instance:
        check = _not_evaluated(_run(defs, instance, asset, checks=True))
        message = _failure(_run(defs, instance, asset, checks=False))
    for said in (check, message):
        assert f"keeper (ZooKeeper) {keeper} unreachable" in said, said
        assert "Fix: start ZooKeeper" in said, said


def test_a_run_meeting_a_stopped_clickhouse_server_fails_naming_it(tmp_path: Path) -> None:
    port = free_port()
    config = _with(
        _config(tmp_path, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"),
        "clickhouse",
        url=f"http://user:secret@127.0.0.1:{port}/db_down",
    )
    defs = build_definitions(config)
    asset = _table(defs, "clickhouse")
    with dg.instance_for_test() as instance:
        message = _failure(_run(defs, instance, asset, checks=False))
    assert f"ClickHouse http://127.0.0.1:{port}/db_down" in message, message
    assert "secret" not in message and "Fix:" in message, message


def test_a_check_meeting_a_stopped_spark_connect_server_is_not_run(tmp_path: Path) -> None:
    remote = f"sc://127.0.0.1:{free_port()}"
    config = _with(
        _config(tmp_path, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", hudi=True),
        "spark",
        remote=remote,
    )
    defs = build_definitions(config)
    asset = _table(defs, "hudi")
    with dg.instance_for_test() as instance:
        check = _not_evaluated(_run(defs, instance, asset, checks=True))
        message = _failure(_run(defs, instance, asset, checks=False))
    for said in (check, message):
        assert f"Spark Connect server {remote} unreachable" in said and "Fix:" in said, said


@pytest.mark.integration
def test_a_run_meeting_a_stopped_broker_fails_naming_it_and_its_check_is_not_run(
    tmp_path: Path, zookeeper_hosts: str, chdb_path: str
) -> None:
    """The keeper answers (the session's ZooKeeper), the broker does not."""
    broker = f"127.0.0.1:{free_port()}"
    config = _config(tmp_path, broker, zookeeper_hosts, chdb=chdb_path, keeper_down=False)
    defs = build_definitions(config)
    asset = _table(defs, "clickhouse")
    with dg.instance_for_test() as instance:
        # the run creates the table before it needs the broker; the check then reads both
        message = _failure(_run(defs, instance, asset, checks=False))
        check = _not_evaluated(_run(defs, instance, asset, checks=True))
    for said in (check, message):
        assert f"Kafka broker {broker} unreachable" in said, said
        assert "Fix: start the broker" in said, said
