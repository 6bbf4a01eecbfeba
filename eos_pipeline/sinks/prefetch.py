"""Read the next batch from Kafka while the current one is inserted.

Only Kafka reads move to a background thread: the exactly-once steps of a batch (keeper
``BEFORE``, the insert, keeper ``AFTER``) stay in the caller's thread and in their order, and a
batch is only ever processed after the one before it is done. The read ahead is a guess: the
next range of the same partition, or the first range of the partition a run takes next (guessed
from its keeper record and Kafka's end, read in the background too). The caller then asks for
the range its state machine decided; the read-ahead is used when it holds exactly that range, or
the start of it (a normal batch, not a recovery, whose end moved on since the guess: the batch is
then shorter, as a batch cut by the byte limit is). Any other guess is waited for and dropped,
and the range is read as before. Ranges are fixed when guessed (below the last stable offset at
that moment), so a batch read ahead holds exactly what a read at its turn would hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any

from eos_pipeline.adapters.kafka import KafkaBatch, KafkaSettings, range_consumer, read_range
from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.keeper_record import KeeperRecord
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.sinks.clickhouse_reports import ClickHouseTableSpec, state_of


@dataclass(frozen=True, slots=True)
class Wanted:
    """A range to read: ``max_bytes`` cuts it (``read_range``); ``exact``: a recovery, which
    must re-read exactly the stored range, never a prefix of it."""

    range: OffsetRange
    max_bytes: int | None
    exact: bool = False

    def served_by(self, ahead: Wanted) -> bool:
        """Whether a batch read for ``ahead`` is this read's batch (or a start of it)."""
        if ahead == self:
            return True
        return (
            not self.exact
            and not ahead.exact
            and ahead.max_bytes == self.max_bytes
            and ahead.range.start == self.range.start
            and ahead.range.end < self.range.end
        )


#: A guess of what a partition's run will read first, made when it is about to be read.
Guess = Callable[[], Wanted | None]


@contextmanager
def prefetcher(kafka: KafkaSettings, *, enabled: bool) -> Iterator[Prefetcher]:
    """A prefetcher on a consumer of its own, both closed at the end (the prefetcher first)."""
    with (
        range_consumer(kafka) as consumer,
        closing(Prefetcher(kafka, consumer, enabled=enabled)) as ahead,
    ):
        yield ahead


def successor(order: Sequence[TopicPartition], tp: TopicPartition) -> TopicPartition | None:
    """The partition after ``tp`` in ``order``, if any."""
    at = order.index(tp) if tp in order else -1
    return order[at + 1] if 0 <= at < len(order) - 1 else None


def batch_from(begin: int, target: int, max_records: int, max_bytes: int | None) -> Wanted:
    """The batch starting at ``begin`` of a run catching up to ``target``."""
    return Wanted(OffsetRange(begin, min(target, begin + max_records)), max_bytes)


def first_read(
    record: KeeperRecord | None,
    log_end: Callable[[], int | None],
    next_start: Callable[[SinkState | None, int], int],
    spec: ClickHouseTableSpec,
) -> Wanted | None:
    """What a partition's run will read first, from its keeper ``record`` and Kafka's end now
    (a guess: the run decides under its lease; a wrong guess is only dropped). None where the
    run reads nothing first or decides something else before reading."""
    if record is not None and record.mark is not None and record.mark.pending:
        return None  # a switch moved the position here: the run resolves that first
    state = state_of(record)
    if state is not None and state.phase is Phase.BEFORE:
        return Wanted(state.range, None, exact=True)
    if state is None and spec.reset == "latest":
        return None  # the run pins the start at the end: nothing to read
    target = log_end()
    if target is None or (state is not None and state.range.end > target):
        return None  # the run refuses this log
    begin = next_start(state, target)
    return batch_from(begin, target, spec.max_records, spec.max_bytes) if begin < target else None


class Prefetcher:
    """One read ahead at a time, on one thread, sharing the caller's consumer (the caller does
    not touch the consumer between :meth:`start` and :meth:`read`, and closes this before the
    consumer: ``contextlib.closing``)."""

    def __init__(self, kafka: KafkaSettings, consumer: Any, *, enabled: bool = True) -> None:
        self.kafka = kafka
        self.consumer = consumer
        self.enabled = enabled
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="eos-prefetch")
        self._ahead: tuple[TopicPartition, Future[tuple[Wanted, KafkaBatch] | None]] | None = None
        #: Reads taken from the read-ahead, and read-aheads dropped (for tests and logs).
        self.used = 0
        self.dropped = 0

    def read(self, tp: TopicPartition, wanted: Wanted) -> KafkaBatch:
        """The batch of ``wanted``: the one read ahead if it serves it, else read now."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            done = _outcome(ahead[1])
            if done is not None and ahead[0] == tp and wanted.served_by(done[0]):
                self.used += 1
                return done[1]
            self.dropped += 1
        return self._read(tp, wanted)

    def start(self, tp: TopicPartition, wanted: Wanted) -> None:
        """Begin reading ``wanted`` of ``tp`` in the background (nothing if read-ahead is off)."""
        self.guess(tp, lambda: wanted)

    def guess(self, tp: TopicPartition, guess: Guess) -> None:
        """Begin reading, in the background, what ``guess()`` (called there) says ``tp`` reads."""
        if not self.enabled or self._ahead is not None:
            return

        def job() -> tuple[Wanted, KafkaBatch] | None:
            wanted = guess()
            return None if wanted is None else (wanted, self._read(tp, wanted))

        self._ahead = (tp, self._pool.submit(job))

    def close(self) -> None:
        """Wait for a read still running (the consumer closes after this), drop its batch."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            _outcome(ahead[1])
        self._pool.shutdown(wait=True)

    def _read(self, tp: TopicPartition, wanted: Wanted) -> KafkaBatch:
        return read_range(
            self.kafka, tp, wanted.range, max_bytes=wanted.max_bytes, consumer=self.consumer
        )


def _outcome(
    future: Future[tuple[Wanted, KafkaBatch] | None],
) -> tuple[Wanted, KafkaBatch] | None:
    """What a read-ahead got; None when it failed: the caller then reads the range itself, and
    a lasting fault surfaces there, as a direct read's would."""
    try:
        return future.result()
    except Exception:  # read again in the caller's thread
        return None
