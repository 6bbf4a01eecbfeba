"""Sensors on the real stack: partitions follow Kafka, lag yields exactly the runs needed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import dagster as dg
import pytest
from confluent_kafka.admin import NewPartitions

from eos_pipeline.adapters.kafka import admin_client
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.components.assets import clickhouse_key
from eos_pipeline.components.config import PipelinesFile, Retry
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.components.resources import ClickHouseResource, chdb_path
from eos_pipeline.components.sensors import (
    CHDB_PATH_TAG,
    PRIORITY_TAG,
    SINK_PARTITION_TAG,
    START_STATE_TAG,
)
from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.keeper import KeeperKey
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import keys_for
from eos_pipeline.sinks.hooks import NO_HOOKS, SinkHooks
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.sensor_tick import tick

from .conftest import Rig, following, run_in_flight

pytestmark = pytest.mark.integration


def _on_server(config: PipelinesFile) -> PipelinesFile:
    """The same pipelines with a ClickHouse server instead of chDB (never reached here)."""
    url = "http://127.0.0.1:1"
    return config.model_copy(
        update={"clickhouse": config.clickhouse.model_copy(update={"url": url})}
    )


def _materialize_request(
    defs: dg.Definitions, instance: dg.DagsterInstance, request, checks: bool = False, **kw
) -> dg.ExecuteInProcessResult:
    """Run what the sensor asked for, with its tags (its partition, or its key range)."""
    asset = defs.assets[0].key
    selection = dg.AssetSelection.assets(asset)
    return dg.materialize(
        [*defs.assets, *defs.asset_checks] if checks else defs.assets,
        selection=selection | dg.AssetSelection.checks_for_assets(asset) if checks else selection,
        partition_key=request.partition_key,
        instance=instance,
        resources=kw.pop("resources", defs.resources),
        tags=request.tags,
        **kw,
    )


def _apply_partition_requests(instance: dg.DagsterInstance, result) -> None:
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)


def test_partitions_follow_the_topic_and_lag_requests_are_exact_and_idempotent(
    make_rig: Callable[..., Rig], zookeeper_hosts: str
) -> None:
    rig = make_rig(partitions=2)
    defs = build_definitions(rig.config)
    server = build_definitions(_on_server(rig.config))  # same keeper and Kafka, no chDB
    name = partitions_name(rig.pipeline)
    with dg.instance_for_test() as instance:
        # 1. the partitions sensor adds one key per Kafka partition, then nothing
        first = tick(defs, f"{rig.pipeline}_partitions", instance)
        (request,) = first.dynamic_partitions_requests
        assert list(request.partition_keys) == keys_for(rig.topic, 2)
        _apply_partition_requests(instance, first)
        assert tick(defs, f"{rig.pipeline}_partitions", instance).skip_message

        # 2. nothing produced yet: no run requested
        lag = f"{rig.pipeline}_clickhouse_lag"
        assert not tick(defs, lag, instance).run_requests

        # 3. records in partition 1 only: exactly one run, for that partition (on chDB a
        # key range of that one partition; on a ClickHouse server a single-partition run)
        keys = keys_for(rig.topic, 2)
        rig.produce({1: 5})
        (request,) = tick(defs, lag, instance).run_requests
        assert request.partition_key_range == dg.PartitionKeyRange(keys[1], keys[1])
        assert request.tags[CHDB_PATH_TAG] == chdb_path(rig.config.clickhouse.url)
        # the same evaluation again asks for the same run key: Dagster launches it once
        (again,) = tick(defs, lag, instance).run_requests
        assert again.run_key == request.run_key
        # the request names its asset, so the Runs list shows it as the run's target
        assert request.asset_selection == [clickhouse_key(rig.config.pipelines[0])]
        (single,) = tick(server, lag, instance).run_requests
        assert single.partition_key == keys[1]
        assert single.tags[SINK_PARTITION_TAG].endswith(single.partition_key)
        assert CHDB_PATH_TAG not in single.tags

        # 4. materialize it as the sensor's run: caught up, nothing requested any more
        _materialize_request(defs, instance, request)
        assert not tick(defs, lag, instance).run_requests
        assert not tick(server, lag, instance).run_requests

        # 5. a partition left in BEFORE (a run died mid-step) is requested first: on a server
        # its own run comes first, on chDB the one range run (with the recovery priority)
        # catches it up before the others
        rig.produce({0: 3, 1: 2})
        with KeeperStateStore(KeeperSettings(hosts=zookeeper_hosts)) as store:
            key = KeeperKey.of(rig.pipeline, "clickhouse", TopicPartition(rig.topic, 1))
            lease = store.acquire(key)
            store.write(lease, 5, 7, Phase.BEFORE.value)
        requests = tick(server, lag, instance).run_requests
        assert [r.partition_key for r in requests] == list(reversed(keys))
        assert [r.tags[PRIORITY_TAG] for r in requests] == ["10", "0"]
        (request,) = tick(defs, lag, instance).run_requests
        assert request.partition_key_range == dg.PartitionKeyRange(keys[0], keys[1])
        assert request.tags[PRIORITY_TAG] == "10"
        result = _materialize_request(defs, instance, request, checks=True)
        order = [
            line.split(":")[0]
            for e in instance.all_logs(result.run_id)
            if (line := e.user_message or "").startswith(rig.topic) and " read, " in line
        ]
        assert order == [keys[1], keys[0]]
        # one materialization and one passing check per partition, proven on the data
        assert sorted(e.partition for e in result.get_asset_materialization_events()) == keys
        evaluations = result.get_asset_check_evaluations()
        assert sorted(e.partition for e in evaluations) == keys
        assert all(e.passed for e in evaluations)
        assert not tick(defs, lag, instance).run_requests

        # 6. the topic grows: the new partition appears as a dynamic partition
        admin = admin_client(rig.kafka)
        admin.create_partitions([NewPartitions(rig.topic, 3)])[rig.topic].result(30)
        grown = tick(defs, f"{rig.pipeline}_partitions", instance)
        (request,) = grown.dynamic_partitions_requests
        assert list(request.partition_keys) == [keys_for(rig.topic, 3)[2]]
        _apply_partition_requests(instance, grown)
        assert instance.get_dynamic_partitions(name) == keys_for(rig.topic, 3)

        # 7. on chDB, a run waiting in the queue gets nothing behind it (it reads what arrives
        # until it starts); a running one gets the next run, to wait behind it, once records
        # arrived beyond the ends it was asked for (before that, the next run would find none)
        rig.produce({0: 2})
        (request,) = tick(defs, lag, instance).run_requests
        job = dg.Definitions(jobs=[dg.define_asset_job("ch_job")]).get_job_def("ch_job")
        waiting = instance.create_run_for_job(
            job, tags=request.tags, status=dg.DagsterRunStatus.NOT_STARTED
        )
        assert "is queued" in (tick(defs, lag, instance).skip_message or "")
        instance.delete_run(waiting.run_id)
        instance.create_run_for_job(job, tags=request.tags, status=dg.DagsterRunStatus.STARTED)
        skipped = tick(defs, lag, instance)
        assert not skipped.run_requests
        assert "is writing up to these ends" in (skipped.skip_message or "")
        rig.produce({0: 1})
        (behind,) = tick(defs, lag, instance).run_requests
        assert behind.partition_key_range == request.partition_key_range


def test_on_a_cold_start_the_first_lag_tick_adds_the_partitions_and_asks_for_the_run(
    make_rig: Callable[..., Rig],
) -> None:
    """Issue 30's cold start: a backlog before any partition key exists. The lag sensor's first
    tick adds the keys itself and asks for the run in the same result (Dagster adds keys before
    it launches runs), instead of waiting for the partitions sensor and one more tick."""
    rig = make_rig(partitions=2)
    defs = build_definitions(rig.config)
    lag = f"{rig.pipeline}_clickhouse_lag"
    keys = keys_for(rig.topic, 2)
    rig.produce({0: 3, 1: 2})
    with dg.instance_for_test() as instance:
        first = tick(defs, lag, instance)
        (added,) = first.dynamic_partitions_requests
        assert list(added.partition_keys) == keys
        (request,) = first.run_requests
        assert request.partition_key_range == dg.PartitionKeyRange(keys[0], keys[1])
        _apply_partition_requests(instance, first)
        assert _materialize_request(defs, instance, request).success
        again = tick(defs, lag, instance)
        assert not again.run_requests and not again.dynamic_partitions_requests
        # the partitions sensor, ticking later, finds nothing left to add
        assert tick(defs, f"{rig.pipeline}_partitions", instance).skip_message


def test_a_partition_key_added_by_hand_that_matches_no_kafka_partition_is_removed(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(partitions=2)
    defs = build_definitions(rig.config)
    name = partitions_name(rig.pipeline)
    sensor = f"{rig.pipeline}_partitions"
    keys = keys_for(rig.topic, 2)
    typo, beyond = f"{rig.topic}-typo", keys_for(rig.topic, 3)[2]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(name, [keys[0], typo, beyond])  # by hand, in the UI
        result = tick(defs, sensor, instance)
        add, delete = result.dynamic_partitions_requests
        assert isinstance(delete, dg.DeleteDynamicPartitionsRequest)
        assert list(add.partition_keys) == [keys[1]]
        assert sorted(delete.partition_keys) == sorted([typo, beyond])
        instance.add_dynamic_partitions(name, list(add.partition_keys))
        for key in delete.partition_keys:
            instance.delete_dynamic_partition(name, key)
        assert instance.get_dynamic_partitions(name) == [keys[0], keys[1]]
        assert tick(defs, sensor, instance).skip_message


def _run_failing(
    defs: dg.Definitions, instance: dg.DagsterInstance, request, url: str = "http://127.0.0.1:1"
) -> str:
    """Run what the sensor asked for, as its run, on a ClickHouse at ``url`` (by default one
    that refuses connections)."""
    resources = {**defs.resources, "clickhouse": ClickHouseResource(url=url)}
    result = _materialize_request(
        defs, instance, request, resources=resources, raise_on_error=False
    )
    assert not result.success
    return result.run_id


def _raising(error: Exception):  # type: ignore[no-untyped-def]
    """Hooks whose ClickHouse sink raises ``error`` before its first keeper write."""

    def fault(step: str) -> None:
        if step == "before_keeper_before":
            raise error

    return lambda _pipeline, sink: SinkHooks(fault=fault) if sink == "clickhouse" else NO_HOOKS


def _with_retry(config: PipelinesFile, retry: Retry) -> PipelinesFile:
    pipeline = config.pipelines[0].model_copy(update={"retry": retry})
    return config.model_copy(update={"pipelines": [pipeline]})


def _next_request(defs: dg.Definitions, lag: str, instance: dg.DagsterInstance, waited: str):
    """The sensor's request after a failure: first a visible wait, then the request."""
    result = tick(defs, lag, instance)
    assert not result.run_requests
    assert "retrying in " in (result.skip_message or ""), result.skip_message
    assert waited in (result.skip_message or ""), result.skip_message
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.2)
        result = tick(defs, lag, instance)
        if result.run_requests:
            (request,) = result.run_requests
            return request
    raise AssertionError(f"no request after the backoff: {result.skip_message}")


