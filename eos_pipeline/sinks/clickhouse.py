"""The ClickHouse exactly-once sink: the loop of one topic-partition into one table, what it is
told (:class:`ClickHouseTableSpec`) and what it reports (:class:`SyncReport`).

This is where the pieces meet, and it stays thin: the core decides (:func:`decide`), the adapters
read Kafka, keep state in the keeper and insert into ClickHouse. Per batch:

1. take the partition: acquire a lease in the keeper, bumping its epoch, so an older writer that
   is still running (a zombie) can no longer move the state;
2. fix the batch's range before writing anything: a partition left in ``BEFORE`` re-reads exactly
   its stored range; otherwise the batch runs from the stored end to the run's target end, capped
   by the record and byte limits;
3. decide; send dead letters (undecodable records, and the one case that cannot be re-sent
   identically);
4. for each step: write ``BEFORE(step)``, insert the step's rows as one block under the step's own
   dedup token (:meth:`ClickHousePartitionSync.insert_rows`), write ``AFTER(step)``.

A crash anywhere leaves a state from which the next run re-derives the same steps: ClickHouse drops
a re-sent block by its token, and the keeper's ``AFTER`` says which ranges are done.

Every step is logged, and the ``fault`` hook is called at each step boundary (the fault tests kill
the process there: :mod:`eos_pipeline.sinks.hooks`).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.clickhouse.native_json import NativeRefused
from eos_pipeline.adapters.dlq import DeadLetter, DeadLetterWriter
from eos_pipeline.adapters.kafka import (
    KafkaBatch,
    KafkaReadError,
    KafkaSettings,
    TopicFacts,
    range_consumer,
    read_range,
    start_offsets,
    topic_id,
)
from eos_pipeline.adapters.keeper import (
    KeeperStateStore,
    Lease,
    ReplayJournal,
    StateStore,
    default_writer_id,
)
from eos_pipeline.adapters.registry import decode_values, schemas_for
from eos_pipeline.core.contract import ErrorClass, oversized, oversized_positions
from eos_pipeline.core.decode import (
    NativePlan,
    NativeRows,
    add_source_columns,
    decode_json_arrow,
    native_plan,
    writer_ids,
)
from eos_pipeline.core.dedup import (
    OffsetRegressionError,
    Phase,
    SinkState,
    decide,
    dedup_token,
)
from eos_pipeline.core.errors import LogChanged
from eos_pipeline.core.evolution import (
    Evolution,
    IncompatibleSchemaChange,
    plan_evolution,
    writer_columns,
)
from eos_pipeline.core.failover import (
    MirroredRecord,
    ReplicaPending,
    Window,
    resume_after,
    row_topic,
)
from eos_pipeline.core.keeper import KeeperKey, KeeperRecord, Mark
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.positions import check_same_log, needs_log_start, sink_state, start_offset
from eos_pipeline.core.replay import (
    DONE,
    RUNNING,
    JournalEntry,
    ReplayLogChanged,
    ReplayPlan,
    plan_replay,
    replay_token_name,
)
from eos_pipeline.core.schema import SchemaError, TableSchema
from eos_pipeline.sinks.hooks import FaultHook, no_fault

log = logging.getLogger(__name__)

#: How long a run over many partitions keeps Kafka's answers (``adapters.kafka.TopicFacts``)...
SESSION_FACTS_MAX_AGE_S = 2.0
#: ... and longer per partition: every refresh asks for all the run's partitions, so a fixed age
#: made lookups grow as length times width (N²: 470 ListOffsets of 4,096 partitions in a
#: 4,096-partition catch-up). An older target is still exact (at or below the last stable
#: offset); the records produced since are the next run's.
SESSION_FACTS_S_PER_PARTITION = 0.002


# ---- what the sink is told, and what it reports -----------------------------------------------


@dataclass(frozen=True)
class ClickHouseTableSpec:
    """Where one pipeline writes, and how big a batch may get."""

    pipeline: str
    database: str
    table: str
    schema: TableSchema
    sink: str = "clickhouse"
    max_records: int = 100_000
    max_bytes: int = 64 * 1024 * 1024
    reset: Literal["earliest", "latest"] = "earliest"
    #: Key + value bytes above which a record is dead-lettered as ``Oversized`` (None: no limit).
    max_record_bytes: int | None = None
    #: Who parses the JSON values (``clickhouse.json_parser``): ``auto`` lets ClickHouse parse
    #: them where :func:`eos_pipeline.core.decode.native_plan` vouches for the schema and
    #: the sink is chDB, ``native`` requires that, ``arrow`` never lets it.
    json_parser: Literal["auto", "native", "arrow"] = "auto"


@dataclass
class BatchReport:
    case: str
    batch: OffsetRange
    steps: list[OffsetRange] = field(default_factory=list)
    skipped: list[OffsetRange] = field(default_factory=list)
    cropped: OffsetRange | None = None
    records_read: int = 0
    rows_sent: int = 0
    dead_letters: int = 0
    seconds: float = 0.0


@dataclass
class SyncReport:
    """What one run did for one topic-partition (becomes Dagster metadata)."""

    tp: TopicPartition
    epoch: int
    start: int
    target_end: int
    end: int = 0
    batches: list[BatchReport] = field(default_factory=list)
    #: Cluster alias read from (None: single-cluster pipeline).
    cluster: str | None = None
    #: After a switch: records read again to find the last written one, and how many of them
    #: were skipped as already written (see :func:`locate_copy`).
    reread: int = 0
    skipped: int = 0

    @property
    def records_read(self) -> int:
        return sum(b.records_read for b in self.batches)

    @property
    def rows_sent(self) -> int:
        return sum(b.rows_sent for b in self.batches)

    @property
    def dead_letters(self) -> int:
        return sum(b.dead_letters for b in self.batches)

    @property
    def cases(self) -> list[str]:
        return [b.case for b in self.batches]


def case_summary(cases: list[str]) -> str:
    """The cases of a run's batches in order, a repeat shown once with its count (a run that
    followed the stream steps a partition many times)."""
    parts = [(case, len(list(run))) for case, run in itertools.groupby(cases)]
    return ", ".join(case if n == 1 else f"{case} x{n}" for case, n in parts)


def locate_copy(
    kafka: KafkaSettings, tp: TopicPartition, start: int, mark: Mark, target: int
) -> tuple[int, Mark, int, int]:
    """Exact resume after a switch: find a pending mark's copy in ``tp`` from ``start``;
    (position, mark, re-read, skipped).

    A switch (``eos-pipeline failover``) stores a translated position (never ahead of the truth)
    and a *pending mark*: the fingerprint of the last record written from the old cluster, whose
    copy lies in ``[position, window_end)``. The sink reads that window, finds the copy
    (:func:`~eos_pipeline.core.failover.resume_after`) and moves right after it: every record
    before the copy was written already, so skipping them is exact. In an open window (no offset
    sync after the position yet) without the copy, MirrorMaker 2 has not copied it yet: all read
    is skipped and the mark stays pending. A closed window without the copy, or two copies, stop
    the run with the core's error; nothing is written.
    """
    assert mark.pending
    end = target if mark.window_end is None else min(mark.window_end, target)
    batch = read_range(kafka, tp, OffsetRange(start, max(start, end)))
    records = [
        MirroredRecord(
            batch.offsets[i],
            batch.keys[i],
            batch.values[i],
            batch.timestamps_ms[i],
            batch.headers.get(i, ()),
        )
        for i in range(len(batch))
    ]
    window = Window(start, mark.window_end)
    try:
        point = resume_after(tp, mark.fingerprint, records, window)
    except ReplicaPending:
        log.warning(
            "%s: the last written record (fingerprint %s) is not copied here yet; skipping the "
            "%d copies before it and waiting for the rest",
            tp,
            mark.fingerprint,
            len(records),
        )
        return batch.range.end, mark, len(records), len(records)
    log.info(
        "%s: resumed after offset %d, the copy of the last record written before the switch "
        "(%d re-read, %d skipped)",
        tp,
        point.matched_offset,
        len(records),
        point.skipped,
    )
    located = Mark(mark.fingerprint, point.matched_offset, None, mark.timestamp_ms)
    return point.position, located, len(records), point.skipped


class SchemaFollower:
    """The table schema a sink writes with, following a registry subject's newer writer schemas
    (both sinks; ``TableSchema.schema_id`` set).

    Before a range's rows are written, the sink asks which evolutions its writer ids need
    (:func:`core.evolution.plan_evolution`, in id order), applies each to its table, then adopts
    it. An id's schema never changes (the registry cache), so a retried range plans the same
    evolutions; the DDL that applies them is idempotent.
    """

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        #: Writer ids already settled against ``schema`` (their records need no change).
        self._settled: set[int] = set() if schema.schema_id is None else {schema.schema_id}
        #: What was applied in this process, for the materialization's metadata.
        self.applied: list[dict[str, object]] = []

    @property
    def follows(self) -> bool:
        """Only a subject's columns evolve; a written ``schema:`` stays as written."""
        return self.schema.schema_id is not None and self.schema.format.kind.framed

    def plan(self, writer_ids: Mapping[int, tuple[int, ...]]) -> list[Evolution]:
        """The evolutions the ids ask for, in id order (none when every id is settled).

        Raises :class:`IncompatibleSchemaChange` for a writer schema the tables cannot follow,
        ``RegistryUnavailableError`` when the registry cannot answer (transient). Ids the
        registry does not know, or of another format, are left to the decoder's verdicts.
        """
        if not self.follows:
            return []
        registry = self.schema.format.registry
        assert registry is not None
        schemas = schemas_for(registry)
        kind = self.schema.format.kind
        schema, out = self.schema, []
        for schema_id in sorted(set(writer_ids) - self._settled):
            writer = schemas.get(schema_id)
            if writer is None or writer.schema_type != kind.schema_type:
                continue
            try:
                columns = writer_columns(writer, writer_ids[schema_id])
            except SchemaError as exc:
                raise IncompatibleSchemaChange(
                    f"writer schema id {schema_id} has no columns both tables can hold "
                    f"(the table's are from schema id {schema.schema_id}): {exc}",
                    table_id=schema.schema_id,
                    writer_id=schema_id,
                ) from None
            evolution = plan_evolution(schema, columns, writer_id=schema_id)
            if not evolution.empty:
                out.append(evolution)
                schema = evolution.apply(schema)
        return out

    def adopt(self, evolution: Evolution) -> None:
        """``evolution`` is applied to the table: write with the evolved schema from now on."""
        self.schema = evolution.apply(self.schema)
        self._settled.add(evolution.writer_id)
        self.applied.append(
            {**evolution.describe(), "at": datetime.now(UTC).isoformat(timespec="seconds")}
        )

    def settle(self, writer_ids: Mapping[int, tuple[int, ...]]) -> None:
        """Every id of a range whose evolutions were adopted needs nothing more."""
        if self.follows:
            self._settled.update(writer_ids)


