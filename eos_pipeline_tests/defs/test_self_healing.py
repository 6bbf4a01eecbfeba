"""Self-healing after a kill (issue 29): a run that dies after its data landed leaves a failed
partition and a check that did not run; the lag sensor asks for one run that records the true
state (a materialization with position and row count, a passing check), no person needed."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg
import pytest

from eos_pipeline.components.assets import CHECK_NAME, clickhouse_key
from eos_pipeline.components.run_failures import HEAL_TAG, MAX_HEALS
from eos_pipeline.sinks.hooks import SinkHooks
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.sensor_tick import tick

from .conftest import Rig
from .test_sensors import _apply_partition_requests, _on_server

pytestmark = pytest.mark.integration


class Killed(Exception):
    """The run dies after its insert and keeper write, before Dagster hears of it."""


def _die(point: str) -> None:
    if point == "before_materialization_event":
        raise Killed(point)


def test_a_run_that_died_after_its_data_landed_is_recorded_again_by_the_sensor(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(partitions=1)
    pipeline = rig.config.pipelines[0]
    config = _on_server(rig.config)  # single-partition runs; the heal run uses the real chDB
    dying = build_definitions(rig.config, hooks=lambda p, s: SinkHooks(fault=_die))
    healthy = build_definitions(rig.config)
    server = build_definitions(config)
    lag = f"{rig.pipeline}_clickhouse_lag"
    asset = clickhouse_key(pipeline)
    with dg.instance_for_test() as instance:
        _apply_partition_requests(instance, tick(server, f"{rig.pipeline}_partitions", instance))
        rig.produce({0: 6})
        (request,) = tick(server, lag, instance).run_requests
        failed = dg.materialize(
            [*dying.assets, *dying.asset_checks],
            selection=dg.AssetSelection.assets(asset) | dg.AssetSelection.checks_for_assets(asset),
            partition_key=request.partition_key,
            instance=instance,
            resources=dying.resources,
            tags=request.tags,
            raise_on_error=False,
        )
        assert not failed.success
        assert instance.get_latest_materialization_event(asset) is None

        # caught up (the keeper moved), but shown failed: one heal run, once per failed run
        (heal,) = tick(server, lag, instance).run_requests
        assert heal.tags[HEAL_TAG] == failed.run_id
        assert heal.partition_key == request.partition_key
        assert heal.asset_check_keys == [dg.AssetCheckKey(asset, CHECK_NAME)]
        (again,) = tick(server, lag, instance).run_requests
        assert again.run_key == heal.run_key  # Dagster launches a run key once

        healed = dg.materialize(
            [*healthy.assets, *healthy.asset_checks],
            selection=dg.AssetSelection.assets(asset) | dg.AssetSelection.checks_for_assets(asset),
            partition_key=heal.partition_key,
            instance=instance,
            resources=healthy.resources,
            tags=heal.tags,
        )
        assert healed.success
        event = instance.get_latest_materialization_event(asset)
        assert event is not None
        assert event.asset_materialization.metadata["dagster/row_count"].value == 6
        (evaluation,) = healed.get_asset_check_evaluations()
        assert evaluation.passed
        assert not tick(server, lag, instance).run_requests  # nothing left to heal


def test_heal_runs_stop_after_a_few_in_a_row(make_rig: Callable[..., Rig]) -> None:
    """A heal run that dies too is healed again, at most MAX_HEALS times in a row."""
    rig = make_rig(partitions=1)
    dying = build_definitions(rig.config, hooks=lambda p, s: SinkHooks(fault=_die))
    server = build_definitions(_on_server(rig.config))
    lag = f"{rig.pipeline}_clickhouse_lag"
    asset = clickhouse_key(rig.config.pipelines[0])
    with dg.instance_for_test() as instance:
        _apply_partition_requests(instance, tick(server, f"{rig.pipeline}_partitions", instance))
        rig.produce({0: 2})
        (request,) = tick(server, lag, instance).run_requests
        for _ in range(MAX_HEALS + 1):
            dg.materialize(
                dying.assets,
                selection=dg.AssetSelection.assets(asset),
                partition_key=request.partition_key,
                instance=instance,
                resources=dying.resources,
                tags=request.tags,
                raise_on_error=False,
            )
            requests = tick(server, lag, instance).run_requests
            if not requests:
                break
            (request,) = requests
        assert not requests
