"""Sensors on the real stack: partitions follow Kafka, lag yields exactly the runs needed."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg
import pytest
from confluent_kafka.admin import NewPartitions
from dagster._core.definitions.partitions.context import partition_loading_context

from eos_pipeline.adapters.kafka import admin_client
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.keeper_record import KeeperKey
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.defs.builder import build_definitions
from eos_pipeline.defs.partitions import keys_for, partitions_name
from eos_pipeline.defs.sensors import PRIORITY_TAG, SINK_PARTITION_TAG

from .conftest import Rig

pytestmark = pytest.mark.integration


def _evaluate(defs: dg.Definitions, name: str, instance: dg.DagsterInstance):
    """One tick as the sensor daemon runs it (``evaluate_tick``), on the real resources."""
    sensor = defs.get_repository_def().get_sensor_def(name)
    with (
        dg.build_sensor_context(
            instance=instance, resources=defs.resources, definitions=defs
        ) as context,
        partition_loading_context(dynamic_partitions_store=instance),
    ):
        return sensor.evaluate_tick(context)


def _apply_partition_requests(instance: dg.DagsterInstance, result) -> None:
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)


def test_partitions_follow_the_topic_and_lag_requests_are_exact_and_idempotent(
    make_rig: Callable[..., Rig], zookeeper_hosts: str
) -> None:
    rig = make_rig(partitions=2)
    defs = build_definitions(rig.config)
    name = partitions_name(rig.pipeline)
    with dg.instance_for_test() as instance:
        # 1. the partitions sensor adds one key per Kafka partition, then nothing
        first = _evaluate(defs, f"{rig.pipeline}_partitions", instance)
        (request,) = first.dynamic_partitions_requests
        assert list(request.partition_keys) == keys_for(rig.topic, 2)
        _apply_partition_requests(instance, first)
        assert _evaluate(defs, f"{rig.pipeline}_partitions", instance).skip_message

        # 2. nothing produced yet: no run requested
        lag = f"{rig.pipeline}_clickhouse_lag"
        assert not _evaluate(defs, lag, instance).run_requests

        # 3. records in partition 1 only: exactly one run, for that partition
        rig.produce({1: 5})
        requests = _evaluate(defs, lag, instance).run_requests
        assert [r.partition_key for r in requests] == [keys_for(rig.topic, 2)[1]]
        # the same evaluation again asks for the same run key: Dagster launches it once
        again = _evaluate(defs, lag, instance).run_requests
        assert [r.run_key for r in again] == [r.run_key for r in requests]
        assert requests[0].tags[SINK_PARTITION_TAG].endswith(requests[0].partition_key)

        # 4. materialize it: caught up, nothing requested any more
        dg.materialize(
            defs.assets,
            selection=dg.AssetSelection.assets(defs.assets[0].key),
            partition_key=requests[0].partition_key,
            instance=instance,
            resources=defs.resources,
        )
        assert not _evaluate(defs, lag, instance).run_requests

        # 5. a partition left in BEFORE (a run died mid-step) is requested first
        rig.produce({0: 3, 1: 2})
        with KeeperStateStore(KeeperSettings(hosts=zookeeper_hosts)) as store:
            key = KeeperKey.of(rig.pipeline, "clickhouse", TopicPartition(rig.topic, 1))
            lease = store.acquire(key)
            store.write(lease, 5, 7, Phase.BEFORE.value)
        requests = _evaluate(defs, lag, instance).run_requests
        assert [r.partition_key for r in requests] == list(reversed(keys_for(rig.topic, 2)))
        assert [r.tags[PRIORITY_TAG] for r in requests] == ["10", "0"]

        # 6. the topic grows: the new partition appears as a dynamic partition
        admin = admin_client(rig.kafka)
        admin.create_partitions([NewPartitions(rig.topic, 3)])[rig.topic].result(30)
        grown = _evaluate(defs, f"{rig.pipeline}_partitions", instance)
        (request,) = grown.dynamic_partitions_requests
        assert list(request.partition_keys) == [keys_for(rig.topic, 3)[2]]
        _apply_partition_requests(instance, grown)
        assert instance.get_dynamic_partitions(name) == keys_for(rig.topic, 3)