# ---- the loop ----------------------------------------------------------------------------------


class PositionLogChanged(LogChanged, KafkaReadError):
    """The keeper's position is not from the log Kafka holds now; nothing was read or written."""


class ClickHousePartitionSync:
    """Moves one topic-partition into one table, exactly once, as one writer with one lease."""

    def __init__(
        self,
        spec: ClickHouseTableSpec,
        kafka: KafkaSettings,
        store: StateStore,
        sink: ClickHouseSink,
        dead_letters: DeadLetterWriter,
        *,
        writer: str | None = None,
        fault: FaultHook = no_fault,
        cluster: str | None = None,
    ) -> None:
        self.spec = spec
        #: Alias of the cluster ``kafka`` reaches, for a pipeline with several (MM2 failover).
        self.cluster = cluster
        # The same topic name holds other records on each cluster: tokens must differ too.
        self.token_name = spec.pipeline if cluster is None else f"{spec.pipeline}@{cluster}"
        self.kafka = kafka
        self.store = store
        self.sink = sink
        self.dead_letters = dead_letters
        self.writer = writer or default_writer_id()
        self.fault = fault
        #: The Kafka consumer of a :meth:`reading` session, while one is open.
        self._consumer: Any = None
        #: Kafka's answers: asked per use, or for all partitions of a reading session at once.
        self._facts = TopicFacts(kafka)
        self.follower = SchemaFollower(spec.schema)
        if spec.json_parser == "native" and self._native_plan() is None:
            raise ValueError(
                f"pipeline {spec.pipeline!r}: clickhouse.json_parser is 'native', but ClickHouse "
                "parses JSON itself only into chDB and for columns of Int8..Int64, UInt8..UInt64, "
                "Float64, Bool and String (also LowCardinality or Nullable): use 'auto' or 'arrow'"
            )

    # ------------------------------------------------------------------------------- entry points
    def run(self, tp: TopicPartition, until: int | None = None) -> SyncReport:
        """Catch ``tp`` up to ``until`` (default: its last stable offset, fixed now)."""
        key = KeeperKey.of(self.spec.pipeline, self.spec.sink, tp, self.cluster)
        lease = self.store.acquire(key, writer=self.writer)
        state = sink_state(lease.record)
        tid = self._same_topic(tp, lease.record)
        log_end = self._log_end(tp, state)
        target = until if until is not None else log_end
        reread = skipped = 0
        mark, stored_end = lease.record.mark, lease.record.range_end
        if mark is not None and mark.pending:
            # A switch moved the position here: skip the copies of what was already written.
            assert stored_end is not None
            at, found, reread, skipped = locate_copy(self.kafka, tp, stored_end, mark, target)
            located = None if found.pending else found
            self.store.write(lease, at, at, Phase.AFTER.value, topic_id=tid, mark=located)
            state = sink_state(lease.record)
        if state is None and self.spec.reset == "latest":
            # Pin where the partition starts: without a stored position every later run would
            # start at the then-latest offset and skip the records produced in between.
            self.store.write(lease, target, target, Phase.AFTER.value, topic_id=tid)
            state = sink_state(lease.record)
        start = self._next_start(tp, state, target)
        report = SyncReport(
            tp=tp,
            epoch=lease.epoch,
            start=start,
            target_end=target,
            end=start,
            cluster=self.cluster,
            reread=reread,
            skipped=skipped,
        )
        log.info(
            "%s: took partition at epoch %d; stored %s; catching up to offset %d",
            tp,
            lease.epoch,
            state or "nothing",
            target,
        )
        # One consumer for the run's batches (the reading session's, if one is open): the next
        # batch continues from what it fetched.
        reader = (
            range_consumer(self.kafka) if self._consumer is None else nullcontext(self._consumer)
        )
        with reader as consumer:
            while True:
                state = sink_state(lease.record)
                if state is not None and state.phase is Phase.BEFORE:
                    # Recover first: re-read exactly the range that was in flight.
                    wanted, max_bytes = state.range, None
                else:
                    begin = self._next_start(tp, state, target)
                    if begin >= target:
                        break
                    wanted = OffsetRange(begin, min(target, begin + self.spec.max_records))
                    max_bytes = self.spec.max_bytes
                batch = read_range(self.kafka, tp, wanted, max_bytes=max_bytes, consumer=consumer)
                report.batches.append(self._process(lease, state, batch, tid))
                report.end = batch.range.end
        final = sink_state(lease.record)
        report.end = final.range.end if final else report.end
        log.info(
            "%s: done at offset %d (%d records read, %d rows sent, %d dead letters)",
            tp,
            report.end,
            report.records_read,
            report.rows_sent,
            report.dead_letters,
        )
        return report

    @contextmanager
    def reading(self, partitions: Sequence[TopicPartition] = ()) -> Iterator[None]:
        """Runs inside share one Kafka consumer (a run of several partitions opens one), and
        Kafka's answers for ``partitions`` (topic ids, ends, starts) are asked for all at once
        and kept a while (``SESSION_FACTS_*``, ``adapters.kafka``)."""
        with range_consumer(self.kafka, {tp.topic for tp in partitions}) as consumer:
            self._consumer = consumer
            age = max(SESSION_FACTS_MAX_AGE_S, len(partitions) * SESSION_FACTS_S_PER_PARTITION)
            self._facts = TopicFacts(self.kafka, max_age_s=age)
            self._facts.want(partitions)
            try:
                yield
            finally:
                self._consumer = None
                self._facts = TopicFacts(self.kafka)

    # ------------------------------------------------------------------------------- internals
    def _same_topic(self, tp: TopicPartition, record: KeeperRecord | None) -> str:
        """Kafka's id of ``tp.topic``, refusing a position read from another topic of that name
        (``core.positions.check_same_log``); a record stored before ids were kept has none and
        gets one with its next write."""
        tid = self._facts.topic_id(tp.topic)
        stored = record.topic_id if record is not None else None
        if stored is not None and stored != tid:  # refuse on a fresh answer only
            tid = self._facts.info(tp.topic, fresh=True).topic_id
        check_same_log(
            str(tp), topic=tp.topic, stored_topic_id=stored, topic_id=tid, error=PositionLogChanged
        )
        return tid

    def _log_end(self, tp: TopicPartition, state: SinkState | None) -> int:
        """Kafka's last stable offset of ``tp``, refusing a log that is not the stored state's
        (a partition gone, a log ending before it: ``core.positions.check_same_log``)."""
        end = self._facts.end(tp)
        if end is None or (state is not None and state.range.end > end):
            end = self._facts.end(tp, fresh=True)  # refuse on a fresh answer only
        check_same_log(
            str(tp),
            topic=tp.topic,
            stored_partitions=[tp.partition],
            present=() if end is None else (tp.partition,),
            position=state.range.end if state is not None else None,
            log_end=end,
            error=PositionLogChanged,
        )
        assert end is not None  # partition-gone refused above
        return end

    def _next_start(self, tp: TopicPartition, state: SinkState | None, target: int) -> int:
        """``core.positions.start_offset``, asking Kafka for the log start only if needed."""
        log_start = None
        if needs_log_start(state, self.spec.reset):
            log_start = self._facts.start(tp)
            if log_start is None:
                raise KafkaReadError(f"{tp}: topic {tp.topic!r} has no such partition now")
        return start_offset(state, self.spec.reset, end=target, log_start=log_start)

    def _process(
        self, lease: Lease, state: SinkState | None, batch: KafkaBatch, tid: str
    ) -> BatchReport:
        began = time.monotonic()
        tp = batch.tp
        decision = decide(state, batch.range, tp)
        if decision.error is not None:
            raise OffsetRegressionError(decision.error)
        report = BatchReport(
            case=decision.label,
            batch=batch.range,
            steps=list(decision.steps),
            skipped=list(decision.skipped),
            cropped=decision.cropped,
            records_read=len(batch),
        )
        log.info(
            "%s: batch %s against %s -> %s; steps %s, skipped %s%s%s",
            tp,
            decision.batch,
            state or "no state",
            decision.label,
            [str(s) for s in decision.steps],
            [str(s) for s in decision.skipped],
            f", cropped {decision.cropped}" if decision.cropped else "",
            f", unconfirmed {decision.unconfirmed}" if decision.unconfirmed else "",
        )
        if decision.dead_letter is not None:
            message = (
                f"range {decision.dead_letter} is part of {state} which cannot be re-sent "
                "identically"
            )
            report.dead_letters += self._send_dead(
                batch.tp,
                (batch.offsets, batch.keys, batch.values),
                [
                    (i, ErrorClass.UNRECOVERABLE_REPLAY, message)
                    for i in self._slice(batch, decision.dead_letter)
                ],
            )
        for step in decision.steps:
            self.fault("before_keeper_before")
            self.store.write(lease, step.start, step.end, Phase.BEFORE.value, topic_id=tid)
            self.fault("after_keeper_before")
            sent, dead = self.insert_rows(batch, step)
            report.rows_sent += sent
            report.dead_letters += dead
            self.fault("after_insert")
            self.store.write(
                lease,
                step.start,
                step.end,
                Phase.AFTER.value,
                topic_id=tid,
                mark=self._mark(batch, step),
            )
            self.fault("after_keeper_after")
            log.info("%s: %s written (%d rows, %d dead letters)", tp, step, sent, dead)
        report.seconds = time.monotonic() - began
        return report

    def _mark(self, batch: KafkaBatch, step: OffsetRange) -> Mark | None:
        """The last record of ``step`` by identity (None for a step of markers only: keep)."""
        rows = self._slice(batch, step)
        if not rows:
            return None
        last = rows.stop - 1
        return Mark.of_record(
            batch.fingerprint(last), batch.offsets[last], batch.timestamps_ms[last]
        )

    def _slice(self, batch: KafkaBatch, part: OffsetRange) -> range:
        """Positions in ``batch`` of the records inside ``part`` (offsets are sorted)."""
        lo = bisect.bisect_left(batch.offsets, part.start)
        hi = bisect.bisect_left(batch.offsets, part.end, lo)
        return range(lo, hi)

    def _send_dead(
        self,
        tp: TopicPartition,
        records: tuple[Sequence[int], Sequence[bytes | None], Sequence[bytes | None]],
        verdicts: Iterable[tuple[int, str, str]],
    ) -> int:
        """Send the records (offsets, keys, values) at each verdict's index as dead letters."""
        offsets, keys, values = records
        letters = [
            DeadLetter(offsets[i], keys[i], values[i], cls, message) for i, cls, message in verdicts
        ]
        return self.dead_letters.send(tp, letters)

    def insert_rows(self, batch: KafkaBatch, step: OffsetRange) -> tuple[int, int]:
        """Insert the step's good records as one block under the step's token; DLQ the rest.
        Returns rows sent and dead letters. No keeper write: :meth:`_process` writes around it,
        and a replay (:class:`ClickHouseReplay`) calls it alone.

        The rows are a pure function of the step's bytes, so a retried step sends exactly the
        block it sent the first time. ClickHouse parses the JSON itself where it gives the
        reference's verdict, else Arrow decodes the chunk in bulk; when neither can vouch for every
        record, the per-record decoder judges the chunk and names the dead letters.
        """
        rows = self._slice(batch, step)
        lo, hi = rows.start, rows.stop
        token = dedup_token(self.token_name, batch.tp, step)
        offsets, keys = batch.offsets[lo:hi], batch.keys[lo:hi]
        values, stamps = batch.values[lo:hi], batch.timestamps_ms[lo:hi]
        dead = 0
        over = oversized_positions(keys, values, self.spec.max_record_bytes)
        if over:
            limit = self.spec.max_record_bytes
            dead += self._send_dead(
                batch.tp,
                (offsets, keys, values),
                [
                    (i, ErrorClass.OVERSIZED, oversized(keys[i], values[i], limit) or "")
                    for i in over
                ],
            )
            dropped = set(over)
            keep = [i for i in range(len(offsets)) if i not in dropped]
            offsets, keys = [offsets[i] for i in keep], [keys[i] for i in keep]
            values, stamps = [values[i] for i in keep], [stamps[i] for i in keep]
        self._follow_writers(values)
        sent = self._insert_native(batch.tp, offsets, values, stamps, token)
        if sent is not None:
            return sent, dead
        payload = decode_json_arrow(values, self.spec.schema)
        if payload is not None:
            table = add_source_columns(
                payload,
                self.spec.schema.source,
                batch.tp,
                offsets,
                stamps,
                self.row_topic(batch.tp.topic),
            )
            sent = self.sink.insert_chunk(self.spec.database, self.spec.table, table, token)
            return sent, dead
        decoded = decode_values(values, self.spec.schema)  # JSON, or framed via the registry
        if decoded.bad:
            dead += self._send_dead(
                batch.tp,
                (offsets, keys, values),
                [(b.index, b.error_class, b.message) for b in decoded.bad],
            )
        if not decoded.index:
            return 0, dead  # a range of markers, aborted or bad records: the position still moves
        src = self.spec.schema.source
        columns = dict(decoded.columns)
        columns[src.topic] = [self.row_topic(batch.tp.topic)] * len(decoded.index)
        columns[src.partition] = [batch.tp.partition] * len(decoded.index)
        columns[src.offset] = [offsets[i] for i in decoded.index]
        if src.timestamp is not None:
            columns[src.timestamp] = [
                datetime.fromtimestamp(stamps[i] / 1000, tz=UTC) for i in decoded.index
            ]
        sent = self.sink.insert_chunk(self.spec.database, self.spec.table, columns, token)
        return sent, dead

    def _native_plan(self) -> NativePlan | None:
        """How ClickHouse may parse the JSON itself: the table is in chDB (``file()`` reads the
        engine's own file system) and :func:`~eos_pipeline.core.decode.native_plan` vouches for
        the schema; None otherwise."""
        embedded = bool(getattr(self.sink, "embedded", False))
        return native_plan(self.spec.schema) if embedded else None

    def _insert_native(
        self,
        tp: TopicPartition,
        offsets: list[int],
        values: list[bytes | None],
        stamps: list[int],
        token: str,
    ) -> int | None:
        """The step's first choice: ClickHouse parses the JSON values itself. Rows sent, or
        None: ClickHouse may not parse this chunk, or refused a record (nothing was written
        then; the caller takes the Arrow path). The token and rows are those of the other
        paths, so a retry deduplicates against a block written by any of them."""
        plan = None if self.spec.json_parser == "arrow" else self._native_plan()
        if plan is None or not values:
            return None
        try:
            rows = NativeRows(
                self.spec.schema.source, self.row_topic(tp.topic), tp.partition, offsets, stamps
            )
            return self.sink.insert_json(
                self.spec.database, self.spec.table, plan, values, rows, dedup_token=token
            )
        except NativeRefused as ex:
            log.debug("%s: ClickHouse's JSON parser refused the chunk (%s); Arrow next", tp, ex)
            return None

    def _follow_writers(self, values: Sequence[bytes | None]) -> None:
        """Evolve the table for the step's newer writer schemas before its rows are written
        (:class:`SchemaFollower`); a kill after the ALTER leaves a table the retry accepts."""
        if not self.follower.follows:
            return
        ids = writer_ids(values, self.spec.schema.format.kind)
        for evolution in self.follower.plan(ids):
            self.sink.evolve_table(self.spec.database, self.spec.table, evolution)
            self.fault("after_alter")
            self.follower.adopt(evolution)
            self.spec = replace(self.spec, schema=self.follower.schema)
            log.info("%s.%s follows writer schema id %d: %s", self.spec.database,
                     self.spec.table, evolution.writer_id, evolution.describe())  # fmt: skip
        self.follower.settle(ids)

    def row_topic(self, topic: str) -> str:
        """The source topic rows read from ``topic`` store: with clusters, ``<cluster>:<topic>``
        (the same name holds other records on each cluster; the check tells them apart)."""
        return topic if self.cluster is None else row_topic(self.cluster, topic)


