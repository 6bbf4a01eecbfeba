"""Kafka topics in the lineage, observed on the real stack: sizes and lags that match the data."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import dagster as dg
import pytest

from eos_pipeline.adapters.kafka import end_offsets
from eos_pipeline.components.assets import clickhouse_key, dead_letter_key, topic_key
from eos_pipeline.components.health import Streak
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.components.topics import SOURCE_CHECK, STEADY_SECONDS
from eos_pipeline.core.planning import keys_for
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.sensor_tick import tick

from .conftest import Rig

pytestmark = pytest.mark.integration


def _by_key(result) -> dict[dg.AssetKey, dg.AssetObservation]:
    return {event.asset_key: event for event in result.asset_events}


def _source_checks(result) -> list[tuple[dg.AssetKey, bool]]:
    return [
        (e.asset_key, e.passed)
        for e in result.asset_events
        if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == SOURCE_CHECK
    ]


def _rows(observation: dg.AssetObservation) -> list[dict]:
    return [dict(r.data) for r in observation.metadata["partitions"].records]


def test_topics_are_upstream_of_both_sinks_and_the_dead_letters_downstream(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(partitions=2, hudi=True)
    pipeline = rig.config.pipelines[0]
    graph = build_definitions(rig.config).resolve_asset_graph()
    topic = topic_key(rig.topic)
    assert graph.get(topic).is_external
    assert graph.get(clickhouse_key(pipeline)).parent_keys == {topic}
    sinks = {k for k in graph.get_all_asset_keys() if k.path[0] in ("clickhouse", "hudi")}
    assert len(sinks) == 2
    assert graph.get(dead_letter_key(pipeline)).parent_keys == sinks


def test_the_topics_sensor_observes_sizes_and_lags_and_stays_quiet_when_nothing_changes(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(partitions=2)
    defs = build_definitions(rig.config)
    sensor = f"{rig.pipeline}_topics"
    rig.produce({0: 3, 1: 5}, bad_every=4)  # records 4 and 8 do not decode
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), keys_for(rig.topic, 2))
        first = tick(defs, sensor, instance, None)
        table = clickhouse_key(rig.config.pipelines[0])
        # the first tick passes the table's source_reachable check (so health knows it)
        assert _source_checks(first) == [(table, True)]
        observed = _by_key(first)
        source = observed[topic_key(rig.topic)]
        ends = end_offsets(rig.kafka, rig.topic)
        # nothing written yet: with reset earliest ClickHouse has the whole log to read
        assert _rows(source) == [
            {
                "partition": p,
                "records_held": ends[p],
                "last_stable_offset": ends[p],
                "clickhouse_lag": ends[p],
            }
            for p in (0, 1)
        ]
        assert source.metadata["records_held"].value == sum(ends.values()) == 8
        assert source.metadata["clickhouse_lag"].value == 8
        # the dead-letter topic is observed too (created on first use: absent or empty now)
        assert tick(defs, sensor, instance, first.cursor).skip_message

        key = keys_for(rig.topic, 2)[1]
        dg.materialize(
            [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)],
            selection=dg.AssetSelection.assets(clickhouse_key(rig.config.pipelines[0])),
            partition_key=key,
            instance=instance,
            resources=defs.resources,
        )
        second = tick(defs, sensor, instance, first.cursor)
        # the table materialized since: passed again, for the UI's latest materialization
        assert _source_checks(second) == [(table, True)]
        observed = _by_key(second)
        lags = {r["partition"]: r["clickhouse_lag"] for r in _rows(observed[topic_key(rig.topic)])}
        assert lags == {0: ends[0], 1: 0}
        dead = _rows(observed[dead_letter_key(rig.config.pipelines[0])])
        # partition 1 held records 4..8 of which 4 and 8 were bad: two dead letters
        assert sum(r["records_held"] for r in dead) == 2
        # ... and counted per source partition and sink
        letters = observed[dead_letter_key(rig.config.pipelines[0])].metadata
        assert letters["clickhouse_dead_letters_total"].value == 2
        by_source = letters["dead_letters_by_source_partition"].value.records
        assert [r.data for r in by_source] == [
            {"source_partition": key, "clickhouse_dead_letters": 2}
        ]
        assert tick(defs, sensor, instance, second.cursor).skip_message
        # nothing changed, but a minute passed: observed again (a steady cadence for plots)
        inner = json.loads(Streak.parse(second.cursor).inner or "{}")
        inner["at"] = time.time() - STEADY_SECONDS
        stale = Streak(json.dumps(inner)).encode()
        assert tick(defs, sensor, instance, stale).asset_events
