"""The Hudi lag sensor reads the table's real checkpoint each tick, whoever wrote the commit.

HoodieStreamer (Hudi's own ingestion tool, run by ``support.hoodie_streamer`` in its own JVM)
commits into the pipeline's table behind Dagster's back: no materialization records it. The
sensor must see that commit at its very next tick, from the table's timeline (hudi-rs, no JVM
in this process), and ask only for what the streamer left behind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.hudi_timeline import latest_checkpoint
from eos_pipeline.adapters.kafka import end_offsets
from eos_pipeline.components.assets import hudi_key
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import keys_for
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.hoodie_streamer import StreamerTable, run_streamer
from eos_pipeline_tests.support.sensor_tick import tick

from .conftest import Rig, following, run_in_flight

pytestmark = [pytest.mark.integration, pytest.mark.spark]

AVRO_SCHEMA = {
    "type": "record",
    "name": "sensor_record",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}


def test_a_commit_by_hoodie_streamer_is_seen_at_the_next_tick(
    make_rig: Callable[..., Rig], tmp_path: Path
) -> None:
    rig = make_rig(partitions=2, clickhouse=False, hudi=True)
    rig.produce({0: 7, 1: 5})
    defs = build_definitions(rig.config)
    keys = keys_for(rig.topic, 2)
    sensor = f"{rig.pipeline}_hudi_lag"
    streamer = StreamerTable(
        topic=rig.topic,
        table_path=rig.hudi_path,
        table_name=f"{rig.pipeline}_events",
        avro_schema=AVRO_SCHEMA,
        record_key_fields=("id",),
        ordering_field="id",
        props=SMALL_TABLE_OPTIONS,
    )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), keys)
        # No table yet: both partitions lag, one run is asked for over both.
        (before,) = tick(defs, sensor, instance).run_requests
        assert before.tags[ASSET_PARTITION_RANGE_START_TAG] == keys[0]
        assert before.tags[ASSET_PARTITION_RANGE_END_TAG] == keys[1]

        # HoodieStreamer ingests everything; Dagster never hears of it.
        run_streamer(streamer, rig.kafka.bootstrap_servers, tmp_path / "streamer")
        ends = end_offsets(rig.kafka, rig.topic)
        assert latest_checkpoint(rig.hudi_path) == {
            TopicPartition(rig.topic, p): e for p, e in ends.items()
        }
        assert instance.get_latest_materialization_event(hudi_key(rig.config.pipelines[0])) is None
        caught_up = tick(defs, sensor, instance)
        assert not caught_up.run_requests
        assert "caught up" in str(caught_up.skip_message)

        # New records in partition 0 only: the next tick asks for partition 0 alone, from
        # the streamer's checkpoint.
        rig.produce({0: 3})
        (after,) = tick(defs, sensor, instance).run_requests
        assert after.tags[ASSET_PARTITION_RANGE_START_TAG] == keys[0]
        assert after.tags[ASSET_PARTITION_RANGE_END_TAG] == keys[0]


def test_a_following_hudi_run_covers_every_partition_and_nothing_is_asked_behind_it(
    make_rig: Callable[..., Rig],
) -> None:
    """With ``hudi.follow`` the sensor tags its run to follow and covers every partition; while
    such a run is in flight it asks for nothing and says why. No JVM: the sensor reads hudi-rs."""
    from eos_pipeline.core.planning import FOLLOW_TAG

    rig = make_rig(partitions=3, clickhouse=False, hudi=True)
    defs = build_definitions(following(rig.config, 5, "hudi"))
    plain = build_definitions(rig.config)
    keys = keys_for(rig.topic, 3)
    sensor = f"{rig.pipeline}_hudi_lag"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), keys)
        assert not tick(defs, sensor, instance).run_requests  # nothing to follow yet
        rig.produce({1: 4})
        (request,) = tick(defs, sensor, instance).run_requests
        assert request.tags[FOLLOW_TAG] == "true"
        assert request.tags[ASSET_PARTITION_RANGE_START_TAG] == keys[0]
        assert request.tags[ASSET_PARTITION_RANGE_END_TAG] == keys[2]
        # a run launched without hudi.follow covers the lagging partition only, and never follows
        (unfollowed,) = tick(plain, sensor, instance).run_requests
        assert FOLLOW_TAG not in unfollowed.tags
        assert unfollowed.tags[ASSET_PARTITION_RANGE_START_TAG] == keys[1]
        # while the following run is in flight nothing else is asked for, even with new records
        running = run_in_flight(instance, request.tags)
        rig.produce({0: 2})
        skip = tick(defs, sensor, instance).skip_message or ""
        assert skip == f"a following run is writing {rig.hudi_path}: it writes what arrives"
        # once it is over (gone from the runs in flight), the next one is asked for
        instance.delete_run(running.run_id)
        (after,) = tick(defs, sensor, instance).run_requests
        assert after.tags[FOLLOW_TAG] == "true"