# waits long enough to be seen on a busy machine, short enough for a test
RETRY = Retry(max_attempts=2, backoff_seconds=2.0, max_backoff_seconds=2.0)


def test_a_transient_failure_is_retried_after_a_visible_backoff_without_limit(
    make_rig: Callable[..., Rig],
) -> None:
    """ClickHouse unreachable: retried past ``max_attempts``, each after a growing wait."""
    rig = make_rig(partitions=1)
    # single-partition runs (a ClickHouse server); on chDB the same rules hold for range runs
    config = _with_retry(rig.config, RETRY)
    defs = build_definitions(_on_server(config))
    embedded = build_definitions(config)
    lag = f"{rig.pipeline}_clickhouse_lag"
    with dg.instance_for_test() as instance:
        _apply_partition_requests(instance, tick(defs, f"{rig.pipeline}_partitions", instance))
        rig.produce({0: 4})
        (request,) = tick(defs, lag, instance).run_requests
        assert request.tags[START_STATE_TAG] == "new:0"
        keys, partition = [request.run_key], request.partition_key
        for n in (1, 2, 3):  # max_attempts is 2: a transient fault does not count against it
            _run_failing(defs, instance, request)
            request = _next_request(defs, lag, instance, f"s after {n} failure")
            assert request.partition_key == partition
            assert request.tags[START_STATE_TAG] == "new:0"
            keys.append(request.run_key)
            (again,) = tick(defs, lag, instance).run_requests
            assert again.run_key == request.run_key  # idempotent while nothing changes
        assert len(set(keys)) == 4  # a fresh key after each failure
        reason = _evaluate_after_failure(defs, instance, request, lag)
        assert "retrying in " in reason and "s after 4 failures: " in reason
        assert "ClickHouseSinkError: cannot reach ClickHouse" in reason  # the cause, as said

        # the position moves (an operator's run succeeds): requests resume from the new state
        dg.materialize(
            embedded.assets,
            selection=dg.AssetSelection.assets(embedded.assets[0].key),
            partition_key=request.partition_key,
            instance=instance,
            resources=embedded.resources,
        )
        assert not tick(defs, lag, instance).run_requests  # caught up
        rig.produce({0: 3})
        (moved,) = tick(defs, lag, instance).run_requests
        assert moved.tags[START_STATE_TAG] == "AFTER:4"
        assert ":retry" not in moved.run_key


