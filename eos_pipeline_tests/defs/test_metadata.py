"""Run metadata as the UI shows it: a run that did nothing says so and plots nothing."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg
import pytest

from eos_pipeline.components.assets import clickhouse_key
from eos_pipeline.components.metadata import (
    ACTIVITY_KEYS,
    IDLE_CASE,
    ROW_COUNT_KEY,
    partitions_name,
    quiet_when_idle,
)
from eos_pipeline.core.planning import keys_for
from eos_pipeline_tests.support.definitions import build_definitions

from .conftest import Rig


def test_an_idle_run_keeps_its_state_and_drops_its_activity_numbers() -> None:
    run = {"records_read": 0, "inserted": 0, "dead_letters": 0, "lag_after": 0, "case": "x"}
    parts = {"k0": {"records_read": 0, "lag_after": 0, ROW_COUNT_KEY: 7}}
    quiet, quiet_parts = quiet_when_idle(run, parts)
    assert quiet == {"lag_after": 0, "case": IDLE_CASE}
    assert quiet_parts == {"k0": {"lag_after": 0, ROW_COUNT_KEY: 7, "case": IDLE_CASE}}


def test_a_run_that_did_anything_keeps_every_number() -> None:
    run = {"records_read": 0, "inserted": 0, "dead_letters": 2, "case": "x"}
    parts = {"k0": {"records_read": 0}, "k1": {"records_read": 2}}
    assert quiet_when_idle(run, parts) == (run, parts)
    assert "dead_letters" in ACTIVITY_KEYS


@pytest.mark.integration
def test_a_backfill_of_a_caught_up_partition_records_no_activity(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(partitions=1)
    defs = build_definitions(rig.config)
    key = keys_for(rig.topic, 1)[0]
    asset = clickhouse_key(rig.config.pipelines[0])
    rig.produce({0: 6})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), [key])
        runs = [
            dg.materialize(
                [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)],
                selection=dg.AssetSelection.assets(asset),
                partition_key=key,
                instance=instance,
                resources=defs.resources,
            )
            for _ in range(2)
        ]
        first, second = (
            r.get_asset_materialization_events()[0].materialization.metadata for r in runs
        )
        assert first["records_read"].value == 6 and first["inserted"].value == 6
        # the second run found nothing: its state is there, its activity numbers are not
        assert not set(ACTIVITY_KEYS) & set(second)
        assert second["case"].value == IDLE_CASE
        assert second[ROW_COUNT_KEY].value == 6 and second["lag_after"].value == 0