# ---- deliberate replays --------------------------------------------------------------------------


@dataclass
class ReplayReport:
    """What a replay did (run metadata and the command's printout)."""

    plan: ReplayPlan
    rows_deleted: int = 0
    records_read: int = 0
    rows_written: int = 0
    dead_letters: int = 0
    commits: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def metadata(self) -> dict[str, str | int | float]:
        out: dict[str, str | int | float] = {
            "replayed": f"{self.plan.tp} {self.plan.range}",
            "sink": self.plan.sink,
            "position (unchanged)": self.plan.position,
            "rows deleted": self.rows_deleted,
            "records read": self.records_read,
            "rows written": self.rows_written,
            "dead letters": self.dead_letters,
            "seconds": round(self.seconds, 3),
        }
        if self.commits:
            out["commits"] = ", ".join(self.commits)
        return out


class ClickHouseReplay:
    """A deliberate replay into ClickHouse: delete a range's rows, then insert the range again.

    The rule and its reasons are in :mod:`eos_pipeline.core.replay`. In order, each step safe
    to repeat:

    1. take the partition's lease (a higher epoch fences any other writer of the partition) and
       re-plan under it; record ``RUNNING [a, b)`` in the replay journal;
    2. write the replay marker to the dead-letter topic (earlier letters of the range stop
       counting for this sink; the letters of this replay are sent after it, naming the sink);
    3. delete the partition's rows with offsets in ``[a, b)`` (a synchronous mutation);
    4. per chunk: check the lease still holds (a compare-and-set of the unchanged keeper
       record), read the chunk from Kafka, insert its good rows under a replay token carrying
       the epoch;
    5. record ``DONE``.

    Killed anywhere, the journal stays ``RUNNING``; the same replay run again takes a new
    epoch, deletes the range again and re-inserts all of it under new tokens: nothing is lost
    or doubled. The sink's keeper position never moves.
    """

    def __init__(
        self,
        spec: ClickHouseTableSpec,
        kafka: KafkaSettings,
        store: KeeperStateStore,
        sink: ClickHouseSink,
        dlq_topic: str,
        *,
        writer: str | None = None,
        fault: FaultHook = no_fault,
    ) -> None:
        self.spec = spec
        self.kafka = kafka
        self.store = store
        self.sink = sink
        # Letters of a replay name their sink: they count for this sink's proof only.
        self.dead_letters = DeadLetterWriter(kafka, dlq_topic, spec.pipeline, sink=spec.sink)
        self.journal = ReplayJournal(store, spec.pipeline, spec.sink)
        self.writer = writer or default_writer_id()
        self.fault = fault

    def plan(self, tp: TopicPartition, start: int, end: int | None = None) -> ReplayPlan:
        """What :meth:`run` would do, from the stored state; writes nothing (the dry run)."""
        stored = self.store.read(self._key(tp))
        return self._plan(tp, start, end, sink_state(stored.record if stored else None))

    def run(self, plan: ReplayPlan) -> ReplayReport:
        began = time.monotonic()
        tp = plan.tp
        lease = self.store.acquire(self._key(tp), writer=self.writer)
        # The state may have moved since the dry run: plan again under the lease, same range.
        current = self._plan(tp, plan.range.start, plan.range.end, sink_state(lease.record))
        check_same_log(
            str(tp),
            topic=tp.topic,
            stored_topic_id=lease.record.topic_id,
            topic_id=topic_id(self.kafka, tp.topic),
            error=ReplayLogChanged,
        )
        report = ReplayReport(current)
        _, version = self.journal.read(tp)
        version = self.journal.write(tp, JournalEntry(current.range, RUNNING, lease.epoch), version)
        log.info("%s: replay of %s started at epoch %d", tp, current.range, lease.epoch)
        self.dead_letters.send_marker(tp, self.spec.sink, current.range)
        self.fault("replay_after_marker")
        report.rows_deleted = self.sink.delete_offsets(
            self.spec.database,
            self.spec.table,
            tp.topic,
            tp.partition,
            current.range,
            source=self.spec.schema.source,
        )
        self.fault("replay_after_delete")
        inserter = ClickHousePartitionSync(
            self.spec, self.kafka, self.store, self.sink, self.dead_letters, writer=self.writer
        )
        inserter.token_name = replay_token_name(inserter.token_name, lease.epoch)
        with range_consumer(self.kafka) as consumer:
            for chunk in current.chunks:
                self._hold(lease)
                batch = read_range(self.kafka, tp, chunk, consumer=consumer)
                sent, dead = inserter.insert_rows(batch, chunk)
                report.records_read += len(batch)
                report.rows_written += sent
                report.dead_letters += dead
                self.fault("replay_after_insert")
        self._hold(lease)
        self.journal.write(tp, JournalEntry(current.range, DONE, lease.epoch), version)
        report.seconds = time.monotonic() - began
        log.info("%s: replay of %s done: %s", tp, current.range, report.metadata())
        return report

    def _key(self, tp: TopicPartition) -> KeeperKey:
        return KeeperKey.of(self.spec.pipeline, self.spec.sink, tp)

    def _plan(
        self, tp: TopicPartition, start: int, end: int | None, state: SinkState | None
    ) -> ReplayPlan:
        pending, _ = self.journal.read(tp)
        return plan_replay(
            self.spec.pipeline,
            self.spec.sink,
            tp,
            start=start,
            end=end,
            state=state,
            log_start=start_offsets(self.kafka, tp.topic)[tp.partition],
            max_records=self.spec.max_records,
            pending=pending,
        )

    def _hold(self, lease: Lease) -> None:
        """Raise ``FencedError`` unless ``lease`` still holds the partition.

        Re-writes the unchanged record by compare-and-set: a writer that took the partition
        since (a sensor run, another replay) bumped the epoch and makes this fail.
        """
        record = lease.record
        assert record.range_start is not None and record.range_end is not None
        self.store.write(lease, record.range_start, record.range_end, Phase.AFTER.value)


__all__ = [
    "BatchReport",
    "ClickHousePartitionSync",
    "ClickHouseReplay",
    "ClickHouseTableSpec",
    "PositionLogChanged",
    "ReplayReport",
    "SchemaFollower",
    "SyncReport",
    "case_summary",
    "locate_copy",
]