def _evaluate_after_failure(defs, instance, request, lag: str) -> str:  # type: ignore[no-untyped-def]
    _run_failing(defs, instance, request)
    result = tick(defs, lag, instance)
    assert not result.run_requests
    return result.skip_message or ""


def test_an_unknown_failure_is_given_up_after_max_attempts_on_a_range_run(
    make_rig: Callable[..., Rig],
) -> None:
    """A run that fails without moving the position must not leave the partition stuck, nor
    become a crash loop: on chDB (one range run), an unrecognised error is retried, then
    given up after ``max_attempts`` runs from the same state."""
    rig = make_rig(partitions=2)
    config = _with_retry(rig.config, RETRY)
    defs = build_definitions(config, hooks=_raising(RuntimeError("odd: no rule knows this")))
    lag = f"{rig.pipeline}_clickhouse_lag"
    with dg.instance_for_test() as instance:
        _apply_partition_requests(instance, tick(defs, f"{rig.pipeline}_partitions", instance))
        rig.produce({0: 4, 1: 2})
        (first,) = tick(defs, lag, instance).run_requests
        keys = keys_for(rig.topic, 2)
        assert first.partition_key_range == dg.PartitionKeyRange(keys[0], keys[1])

        # 1st failure: the keeper did not move, yet after the backoff it asks again
        _materialize_request(defs, instance, first, raise_on_error=False)
        second = _next_request(defs, lag, instance, "s after 1 failure: RuntimeError: odd")
        assert second.run_key != first.run_key
        assert second.tags[START_STATE_TAG] == first.tags[START_STATE_TAG]

        # 2nd failure from the same state: max_attempts reached, nothing requested any more
        last = _materialize_request(defs, instance, second, raise_on_error=False).run_id
        time.sleep(2.2)  # past any backoff
        result = tick(defs, lag, instance)
        assert not result.run_requests
        reason = result.skip_message or ""
        assert keys[0] in reason and "new:0" in reason
        assert "2 runs" in reason and last in reason and "odd: no rule knows this" in reason


