"""Fault-test harness: start sink runs in child processes, kill them, and check the data.

The proof is always on the data, never on what a run reported:

* the source offsets stored in the table, counted per offset (read by a child process of its own,
  since chDB allows one data path per process and the test process may already hold another);
* the offsets Kafka holds for the partition (read_committed, from the start of the log);
* the dead-letter topic's records, de-duplicated by their source coordinates.

Exactly once means: per topic-partition, table offsets == Kafka offsets - dead-lettered offsets,
each stored once, and the dead-lettered offsets are exactly the bad records the test produced.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
    read_range,
    start_offsets,
)
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore, StateStore
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec
from eos_pipeline_tests.faults.child import RESULT_PREFIX
from eos_pipeline_tests.support.dead_letters import read_dead_letters

SCHEMA_MAPPING = {"id": "Int64", "name": "String"}
REPO = Path(__file__).resolve().parents[2]

#: Kinds of bad values the producers mix in, with the DLQ error class each must get.
BAD_KINDS: dict[str, tuple[bytes | None, str]] = {
    "undecodable": (b"\xff\xfe{not json", "DecodeError"),
    "wrong_type": (b'{"id": "seven", "name": "x"}', "TypeMismatch"),
    "missing_field": (b'{"name": "no id"}', "MissingField"),
    "tombstone": (None, "Tombstone"),
}


@dataclass
class ChildResult:
    command: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def result(self) -> Any:
        for line in reversed(self.stdout.splitlines()):
            if line.startswith(RESULT_PREFIX):
                return json.loads(line[len(RESULT_PREFIX) :])
        raise AssertionError(f"child {self.command} printed no result:\n{self.tail()}")

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.stderr.splitlines()[-lines:])


class Child:
    """A running ``python -m eos_pipeline_tests.faults.child``; :meth:`wait` returns its result.

    A fresh interpreter per child, on purpose: children forked from a pre-warmed fork server
    (about 2 s faster each) hung now and then inside chDB's first query, once pyarrow and numpy
    were imported before the fork; a fault suite must not be flaky itself.
    """

    def __init__(
        self,
        command: str,
        job: Mapping[str, Any],
        env: Mapping[str, str],
        module: str = "eos_pipeline_tests.faults.child",
    ) -> None:
        self.command = command
        self.began = time.monotonic()
        self._tmp = tempfile.TemporaryDirectory(prefix="eos-child-")
        self._out = os.path.join(self._tmp.name, "stdout")
        self._err = os.path.join(self._tmp.name, "stderr")
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("EOS_FAULT")}
        child_env.update(env)
        argv = [sys.executable, "-m", module, command]
        with open(self._out, "w") as out, open(self._err, "w") as err:
            self._proc = subprocess.Popen(
                [*argv, json.dumps(job)], cwd=REPO, env=child_env, stdout=out, stderr=err
            )

    @property
    def pid(self) -> int:
        return self._proc.pid

    def stderr_so_far(self) -> str:
        return Path(self._err).read_text()

    def wait(self, timeout: float = 300.0) -> ChildResult:
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _dump_stacks(self._proc.pid)
            self._proc.kill()
            self._proc.wait()
            raise AssertionError(
                f"child {self.command} ran over {timeout:.0f} s:\n"
                + "\n".join(Path(self._err).read_text().splitlines()[-40:])
            ) from None
        result = ChildResult(
            self.command,
            code,
            Path(self._out).read_text(),
            Path(self._err).read_text(),
            time.monotonic() - self.began,
        )
        self._tmp.cleanup()
        return result


def _dump_stacks(pid: int) -> None:
    """Ask a hung child for its Python stacks (faulthandler on SIGUSR1) before killing it."""
    try:
        os.kill(pid, signal.SIGUSR1)
        time.sleep(1)
    except ProcessLookupError:
        pass


def start_child(
    command: str,
    job: Mapping[str, Any],
    *,
    fault: str | None = None,
    skip: int = 0,
    env: Mapping[str, str] | None = None,
) -> Child:
    """Start one child; ``fault`` arms ``EOS_FAULT_STEP`` (after ``skip`` passes of it)."""
    extra = dict(env or {})
    if fault:
        extra["EOS_FAULT_STEP"] = fault
        extra["EOS_FAULT_SKIP"] = str(skip)
    return Child(command, job, extra)


def run_child(
    command: str,
    job: Mapping[str, Any],
    *,
    fault: str | None = None,
    skip: int = 0,
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> ChildResult:
    """Run one child process and wait for it to end (or be killed)."""
    return start_child(command, job, fault=fault, skip=skip, env=env).wait(timeout)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class DeadLetterRecord:
    headers: dict[str, str]
    key: bytes | None
    value: bytes | None


@dataclass
class Produced:
    """What a test wrote to its topic: every offset, and which ones are bad (with their class)."""

    offsets: dict[int, list[int]] = field(default_factory=dict)
    bad: dict[tuple[int, int], str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.offsets.values())


@dataclass
class FaultRig:
    """One topic, one dead-letter topic, one keeper root and one chDB path owned by a test."""

    kafka: KafkaSettings
    zookeeper: str
    workdir: Path
    partitions: int = 3
    topic: str = field(default_factory=lambda: unique("fault").replace("_", "-"))
    pipeline: str = field(default_factory=lambda: unique("p"))
    database: str = field(default_factory=lambda: unique("db"))
    table: str = "events"
    produced: Produced = field(default_factory=Produced)
    #: Set for in-process runs on the session's chDB engine; None: children on ``chdb_path``.
    sink: ClickHouseSink | None = None
    topic_config: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        self.dlq_topic = f"{self.topic}.dlq"
        self.hudi_dlq_topic = f"{self.topic}.hudi.dlq"
        self.keeper_root = f"/eos_faults_{self.pipeline}"
        self.chdb_path = str(self.workdir / "chdb")
        self.hudi_path = str(self.workdir / "hudi" / "events")
        create_topic(self.kafka, self.topic, self.partitions, config=self.topic_config)
        if self.sink is not None:
            self.sink.ensure_table(
                self.database, self.table, TableSchema.from_mapping(SCHEMA_MAPPING)
            )

    # ----------------------------------------------------------------------- jobs for the child
    def job(self, partitions: Iterable[int] | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap": self.kafka.bootstrap_servers,
            "zookeeper": self.zookeeper,
            "keeper_root": self.keeper_root,
            "chdb_path": self.chdb_path,
            "database": self.database,
            "table": self.table,
            "schema": SCHEMA_MAPPING,
            "pipeline": self.pipeline,
            "topic": self.topic,
            "dlq_topic": self.dlq_topic,
            "partitions": list(range(self.partitions) if partitions is None else partitions),
            "table_path": self.hudi_path,
            "table_name": re.sub(r"\W", "_", self.pipeline),
            "hudi_dlq_topic": self.hudi_dlq_topic,
            **extra,
        }

    # ----------------------------------------------------------------------- producing
    def produce(
        self,
        per_partition: int,
        *,
        bad_every: int = 0,
        rng: random.Random | None = None,
        partitions: Iterable[int] | None = None,
    ) -> None:
        """Send good JSON events, with one bad value (of a rotating kind) every ``bad_every``."""
        kinds = list(BAD_KINDS)
        records: list[tuple[int, bytes | None, bytes | None]] = []
        labels: list[str | None] = []
        for p in range(self.partitions) if partitions is None else partitions:
            base = len(self.produced.offsets.get(p, []))
            for i in range(base, base + per_partition):
                if bad_every and (i % bad_every == bad_every - 1):
                    kind = (rng or random).choice(kinds)
                    records.append((p, None, BAD_KINDS[kind][0]))
                    labels.append(BAD_KINDS[kind][1])
                else:
                    records.append((p, None, json.dumps({"id": i, "name": f"e{p}-{i}"}).encode()))
                    labels.append(None)
        delivered = produce_all(idempotent_producer(self.kafka), self.topic, records)
        # produce_all returns deliveries in acknowledgement order; map them back by index.
        by_partition: dict[int, list[int]] = {}
        for (partition, offset), label in zip(_ordered(delivered, records), labels, strict=True):
            by_partition.setdefault(partition, []).append(offset)
            if label is not None:
                self.produced.bad[(partition, offset)] = label
        for p, offsets in by_partition.items():
            self.produced.offsets.setdefault(p, []).extend(offsets)

    def produce_raw(
        self,
        partition: int,
        items: Iterable[tuple[bytes | None, bytes | None, str | None]],
        producer: Any = None,
    ) -> list[int]:
        """Send ``(key, value, expected dead-letter class or None)``; return the offsets."""
        items = list(items)
        delivered = produce_all(
            producer or idempotent_producer(self.kafka),
            self.topic,
            [(partition, k, v) for k, v, _ in items],
        )
        offsets = sorted(o for _, o in delivered)
        for offset, (_, _, label) in zip(offsets, items, strict=True):
            self.produced.offsets.setdefault(partition, []).append(offset)
            if label is not None:
                self.produced.bad[(partition, offset)] = label
        return offsets

    def dead_letter_records(self) -> dict[tuple[int, int], DeadLetterRecord]:
        """Dead letters with key and value, by source (partition, offset)."""
        out: dict[tuple[int, int], DeadLetterRecord] = {}
        ends = end_offsets(self.kafka, self.dlq_topic)
        consumer = Consumer(
            self.kafka.config(**{"group.id": "eos-fault-dlq", "enable.auto.commit": False})
        )
        try:
            consumer.assign([KafkaTopicPartition(self.dlq_topic, p, 0) for p in ends])
            remaining, deadline = sum(ends.values()), time.monotonic() + 30
            while remaining > 0 and time.monotonic() < deadline:
                for msg in consumer.consume(min(remaining, 500), timeout=1.0):
                    if msg.error():
                        continue
                    remaining -= 1
                    headers = {k: v.decode() for k, v in msg.headers() or []}
                    if headers["eos.source.topic"] != self.topic:
                        continue
                    if "eos.source.offset" not in headers:
                        continue  # a replay marker, not a letter
                    key = (int(headers["eos.source.partition"]), int(headers["eos.source.offset"]))
                    out.setdefault(key, DeadLetterRecord(headers, msg.key(), msg.value()))
        finally:
            consumer.close()
        return out

    # ----------------------------------------------------------------------- reading the truth
    def kafka_offsets(self, partition: int) -> list[int]:
        tp = TopicPartition(self.topic, partition)
        start = start_offsets(self.kafka, self.topic)[partition]
        end = end_offsets(self.kafka, self.topic)[partition]
        return read_range(self.kafka, tp, OffsetRange(start, end)).offsets

    def dead_letters(self, dlq_topic: str | None = None) -> dict[tuple[int, int], dict[str, str]]:
        """Dead letters of this topic by (partition, offset); duplicates collapse by coordinates."""
        out: dict[tuple[int, int], dict[str, str]] = {}
        for headers in read_dead_letters(self.kafka, dlq_topic or self.dlq_topic):
            if headers.get("eos.source.topic") != self.topic:
                continue
            key = (int(headers["eos.source.partition"]), int(headers["eos.source.offset"]))
            out.setdefault(key, headers)
        return out

    # ----------------------------------------------------------------------- in-process runs
    def keeper(self) -> KeeperStateStore:
        return KeeperStateStore(KeeperSettings(hosts=self.zookeeper, root=self.keeper_root))

    def sync(self, store: StateStore, **spec: Any) -> ClickHousePartitionSync:
        """A sink loop in this process, on the session's chDB engine (see ``inproc_rig``)."""
        assert self.sink is not None, "in-process runs need the rig's sink (inproc_rig)"
        fault = spec.pop("fault", lambda _step: None)
        return ClickHousePartitionSync(
            ClickHouseTableSpec(
                pipeline=self.pipeline,
                database=self.database,
                table=self.table,
                schema=TableSchema.from_mapping(SCHEMA_MAPPING),
                **spec,
            ),
            self.kafka,
            store,
            self.sink,
            DeadLetterWriter(self.kafka, self.dlq_topic, self.pipeline),
            fault=fault,
        )

    def table_offsets(self) -> dict[int, dict[int, int]]:
        if self.sink is not None:
            return {
                p: dict(self.sink.offsets_in_table(self.database, self.table, self.topic, p))
                for p in range(self.partitions)
            }
        child = run_child("offsets", self.job())
        assert child.returncode == 0, child.tail()
        return {int(p): {int(o): n for o, n in rows.items()} for p, rows in child.result.items()}

    def assert_exactly_once(
        self,
        table: Mapping[int, Mapping[int, int]] | None = None,
        *,
        dlq_topic: str | None = None,
    ) -> int:
        """Check every partition on the data; return the number of rows checked.

        The dead letters must be exactly the bad records, each with the error class it was made
        for (both sinks' decoders name the same classes).
        """
        table = self.table_offsets() if table is None else table
        dead = self.dead_letters(dlq_topic)
        assert set(dead) == set(self.produced.bad), (
            f"dead letters {sorted(set(dead) ^ set(self.produced.bad))[:10]} differ from the bad "
            "records produced"
        )
        for (p, o), headers in dead.items():
            assert headers["eos.source.topic"] == self.topic
            assert headers["eos.error.message"], (p, o, headers)
            assert headers["eos.error.class"] == self.produced.bad[(p, o)], (p, o, headers)
        rows = 0
        for p in range(self.partitions):
            stored = table.get(p, {})
            doubled = {o: n for o, n in stored.items() if n != 1}
            assert not doubled, f"partition {p}: offsets stored more than once: {doubled}"
            in_kafka = set(self.kafka_offsets(p))
            assert in_kafka == set(self.produced.offsets.get(p, [])), f"partition {p}"
            expected = in_kafka - {o for (q, o) in dead if q == p}
            missing = sorted(expected - set(stored))
            unexpected = sorted(set(stored) - expected)
            assert not missing and not unexpected, (
                f"partition {p}: missing {missing[:10]} ({len(missing)}), "
                f"unexpected {unexpected[:10]} ({len(unexpected)})"
            )
            rows += len(stored)
        return rows


def _ordered(
    delivered: list[tuple[int, int]], records: list[tuple[int, bytes | None, bytes | None]]
) -> list[tuple[int, int]]:
    """Deliveries put back in send order: per partition, offsets grow in send order."""
    per_partition: dict[int, list[int]] = {}
    for partition, offset in delivered:
        per_partition.setdefault(partition, []).append(offset)
    for offsets in per_partition.values():
        offsets.sort()
    cursor = dict.fromkeys(per_partition, 0)
    out = []
    for partition, _, _ in records:
        assert partition is not None
        out.append((partition, per_partition[partition][cursor[partition]]))
        cursor[partition] += 1
    return out


def chaos_seed(default: int | None = None) -> int:
    """``EOS_CHAOS_SEED`` when set (to replay a failure), else a fresh seed that gets printed."""
    raw = os.environ.get("EOS_CHAOS_SEED")
    if raw:
        return int(raw)
    return default if default is not None else random.SystemRandom().randrange(1 << 32)
