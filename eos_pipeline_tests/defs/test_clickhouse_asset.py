"""The ClickHouse asset and its exactly-once check, materialized with Dagster on the real stack."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import dagster as dg
import pytest
from clickhouse_connect.driver.client import Client
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from eos_pipeline.adapters.dlq import dead_letter_offsets
from eos_pipeline.adapters.kafka import end_offsets
from eos_pipeline.components.assets import CHECK_NAME, clickhouse_key
from eos_pipeline.components.metadata import ACTIVITY_KEYS, partitions_name
from eos_pipeline.core.planning import keys_for
from eos_pipeline_tests.support.definitions import build_definitions

from .conftest import Rig

pytestmark = pytest.mark.integration


def _offset_counts(client: Client, rig: Rig, partition: int) -> dict[int, int]:
    rows = client.query(
        f"SELECT _offset, count() FROM `{rig.database}`.events "
        "WHERE _topic = {t:String} AND _partition = {p:Int32} GROUP BY _offset",
        parameters={"t": rig.topic, "p": partition},
    ).result_rows
    return {int(o): int(n) for o, n in rows}


def _materialize(defs: dg.Definitions, instance: dg.DagsterInstance, key: str, rig: Rig, **kw):
    asset = clickhouse_key(rig.config.pipelines[0])
    return dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=dg.AssetSelection.assets(asset),
        partition_key=key,
        instance=instance,
        resources=defs.resources,
        **kw,
    )


def test_materialize_each_partition_twice_writes_each_offset_once(
    make_rig: Callable[..., Rig], chdb_client: Client
) -> None:
    rig = make_rig(partitions=2)
    rig.produce({0: 30, 1: 20}, bad_every=7)
    defs = build_definitions(rig.config)
    keys = keys_for(rig.topic, 2)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), keys)
        first = [_materialize(defs, instance, k, rig) for k in keys]
        again = [_materialize(defs, instance, k, rig) for k in keys]  # a backfill, run twice
        asset = clickhouse_key(rig.config.pipelines[0])
        meta = [_metadata(r) for r in first]
        assert [m["records_read"].value for m in meta] == [30, 20]
        dead = dead_letter_offsets(
            rig.kafka, rig.config.pipelines[0].dead_letter_topic, rig.pipeline
        )
        assert sum(m["dead_letters"].value for m in meta) == sum(len(v) for v in dead.values()) > 0
        assert sum(m["inserted"].value for m in meta) == 50 - sum(len(v) for v in dead.values())
        assert "| partition |" in meta[0]["partitions"].value
        # the partition's rows in the table (Dagster plots dagster/row_count over time)
        assert [m["dagster/row_count"].value for m in meta] == [m["inserted"].value for m in meta]
        ends = end_offsets(rig.kafka, rig.topic)
        for p, r in enumerate(again):
            m = _metadata(r)
            # a re-run with nothing to read records its state, not zeros to plot
            assert m["lag_after"].value == 0 and not set(ACTIVITY_KEYS) & set(m)
            (check,) = r.get_asset_check_evaluations()
            assert check.passed
            # incremental: the first check proved everything; this one re-checks that part by
            # ClickHouse's aggregates and compares offset by offset only what is new (nothing)
            assert check.metadata["compared_offset_by_offset"].value == f"[{ends[p]}, {ends[p]})"
            assert check.metadata["proven_through"].value == ends[p]
            assert check.metadata["table_rows"].value == m["dagster/row_count"].value
        # New records in partition 0: only they are compared offset by offset.
        rig.produce({0: 6}, bad_every=4)
        newer = _materialize(defs, instance, keys[0], rig)
        (check,) = newer.get_asset_check_evaluations()
        new_end = end_offsets(rig.kafka, rig.topic)[0]
        assert check.passed and check.metadata["proven_through"].value == new_end
        assert check.metadata["compared_offset_by_offset"].value == f"[{ends[0]}, {new_end})"
        dead = dead_letter_offsets(
            rig.kafka, rig.config.pipelines[0].dead_letter_topic, rig.pipeline
        )
        ends = end_offsets(rig.kafka, rig.topic)
        for p, tp_dead in (
            (0, dead.get(rig_tp(rig, 0), set())),
            (1, dead.get(rig_tp(rig, 1), set())),
        ):
            assert _offset_counts(chdb_client, rig, p) == {
                o: 1 for o in range(ends[p]) if o not in tp_dead
            }
        # A duplicate row inserted by hand: the check of that partition fails and names it.
        chdb_client.command(
            f"INSERT INTO `{rig.database}`.events SELECT * FROM `{rig.database}`.events "
            f"WHERE _topic = '{rig.topic}' AND _partition = 1 ORDER BY _offset LIMIT 1"
        )
        duplicated = min(_offset_counts(chdb_client, rig, 1))
        # The check alone. dg.materialize(partition_key=...) refuses a selection holding only
        # checks ("There is no PartitionsDefinition shared by all the provided assets", Dagster
        # 1.13.27); the partition tag itself is accepted and the check reads its key from it.
        result = dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=dg.AssetSelection.checks_for_assets(asset),
            tags={"dagster/partition": keys[1]},
            instance=instance,
            resources=defs.resources,
            raise_on_error=False,
        )
        (evaluation,) = result.get_asset_check_evaluations()
        assert evaluation.check_name == CHECK_NAME and not evaluation.passed
        assert evaluation.metadata["duplicates"].value == 1
        assert str(duplicated) in evaluation.metadata["duplicate_examples"].value
        assert evaluation.metadata["gaps"].value == 0
        # The duplicate sits in the range an earlier check proved: its aggregate gave it away
        # and the whole committed range was compared again.
        assert evaluation.metadata["compared_offset_by_offset"].value == f"[0, {ends[1]})"


def _metadata(result: dg.ExecuteInProcessResult) -> dict:
    (event,) = result.get_asset_materialization_events()
    return event.materialization.metadata


def rig_tp(rig: Rig, p: int):
    from eos_pipeline.core.offsets import TopicPartition

    return TopicPartition(rig.topic, p)


def test_a_key_range_run_writes_each_partition_once_with_its_own_numbers_and_checks(
    make_rig: Callable[..., Rig], chdb_client: Client
) -> None:
    """The run the sensor asks for on chDB: one run over a key range of partitions."""
    rig = make_rig(partitions=3)
    rig.produce({0: 12, 2: 9}, bad_every=5)  # partition 1 has nothing: caught up, in the range
    defs = build_definitions(rig.config)
    keys = keys_for(rig.topic, 3)
    asset = clickhouse_key(rig.config.pipelines[0])
    tags = {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[2]}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), keys)
        runs = [
            dg.materialize(
                [*defs.assets, *defs.asset_checks],
                selection=dg.AssetSelection.assets(asset)
                | dg.AssetSelection.checks_for_assets(asset),
                instance=instance,
                resources=defs.resources,
                tags=tags,
            )
            for _ in range(2)  # the second finds nothing to do
        ]
        dead = dead_letter_offsets(
            rig.kafka, rig.config.pipelines[0].dead_letter_topic, rig.pipeline
        )
        for run, expect_read in zip(runs, ({0: 12, 1: 0, 2: 9}, {0: 0, 1: 0, 2: 0}), strict=True):
            events = {e.partition: e for e in run.get_asset_materialization_events()}
            assert sorted(events) == keys  # one materialization per partition of the range
            for p, key in enumerate(keys):
                meta = events[key].materialization.metadata
                if any(expect_read.values()):
                    assert meta["records_read"].value == expect_read[p]  # its own numbers
                else:  # the run found nothing: its state, no activity numbers to plot
                    assert "records_read" not in meta and meta["lag_after"].value == 0
                rows = (12, 0, 9)[p] - len(dead.get(rig_tp(rig, p), ()))
                assert meta["dagster/row_count"].value == rows
            checks = run.get_asset_check_evaluations()
            assert sorted(c.partition for c in checks) == keys and all(c.passed for c in checks)
        assert sum(len(v) for v in dead.values()) > 0
        _assert_each_offset_once(chdb_client, rig, dead)


def test_a_following_run_writes_records_that_arrive_after_it_caught_up(
    make_rig: Callable[..., Rig], chdb_client: Client
) -> None:
    """A run the sensor tags to follow goes on writing new records once caught up, each
    exactly once, and ends when the stream has been quiet for ``idle_seconds``."""
    from eos_pipeline.components.config import Follow
    from eos_pipeline.core.planning import FOLLOW_TAG
    from eos_pipeline.core.positions import sink_state

    rig = make_rig(partitions=2)
    pipeline = rig.config.pipelines[0]
    assert pipeline.clickhouse is not None
    follows = Follow(idle_seconds=2.0, poll_seconds=0.05)
    pipeline = pipeline.model_copy(
        update={"clickhouse": pipeline.clickhouse.model_copy(update={"follow": follows})}
    )
    rig.produce({0: 10, 1: 10})
    defs = build_definitions(rig.config.model_copy(update={"pipelines": [pipeline]}))
    keys = keys_for(rig.topic, 2)
    asset = clickhouse_key(pipeline)
    tags = {
        ASSET_PARTITION_RANGE_START_TAG: keys[0],
        ASSET_PARTITION_RANGE_END_TAG: keys[1],
        FOLLOW_TAG: "true",
    }
    late: list[int] = []

    def produce_once_caught_up() -> None:
        # wait until the run has written the first 20 records (both positions at 10), then
        # produce more in two bursts: only a run still following can write them
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with defs.resources["keeper"].store() as store:
                records = store.read_many(rig.pipeline, "clickhouse", rig.topic)
            states = [sink_state(r.record) for r in records.values()]
            if len(states) == 2 and all(s is not None and s.range.end >= 10 for s in states):
                break
            time.sleep(0.05)
        else:
            return
        rig.produce({1: 7}, bad_every=4)
        time.sleep(0.5)
        rig.produce({0: 5})
        late.append(12)

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), keys)
        producer = threading.Thread(target=produce_once_caught_up)
        producer.start()
        run = dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=dg.AssetSelection.assets(asset) | dg.AssetSelection.checks_for_assets(asset),
            instance=instance,
            resources=defs.resources,
            tags=tags,
        )
        producer.join()
        assert late == [12], "the run never caught up"
        events = {
            e.partition: e.materialization.metadata for e in run.get_asset_materialization_events()
        }
        # the late records were read by this run (10 + 5 and 10 + 7), after it had caught up
        assert [events[k]["records_read"].value for k in keys] == [15, 17]
        logs = [e.message for e in instance.all_logs(run.run_id) if e.message]
        assert any("following ended: no new records for 2 s" in m for m in logs)
        assert all(c.passed for c in run.get_asset_check_evaluations())
    dead = dead_letter_offsets(rig.kafka, pipeline.dead_letter_topic, rig.pipeline)
    assert sum(len(v) for v in dead.values()) > 0
    _assert_each_offset_once(chdb_client, rig, dead)


def _assert_each_offset_once(client: Client, rig: Rig, dead: dict) -> None:
    """Every offset Kafka holds is in the table once, except the dead letters."""
    ends = end_offsets(rig.kafka, rig.topic)
    for p, end in ends.items():
        tp_dead = dead.get(rig_tp(rig, p), set())
        assert _offset_counts(client, rig, p) == {o: 1 for o in range(end) if o not in tp_dead}