def test_a_failure_that_needs_a_person_stops_at_once_naming_it(
    make_rig: Callable[..., Rig],
) -> None:
    """Bad config (a ClickHouse URL without a host): no retry can fix it."""
    rig = make_rig(partitions=1)
    defs = build_definitions(_on_server(_with_retry(rig.config, RETRY)))
    lag = f"{rig.pipeline}_clickhouse_lag"
    with dg.instance_for_test() as instance:
        _apply_partition_requests(instance, tick(defs, f"{rig.pipeline}_partitions", instance))
        rig.produce({0: 2})
        (request,) = tick(defs, lag, instance).run_requests
        run_id = _run_failing(defs, instance, request, url="http://:8123/db")
        time.sleep(2.2)  # past any backoff: still nothing
        result = tick(defs, lag, instance)
        assert not result.run_requests
        reason = result.skip_message or ""
        assert "needs a person" in reason and "names no host" in reason and run_id in reason


def test_hudi_sensor_retries_a_failed_table_run_then_gives_up_unless_transient(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(partitions=2, clickhouse=False, hudi=True)
    defs = build_definitions(rig.config)
    lag = f"{rig.pipeline}_hudi_lag"
    with dg.instance_for_test() as instance:
        _apply_partition_requests(instance, tick(defs, f"{rig.pipeline}_partitions", instance))
        rig.produce({0: 2, 1: 2})
        keys: list[str] = []
        failed_ids: list[str] = []
        for _ in range(3):  # the default max_attempts
            (request,) = tick(defs, lag, instance).run_requests
            keys.append(request.run_key)
            # the run died (e.g. killed before its commit): the checkpoint did not move
            run = instance.create_run_for_job(
                dg.Definitions(jobs=[dg.define_asset_job("hudi_job")]).get_job_def("hudi_job"),
                tags=request.tags,
                status=dg.DagsterRunStatus.FAILURE,
            )
            failed_ids.append(run.run_id)
        assert len(set(keys)) == 3  # a fresh key after each failure
        result = tick(defs, lag, instance)
        assert not result.run_requests
        assert "3 runs" in (result.skip_message or "") and failed_ids[-1] in result.skip_message
        assert rig.hudi_path in result.skip_message

        # a run from the same state whose process died (SIGKILL), recorded as the code server
        # that launched it records it: the newest failure decides, and this one is transient:
        # asked for again after a visible wait, past max_attempts
        rig_state = dict(request.tags)
        for n in (4, 5):
            run = instance.create_run_for_job(
                dg.Definitions(jobs=[dg.define_asset_job("hudi_job")]).get_job_def("hudi_job"),
                tags=rig_state,
                status=dg.DagsterRunStatus.STARTED,
            )
            instance.report_engine_event(
                f"Run execution process for {run.run_id} was terminated by signal 9 (SIGKILL).",
                run,
            )
            instance.report_run_failed(run)  # what Dagster records for a dead run process
            result = tick(defs, lag, instance)
            assert not result.run_requests
            reason = result.skip_message or ""
            assert f"after {n} failures" in reason and "the run's process died" in reason
            assert "signal 9 (SIGKILL)" in reason


def test_following_runs_cover_every_partition_and_nothing_is_asked_behind_them(
    make_rig: Callable[..., Rig],
) -> None:
    from eos_pipeline.core.planning import FOLLOW_TAG

    rig = make_rig(partitions=3)
    defs = build_definitions(following(rig.config, 5))
    server = build_definitions(_on_server(following(rig.config, 5)))
    keys = keys_for(rig.topic, 3)
    lag = f"{rig.pipeline}_clickhouse_lag"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), keys)
        assert not tick(defs, lag, instance).run_requests  # nothing to follow yet
        rig.produce({1: 4})
        # chDB: one run over every partition (it writes whatever arrives anywhere)
        (request,) = tick(defs, lag, instance).run_requests
        assert request.partition_key_range == dg.PartitionKeyRange(keys[0], keys[2])
        assert request.tags[FOLLOW_TAG] == "true"
        # a server: each lagging partition's own run follows it
        (single,) = tick(server, lag, instance).run_requests
        assert single.partition_key == keys[1] and single.tags[FOLLOW_TAG] == "true"
        # while the following run is in flight nothing else is asked for, even with new records
        running = run_in_flight(instance, request.tags)
        rig.produce({0: 2})
        assert "follows the stream" in (tick(defs, lag, instance).skip_message or "")
        # once it ended, the next one is asked for
        instance.report_run_failed(running)
        (after,) = tick(defs, lag, instance).run_requests
        assert after.tags[FOLLOW_TAG] == "true"
        # a run without the tag (from the UI, a backfill) does not follow: see the asset test
        plain = build_definitions(rig.config)
        (unfollowed,) = tick(plain, lag, instance).run_requests
        assert FOLLOW_TAG not in unfollowed.tags


