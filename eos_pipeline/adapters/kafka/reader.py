"""Exact offset-range reads by explicit assignment, in ``read_committed`` isolation."""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
import operator
import time
from collections.abc import Iterable, Iterator

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition

from eos_pipeline.adapters.kafka.settings import (
    RANGE_FETCH_WAIT_MS,
    KafkaBatch,
    KafkaReadError,
    KafkaSettings,
)
from eos_pipeline.core.offsets import OffsetRange, TopicPartition


def _consumer(settings: KafkaSettings) -> Consumer:
    return Consumer(
        settings.config(
            **{
                # A group id is required by librdkafka even for manual assignment; nothing is
                # ever committed under it.
                "group.id": "eos-pipeline-range-reader",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "error",
                "enable.partition.eof": True,
                "fetch.max.bytes": 64 * 1024 * 1024,
                "max.partition.fetch.bytes": 16 * 1024 * 1024,
                # A range never ends past the last stable offset, so the broker has every byte
                # asked for; it waits only at the range's end when that is a transaction's
                # commit marker (no record to return): 500 ms by default, per partition read.
                "fetch.wait.max.ms": RANGE_FETCH_WAIT_MS,
            }
        )
    )


@contextlib.contextmanager
def range_consumer(settings: KafkaSettings, topics: Iterable[str] = ()) -> Iterator[Consumer]:
    """One consumer for several :func:`read_range` calls (the batches of a run), then closed.

    A consumer costs a bootstrap connection and a fetch start-up per batch otherwise; reused,
    the next batch of the same partition continues from what was already fetched.

    ``topics``: the topics it will read, whose metadata it fetches first. Assigned a partition
    of a topic it knows nothing of, the consumer fetches the topic's metadata then, and the
    first ``consume()`` returns empty after its whole timeout: half a second per topic of a
    run (32 s of a run over 64 topics of 16 partitions).
    """
    consumer = _consumer(settings)
    for topic in sorted(set(topics)):
        with contextlib.suppress(KafkaException):  # then fetched on assignment, as before
            consumer.list_topics(topic, timeout=settings.request_timeout_s)
    try:
        yield consumer
    finally:
        consumer.close()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a batch is consumed.

    Every consumed message is a container object: with a large heap (Dagster, PySpark) the
    allocations trigger full collections that walk every long-lived object of the process, a
    third of the reading time in profiles. Messages hold no cycles, so reference counting frees
    them anyway; the collector resumes (if it was on) when the batch is read. The young
    generations are collected first: the previous batch's insert leaves cyclic garbage holding
    its buffers, which would otherwise live on through this read (+85 MB at 25,000 records).
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _position(consumer: Consumer, ktp: KafkaTopicPartition) -> int | None:
    """Where ``consumer`` continues in ``ktp`` without a new assignment, or None."""
    current = consumer.assignment()
    if len(current) != 1 or (current[0].topic, current[0].partition) != (ktp.topic, ktp.partition):
        return None
    return int(consumer.position([ktp])[0].offset)


def read_range(
    settings: KafkaSettings,
    tp: TopicPartition,
    wanted: OffsetRange,
    max_bytes: int | None = None,
    timeout: float = 60.0,
    *,
    consumer: Consumer | None = None,
) -> KafkaBatch:
    """Read exactly the committed records of ``tp`` in ``wanted``.

    The end must not lie beyond the partition's last stable offset (see :func:`end_offsets`).
    With ``max_bytes``, reading stops before the record that would exceed it and the returned
    batch's range ends there; because a committed range never changes, the same call returns
    the same cut every time. ``consumer`` (from :func:`range_consumer`) is reused and left
    open; it continues where it stopped when that is exactly ``wanted.start``, and is assigned
    to ``wanted.start`` otherwise. Without it, a consumer is made and closed for this call.
    """
    batch = KafkaBatch(tp=tp, range=wanted)
    if wanted.is_empty:
        return batch
    owned = consumer is None
    if consumer is None:
        consumer = _consumer(settings)
    ktp = KafkaTopicPartition(tp.topic, tp.partition, wanted.start)
    try:
        if owned or _position(consumer, ktp) != wanted.start:
            consumer.assign([ktp])
        with _gc_paused():
            end = _consume_into(batch, consumer, ktp, wanted, max_bytes, timeout)
    finally:
        if owned:
            consumer.close()
    batch.range = OffsetRange(wanted.start, end)
    return batch


