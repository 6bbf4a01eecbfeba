"""Read a partition's next batch from Kafka while the current one is inserted.

Only the Kafka read moves to a background thread: the exactly-once steps of a batch (keeper
``BEFORE``, the insert, keeper ``AFTER``) stay in the caller's thread and in their order, and a
batch is only ever processed after the one before it is done. The next range is guessed from the
current batch's end; the caller asks for the range its state machine decided, and a guess that
differs (a recovery, a crop) is waited for and dropped, then the range is read as before. Ranges
are fixed in advance (at most the run's target, below the last stable offset when the run
started), so a batch read ahead holds exactly what a read at its turn would hold.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from eos_pipeline.adapters.kafka import KafkaBatch, KafkaSettings, read_range
from eos_pipeline.core.offsets import OffsetRange, TopicPartition


class Prefetcher:
    """One read ahead at a time, on one thread, sharing the caller's consumer (the caller does
    not touch the consumer between :meth:`start` and :meth:`read`, and closes this before the
    consumer: ``contextlib.closing``)."""

    def __init__(
        self, kafka: KafkaSettings, tp: TopicPartition, consumer: Any, *, enabled: bool = True
    ) -> None:
        self.kafka = kafka
        self.tp = tp
        self.consumer = consumer
        self.enabled = enabled
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"eos-prefetch-{tp}")
        self._ahead: tuple[tuple[OffsetRange, int | None], Future[KafkaBatch]] | None = None
        #: Reads taken from the read-ahead, and guesses dropped (for tests and logs).
        self.used = 0
        self.dropped = 0

    def read(self, wanted: OffsetRange, max_bytes: int | None) -> KafkaBatch:
        """The batch of ``wanted``: the one read ahead if it was this range, else read now."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == (wanted, max_bytes):
            self.used += 1
            return ahead[1].result()  # a read error surfaces here, as a direct read's would
        if ahead is not None:
            self.dropped += 1
            _wait(ahead[1])
        return read_range(self.kafka, self.tp, wanted, max_bytes=max_bytes, consumer=self.consumer)

    def start(self, wanted: OffsetRange, max_bytes: int | None) -> None:
        """Begin reading ``wanted`` in the background (nothing if read-ahead is off)."""
        if not self.enabled or self._ahead is not None:
            return
        future = self._pool.submit(
            read_range, self.kafka, self.tp, wanted, max_bytes=max_bytes, consumer=self.consumer
        )
        self._ahead = ((wanted, max_bytes), future)

    def close(self) -> None:
        """Wait for a read still running (the consumer closes after this), drop its batch."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            _wait(ahead[1])
        self._pool.shutdown(wait=True)


def _wait(future: Future[KafkaBatch]) -> None:
    """Let a dropped read finish; its batch or error is not wanted."""
    with contextlib.suppress(Exception):  # nothing uses it
        future.result()
