"""Each known fault, on real stopped endpoints (a free port nobody listens on), in a sensor
tick and in a run: the skip reason or the failure names the resource, the endpoint and the fix,
never a traceback."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from eos_dev.stack.processes import free_port
from eos_pipeline.defs.builder import build_definitions
from eos_pipeline.defs.config import PipelinesFile, parse_config
from eos_pipeline.defs.health import Streak

from .conftest import pipeline_yaml


def _tick(defs: dg.Definitions, name: str, instance: dg.DagsterInstance, cursor: str | None = None):
    sensor = defs.get_repository_def().get_sensor_def(name)
    with dg.build_sensor_context(
        instance=instance, resources=defs.resources, definitions=defs, cursor=cursor
    ) as context:
        return sensor.evaluate_tick(context)


def _config(tmp_path: Path, bootstrap: str, keeper: str, hudi: bool = False) -> PipelinesFile:
    text = pipeline_yaml(
        "down",
        "down-events",
        bootstrap,
        keeper,
        str(tmp_path / "chdb"),
        "db_down",
        str(tmp_path / "hudi") if hudi else None,
    )
    return parse_config(text, "test.yaml")


def test_a_stopped_broker_is_a_skip_reason_naming_it_in_every_sensor(tmp_path: Path) -> None:
    broker = f"127.0.0.1:{free_port()}"
    keeper = f"127.0.0.1:{free_port()}"
    defs = build_definitions(_config(tmp_path, broker, keeper, hudi=True))
    with dg.instance_for_test() as instance:
        for name in ("down_hudi_lag", "down_topics", "down_partitions"):
            first = _tick(defs, name, instance)
            message = first.skip_message or ""
            assert f"Kafka broker {broker} unreachable since" in message, (name, message)
            assert "(1 failed tick)" in message and "next try at" in message, message
            assert "Fix: start the broker" in message, message
        # the next tick counts on from the cursor, keeping when the outage began
        second = _tick(defs, "down_partitions", instance, first.cursor)
        assert "(2 failed ticks)" in (second.skip_message or ""), second.skip_message
        assert Streak.parse(second.cursor).since == Streak.parse(first.cursor).since
        # the topics say so on their own pages: unreachable since when, where, why
        topics = _tick(defs, "down_topics", instance)
        observed = {tuple(e.asset_key.path): e.metadata for e in topics.asset_events}
        assert len(observed) == 2  # the source topic and the dead-letter topic
        for metadata in observed.values():
            assert metadata["unreachable"].value == f"Kafka broker {broker}"
            assert metadata["unreachable_since"].value


def test_a_stopped_keeper_is_a_skip_reason_naming_it(tmp_path: Path) -> None:
    keeper = f"127.0.0.1:{free_port()}"
    defs = build_definitions(_config(tmp_path, f"127.0.0.1:{free_port()}", keeper))
    with dg.instance_for_test() as instance:
        message = _tick(defs, "down_clickhouse_lag", instance).skip_message or ""
    assert f"keeper (ZooKeeper) {keeper} unreachable since" in message, message
    assert "Fix: start ZooKeeper" in message, message