def _consume_into(
    batch: KafkaBatch,
    consumer: Consumer,
    ktp: KafkaTopicPartition,
    wanted: OffsetRange,
    max_bytes: int | None,
    timeout: float,
) -> int:
    """The read loop of :func:`read_range`; returns where the batch ends.

    The per-message work is the CPU floor of the whole sink: a list of messages without an
    error (all of them, while a range is read) is taken apart column by column with ``map``
    over the message methods, no Python statement per message; any other list goes through
    :func:`_take_each`, message by message.
    """
    tp = batch.tp
    deadline = time.monotonic() + timeout
    end = wanted.end
    position = wanted.start
    done = False
    while not done:
        # consume() waits until it has num_messages or the timeout passed: never ask for more
        # than the range can still hold, or every short batch costs the whole timeout.
        wanted_now = max(1, min(10_000, end - position))
        msgs = consumer.consume(num_messages=wanted_now, timeout=0.5)
        if msgs and not any(map(_error, msgs)):
            end, position, done = _take_all(batch, msgs, end, max_bytes)
        elif msgs:
            end, position, done = _take_each(batch, msgs, wanted, end, position, max_bytes)
        if not done and consumer.position([ktp])[0].offset >= end:
            done = True
        if not done and time.monotonic() > deadline:
            raise KafkaReadError(
                f"{tp}: reading {wanted} stalled after {timeout:.0f}s with "
                f"{len(batch)} records read; is the range beyond the partition's last "
                "stable offset (an open transaction upstream)?"
            )
    return end


_error = Message.error
_offset = Message.offset
_key = Message.key
_value = Message.value
_timestamp = Message.timestamp
_headers = Message.headers
_second = operator.itemgetter(1)


def _take_all(
    batch: KafkaBatch, msgs: list[Message], end: int, limit: int | None
) -> tuple[int, int, bool]:
    """Append records from ``msgs`` (none of them an error) to ``batch``, in bulk; the same
    cut as :func:`_take_each`. Returns (end, position, done)."""
    offsets = list(map(_offset, msgs))
    position = offsets[-1] + 1
    done = False
    if offsets[-1] >= end - 1:  # the range ends in this list
        done = True
        cut = bisect.bisect_left(offsets, end)
        if cut < len(offsets):
            position = offsets[cut] + 1
            del msgs[cut:], offsets[cut:]
    values = list(map(_value, msgs))
    try:
        sizes = list(map(len, values))
    except TypeError:  # a tombstone counts 0 bytes
        sizes = [0 if v is None else len(v) for v in values]
    if limit is not None and batch.value_bytes + sum(sizes) > limit:
        # Cut before the first record that would pass the limit (the bytes held after each
        # record only grow); the first record of a batch is always taken, however large.
        held = list(itertools.accumulate(sizes, initial=batch.value_bytes))
        cut = max(bisect.bisect_right(held, limit) - 1, 0 if batch.offsets else 1)
        if cut < len(offsets):
            end, position, done = offsets[cut], offsets[cut] + 1, True
            del msgs[cut:], offsets[cut:], values[cut:], sizes[cut:]
    if not msgs:
        return end, position, done
    first = len(batch.offsets)
    batch.offsets.extend(offsets)
    batch.values.extend(values)
    batch.keys.extend(map(_key, msgs))
    batch.timestamps_ms.extend(map(_second, map(_timestamp, msgs)))
    headers = list(map(_headers, msgs))
    if any(headers):
        for i, found in enumerate(headers):
            if found:
                batch.headers[first + i] = tuple(found)
    batch.value_bytes += sum(sizes)
    return end, position, done


def _take_each(
    batch: KafkaBatch,
    msgs: list[Message],
    wanted: OffsetRange,
    end: int,
    position: int,
    limit: int | None,
) -> tuple[int, int, bool]:
    """Append records from ``msgs`` to ``batch`` one message at a time, handling errors and
    the end of the partition. Returns (end, position, done)."""
    tp = batch.tp
    done = False
    offsets = batch.offsets
    for msg in msgs:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                # Nothing more to read right now. If the log ends at or past our end,
                # the rest of the range held only markers or aborted records.
                done = msg.offset() >= end
                continue
            if err.code() == KafkaError._AUTO_OFFSET_RESET:
                raise KafkaReadError(
                    f"{tp}: offset {wanted.start} is no longer in the log (deleted by "
                    "retention, or the topic was recreated); refusing to skip ahead. "
                    f"Details: {err.str()}"
                )
            raise KafkaReadError(f"{tp}: error while reading {wanted}: {err.str()}")
        offset = msg.offset()
        position = offset + 1
        if offset >= end:
            done = True
            break
        value = msg.value()
        size = len(value) if value is not None else 0
        if limit is not None and offsets and batch.value_bytes + size > limit:
            end = offset
            done = True
            break
        offsets.append(offset)
        batch.keys.append(msg.key())
        batch.values.append(value)
        batch.timestamps_ms.append(msg.timestamp()[1])
        headers = msg.headers()
        if headers:
            batch.headers[len(offsets) - 1] = tuple(headers)
        batch.value_bytes += size
        if offset == end - 1:
            done = True
            break
    return end, position, done
