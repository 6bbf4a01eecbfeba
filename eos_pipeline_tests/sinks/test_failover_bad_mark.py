"""After a switch, a last-written record whose copy is not in its bounded window stops the sink.

The switch checks bounded windows up front; this is the sink's own guard, for a window that
was bounded later or a keeper record changed by hand: the sink must not guess where to resume.
It raises naming the partition and what to do, and writes nothing (rows and keeper unchanged).
"""

from __future__ import annotations

import pytest
from clickhouse_connect.driver.client import Client

from eos_dev.stack.mirror import MirrorStack
from eos_pipeline.adapters.failover import switch
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.failover import FingerprintNotFound
from eos_pipeline.core.keeper import KeeperKey, Mark
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.mirror_fixtures import (
    clickhouse_failover_rig,
    produce_events,
    two_cluster_topic,
    wait_for_records,
)
from eos_pipeline_tests.support.sink_runs import run_active_clickhouse

pytestmark = pytest.mark.integration


def test_a_mark_not_in_its_closed_window_stops_the_sink_and_writes_nothing(
    mirror_stack: MirrorStack,
    cluster_settings: dict[str, KafkaSettings],
    zookeeper_hosts: str,
    chdb_client: Client,
) -> None:
    suffix, topic = two_cluster_topic(cluster_settings, "t-badmark")
    a, b = cluster_settings["A"], cluster_settings["B"]
    fp, spec, sink = clickhouse_failover_rig(
        mirror_stack, cluster_settings, chdb_client, f"p_badmark_{suffix}", topic
    )
    dlq = f"{topic}.dlq"
    keeper = KeeperSettings(hosts=zookeeper_hosts, root=f"/eos_badmark_{suffix}")
    with KeeperStateStore(keeper) as store:
        produce_events(a, topic, 1, 30, prefix="a")
        run_active_clickhouse(fp, spec, store, sink, dlq)
        produce_events(a, topic, 1, 10, prefix="late")
        wait_for_records(b, TopicPartition(f"A.{topic}", 0), 40)
        switch(store, fp, "B")
        key = KeeperKey(fp.name, "clickhouse", f"A.{topic}", 0, "B")
        moved = store.read(key)
        assert moved is not None and moved.record.mark is not None and moved.record.mark.pending
        start = moved.record.range_end or 0
        # A fingerprint no record has, in a window bounded 20 records on.
        lease = store.acquire(key)
        store.write(lease, start, start, "AFTER", mark=Mark("0" * 32, None, start + 20))
        before = store.read(key)
        with pytest.raises(FingerprintNotFound, match=rf"A\.{topic}.*nothing was written"):
            run_active_clickhouse(fp, spec, store, sink, dlq)
        after = store.read(key)
        assert after is not None and before is not None
        assert (after.record.range_end, after.record.mark) == (
            before.record.range_end,
            before.record.mark,
        )
    rows = chdb_client.query(f"SELECT count() FROM {spec.database}.events").result_rows[0][0]
    assert rows == 30, "the sink wrote after an unresolved mark"