def test_a_partition_that_needs_a_person_is_set_aside_and_the_others_go_on(
    make_rig: Callable[..., Rig], chdb_client: Any
) -> None:
    """On chDB one run covers every lagging partition: one whose unread offsets were deleted
    by retention must not stall the healthy one behind it."""
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    from eos_pipeline.adapters.kafka import end_offsets, start_offsets
    from eos_pipeline.core.planning import NEEDS_PERSON_TAG, decode

    rig = make_rig(partitions=2)
    defs = build_definitions(rig.config)
    keys = keys_for(rig.topic, 2)
    lag = f"{rig.pipeline}_clickhouse_lag"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), keys)
        rig.produce({0: 10})
        (first,) = tick(defs, lag, instance).run_requests
        assert _materialize_request(defs, instance, first).success  # partition 0 stands at 10
        rig.produce({0: 20, 1: 6})
        admin = admin_client(rig.kafka)  # keep a reference: the futures die with their client
        for f in admin.delete_records([KafkaTopicPartition(rig.topic, 0, 20)]).values():
            f.result(30)
        assert start_offsets(rig.kafka, rig.topic)[0] == 20

        (both,) = tick(defs, lag, instance).run_requests
        assert both.partition_key_range == dg.PartitionKeyRange(keys[0], keys[1])
        failed = _materialize_request(defs, instance, both, raise_on_error=False)
        assert not failed.success
        # partition 1 was written and materialized; partition 0 is named on the run
        asset = clickhouse_key(rig.config.pipelines[0])
        event = instance.get_latest_materialization_event(asset)
        assert event is not None and event.asset_materialization is not None
        assert event.asset_materialization.partition == keys[1]
        assert event.asset_materialization.metadata["written_by_run"].value == failed.run_id
        tags = instance.get_run_by_id(failed.run_id).tags
        ((key, (label, cause)),) = decode(tags[NEEDS_PERSON_TAG]).items()
        assert key == keys[0] and label == "AFTER:0-10" and "no longer in the log" in cause
        rows = chdb_client.query(
            f"SELECT _offset, count() FROM `{rig.database}`.events WHERE _topic = {{t:String}} "
            "AND _partition = 1 GROUP BY _offset",
            parameters={"t": rig.topic},
        ).result_rows
        ends = end_offsets(rig.kafka, rig.topic)
        assert {int(o): int(n) for o, n in rows} == {o: 1 for o in range(ends[1])}

        # more records in both: the next run covers partition 1 only, with a warning for 0
        rig.produce({0: 1, 1: 2})
        (healthy,) = tick(defs, lag, instance).run_requests
        assert healthy.partition_key_range == dg.PartitionKeyRange(keys[1], keys[1])
        assert _materialize_request(defs, instance, healthy).success
        # nothing else lags: the skip reason names the partition set aside and what to do
        reason = tick(defs, lag, instance).skip_message or ""
        assert keys[0] in reason and "until a person acts" in reason
