"""A deliberate ClickHouse replay on the real stack: Kafka, ZooKeeper and the chDB engine.

Exactness is checked on the data after every replay: per offset, the rows in the table against
Kafka's offsets minus the dead letters as the ClickHouse proof counts them (replay markers
included), and the normal sink still continues exactly afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.dlq import DeadLetterWriter, dead_letter_offsets
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    end_offsets,
    idempotent_producer,
    produce_all,
    read_range,
)
from eos_pipeline.adapters.keeper import ReplayJournal
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.proof import compare
from eos_pipeline.core.replay import DONE, RUNNING, ReplayRefused
from eos_pipeline.sinks.clickhouse import (
    ClickHousePartitionSync,
    ClickHouseReplay,
    ClickHouseTableSpec,
)
from eos_pipeline_tests.sinks.clickhouse_stage import (
    SCHEMA,
    ClickHouseStage,
    InjectedCrash,
    clickhouse_stage,
)

pytestmark = pytest.mark.integration

#: Records above this many bytes are dead letters until the limit is lifted ("the fix").
LIMIT = 60


@dataclass
class Rig(ClickHouseStage):
    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, 0)

    @property
    def dlq(self) -> str:
        return f"{self.topic}.dlq"

    def spec(self, **kw: object) -> ClickHouseTableSpec:
        args: dict[str, object] = {"max_records": 25}
        args.update(kw)
        return ClickHouseTableSpec(self.pipeline, self.database, "events", SCHEMA, **args)  # type: ignore[arg-type]

    def catch_up(self, **kw: object) -> None:
        spec = self.spec(**kw)
        dlq = DeadLetterWriter(self.kafka, self.dlq, self.pipeline)
        ClickHousePartitionSync(spec, self.kafka, self.store, self.sink, dlq).run(self.tp)

    def replay(self, fault: object = None, **kw: object) -> ClickHouseReplay:
        extra = {"fault": fault} if fault else {}
        return ClickHouseReplay(
            self.spec(**kw),
            self.kafka,
            self.store,
            self.sink,
            self.dlq,
            **extra,  # type: ignore[arg-type]
        )

    def proof(self):
        end = end_offsets(self.kafka, self.topic)[0]
        committed = OffsetRange(0, end)
        kafka = read_range(self.kafka, self.tp, committed).offsets
        dead = dead_letter_offsets(self.kafka, self.dlq, self.pipeline, "clickhouse")
        rows = self.table_offsets(0)
        return compare(self.tp, committed, kafka, dead.get(self.tp, set()), rows)

    def assert_exact(self) -> None:
        proof = self.proof()
        assert proof.passed, proof.metadata()


@pytest.fixture
def rig(
    kafka_settings: KafkaSettings, zookeeper_hosts: str, chdb_client: Client, topic_name: str
) -> Iterator[Rig]:
    with clickhouse_stage(
        Rig, kafka_settings, zookeeper_hosts, chdb_client, topic_name, partitions=1
    ) as rig:
        yield rig


def produce(rig: Rig, count: int, long_every: int = 7) -> None:
    """``count`` records; every ``long_every``-th has a long name (above :data:`LIMIT` bytes)."""
    records = []
    for i in range(count):
        name = "x" * 80 if i % long_every == long_every - 1 else f"n{i}"
        records.append((0, None, json.dumps({"id": i, "name": name}).encode()))
    produce_all(idempotent_producer(rig.kafka), rig.topic, records)


def test_replay_after_a_fix_and_a_repair_leaves_every_offset_once(rig: Rig) -> None:
    produce(rig, 100)
    rig.catch_up(max_record_bytes=LIMIT)
    rig.assert_exact()
    before = rig.proof()
    assert before.dead_letters == 14
    # A repair is due: rows of [30, 40) are lost from the table by hand.
    rig.sink.delete_offsets(rig.database, "events", rig.topic, 0, OffsetRange(30, 40))
    assert not rig.proof().passed

    # The fix: records up to any size are rows now. Dry run first: it says what, writes nothing.
    replay = rig.replay()
    plan = replay.plan(rig.tp, 20, 70)
    assert plan.chunks == (OffsetRange(20, 45), OffsetRange(45, 70))
    assert "delete the table's rows" in "\n".join(plan.describe())
    assert not rig.proof().passed  # the dry run changed nothing
    report = replay.run(plan)
    assert report.rows_written == 50 and report.dead_letters == 0
    after = rig.proof()
    assert after.passed, after.metadata()
    # The 8 long records of [20, 70) are rows now; those outside the range are still letters.
    assert after.dead_letters == 14 - 8
    assert ReplayJournal(rig.store, rig.pipeline, "clickhouse").read(rig.tp)[0].phase == DONE

    # The sink goes on exactly from its unchanged position.
    produce(rig, 30)
    rig.catch_up(max_record_bytes=LIMIT)
    rig.assert_exact()


# The other stops (after the marker, after an insert, inside an INSERT) are real SIGKILLs in
# eos_pipeline_tests/faults/test_replay_kills.py.
@pytest.mark.parametrize("crash_at", ["replay_after_delete"])
def test_replay_stopped_midway_and_run_again_is_exact(rig: Rig, crash_at: str) -> None:
    produce(rig, 80)
    rig.catch_up(max_record_bytes=LIMIT)

    def crash(step: str) -> None:
        if step == crash_at:
            raise InjectedCrash(step)

    with pytest.raises(InjectedCrash):
        replay = rig.replay(fault=crash)
        replay.run(replay.plan(rig.tp, 10, 75))
    pending = ReplayJournal(rig.store, rig.pipeline, "clickhouse").read(rig.tp)[0]
    assert pending is not None and pending.phase == RUNNING
    # A different range is refused until the interrupted one is finished.
    with pytest.raises(ReplayRefused, match="run that replay again first"):
        rig.replay().plan(rig.tp, 0, 75)
    # A normal run in between still works and touches nothing below its position.
    produce(rig, 10)
    rig.catch_up(max_record_bytes=LIMIT)

    replay = rig.replay()
    plan = replay.plan(rig.tp, 10, 75)
    assert plan.resumes
    replay.run(plan)
    rig.assert_exact()
    # Long records outside the replay stay letters: 6 and 76, and 86 written after it.
    assert rig.proof().dead_letters == 3


def test_refusals_change_nothing(rig: Rig) -> None:
    produce(rig, 20)
    with pytest.raises(ReplayRefused, match="written nothing yet"):
        rig.replay().plan(rig.tp, 0, 10)
    rig.catch_up()
    with pytest.raises(ReplayRefused, match="reaches past"):
        rig.replay().plan(rig.tp, 0, 21)
    assert ReplayJournal(rig.store, rig.pipeline, "clickhouse").read(rig.tp) == (None, None)
    rig.assert_exact()
