"""MirrorMaker 2 through confluent-kafka: the offset syncs of a flow, and re-read windows.

MM2 writes flow ``S->T``'s syncs to ``mm2-offset-syncs.<T>.internal`` on S (by default; on T as
``mm2-offset-syncs.<S>.internal`` with ``location=target``), one compacted partition: so
:func:`read_offset_syncs` folds what is there into a :class:`SyncHistory` and continues from
where it stopped. :func:`find_resume_point` reads a window with all MM2 copies (key, value,
timestamp, headers) and finds the exact position after the match.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from eos_pipeline.adapters.kafka import (
    RANGE_FETCH_WAIT_MS,
    KafkaReadError,
    KafkaSettings,
    admin_client,
)
from eos_pipeline.core.failover import (
    DEFAULT_POLICY,
    Flow,
    MirroredRecord,
    ReplicationPolicy,
    ResumePoint,
    Route,
    SyncHistory,
    Window,
    decode_offset_sync,
    resume_after,
)
from eos_pipeline.core.keeper import Mark
from eos_pipeline.core.offsets import TopicPartition

log = logging.getLogger(__name__)

SYNCS_PARTITION = 0  # MM2 writes every sync of a flow to partition 0 of its syncs topic
#: How long one sequence of reads (a switch, a status) waits for a cluster's first answer before
#: it counts that cluster as down for the rest of the sequence (:meth:`MirrorReaders.unreachable`).
PROBE_TIMEOUT = 3.0


class MirrorReadError(KafkaReadError):
    """The offset syncs or a re-read window could not be read as asked."""


def _consumer(settings: KafkaSettings) -> Consumer:
    return Consumer(
        settings.config(
            **{
                # Assignment only, nothing is committed under this group.
                "group.id": "eos-pipeline-mirror-reader",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "error",
                "enable.partition.eof": True,
                # A fetch waiting for new data holds up the requests queued behind it on the
                # connection (metadata, watermarks) for up to this long: a reused consumer
                # (MirrorReaders) paid 0.35 s per lookup with the default 500 ms.
                "fetch.wait.max.ms": RANGE_FETCH_WAIT_MS,
            }
        )
    )


def _cluster_key(settings: KafkaSettings) -> str:
    return repr(sorted(settings.config().items()))


class MirrorReaders:
    """One reading consumer per cluster for a sequence of reads (a switch), closed together: a fresh
    consumer's bootstrap and metadata were two thirds of a profiled failback. Each read assigns
    its own partition to :meth:`get`'s consumer.
    """

    def __init__(self, probe_timeout: float = PROBE_TIMEOUT) -> None:
        self.probe_timeout = probe_timeout
        self._open: dict[str, Consumer] = {}
        self._admins: dict[str, AdminClient] = {}
        self._answered: dict[str, str | None] = {}

    def unreachable(self, settings: KafkaSettings) -> str | None:
        """Why the cluster gave no answer to one metadata request within ``probe_timeout``
        (None: it answered). Asked once per cluster and remembered for the whole sequence, so
        a dead cluster costs one short wait, not one long wait per read."""
        key = _cluster_key(settings)
        if key not in self._answered:
            try:
                self.get(settings).list_topics(timeout=self.probe_timeout)
                self._answered[key] = None
            except KafkaException as exc:
                self._answered[key] = (
                    f"Kafka at {settings.bootstrap_servers} did not answer within "
                    f"{self.probe_timeout:g} s ({exc.args[0] if exc.args else exc})"
                )
        return self._answered[key]

    def get(self, settings: KafkaSettings) -> Consumer:
        key = _cluster_key(settings)
        if key not in self._open:
            self._open[key] = _consumer(settings)
        return self._open[key]

    def admin(self, settings: KafkaSettings) -> AdminClient:
        """An admin client of the cluster, for the lookups of the same sequence."""
        key = _cluster_key(settings)
        if key not in self._admins:
            self._admins[key] = admin_client(settings)
        return self._admins[key]

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()
        self._admins.clear()

    def __enter__(self) -> MirrorReaders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def _borrowed(settings: KafkaSettings, consumer: Consumer | None) -> Iterator[Consumer]:
    """``consumer`` left open, or a consumer of this call only."""
    if consumer is not None:
        yield consumer
        return
    owned = _consumer(settings)
    try:
        yield owned
    finally:
        owned.close()


def _watermarks(consumer: Consumer, topic: str, partition: int, timeout: float) -> tuple[int, int]:
    meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None or partition not in meta.partitions:
        raise MirrorReadError(f"{topic}[{partition}] does not exist")
    low, high = consumer.get_watermark_offsets(
        KafkaTopicPartition(topic, partition), timeout=timeout, cached=False
    )
    return int(low), int(high)


def _consume(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, timeout: float
) -> list[Any]:
    """Every message of ``[start, end)`` (``end`` at most the last stable offset)."""
    messages: list[Any] = []
    if start >= end:
        return messages
    consumer.assign([KafkaTopicPartition(topic, partition, start)])
    deadline = time.monotonic() + timeout
    position = start
    while position < end:
        if time.monotonic() > deadline:
            raise MirrorReadError(
                f"{topic}[{partition}]: reading [{start}, {end}) stalled at {position} after "
                f"{timeout:.0f}s"
            )
        for msg in consumer.consume(num_messages=min(10_000, end - position), timeout=0.5):
            if msg.topic() != topic or msg.partition() != partition:
                continue  # left queued by an earlier read of a reused consumer
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    position = max(position, msg.offset())
                    continue
                raise MirrorReadError(f"{topic}[{partition}]: {err.str()}")
            if msg.offset() < position:
                continue  # the same: an earlier read of this partition
            if msg.offset() >= end:
                position = end
                break
            messages.append(msg)
            position = msg.offset() + 1
        if position < end:
            # Markers and compacted records leave holes the messages alone cannot show.
            position = max(
                position, consumer.position([KafkaTopicPartition(topic, partition)])[0].offset
            )
    consumer.unassign()  # no fetch left running for a reused consumer
    return messages


def read_offset_syncs(
    settings: KafkaSettings,
    flow: Flow,
    history: SyncHistory | None = None,
    *,
    location: str = "source",
    policy: ReplicationPolicy = DEFAULT_POLICY,
    timeout: float = 30.0,
    consumer: Consumer | None = None,
    written_at: dict[TopicPartition, int] | None = None,
) -> SyncHistory:
    """Fold the syncs of ``flow`` written since ``history.source_position`` into ``history`` (new
    if None) and return it, now at the topic's end; ``written_at`` gets when MM2 wrote each
    partition's latest sync (ms). ``settings`` reach the cluster holding the syncs (by default
    the flow's source: while it is down, only what an earlier call kept).
    """
    history = history if history is not None else SyncHistory(flow)
    if history.flow != flow:
        raise MirrorReadError(f"a history of flow {history.flow} cannot take syncs of {flow}")
    topic = flow.offset_syncs_topic(location, policy)
    with _borrowed(settings, consumer) as consumer:
        try:
            low, high = _watermarks(consumer, topic, SYNCS_PARTITION, timeout)
        except MirrorReadError:
            raise MirrorReadError(
                f"offset-syncs topic {topic!r} of flow {flow} not found on "
                f"{settings.bootstrap_servers}: MM2 has not replicated anything on this flow yet, "
                f"or its offset-syncs.topic.location is not {location!r}"
            ) from None
        start = max(history.source_position, low)
        for msg in _consume(consumer, topic, SYNCS_PARTITION, start, high, timeout):
            sync = decode_offset_sync(msg.key(), msg.value())
            history.add(sync)
            if written_at is not None:
                written_at[sync.tp] = msg.timestamp()[1]
        history.source_position = max(history.source_position, high)
    return history


def _record(msg: Any) -> MirroredRecord:
    headers = tuple((name, value) for name, value in (msg.headers() or ()))
    return MirroredRecord(msg.offset(), msg.key(), msg.value(), msg.timestamp()[1], headers)


def read_window(
    settings: KafkaSettings,
    tp: TopicPartition,
    window: Window,
    *,
    timeout: float = 60.0,
    consumer: Consumer | None = None,
    admin: AdminClient | None = None,
) -> list[MirroredRecord]:
    """The committed records of ``tp`` in ``window`` (an open one to the stable end), from no
    earlier than the partition's first offset: what retention removed
    :func:`~eos_pipeline.core.failover.resume_after` reports as not found.
    """
    with _borrowed(settings, consumer) as consumer:
        low, _ = _watermarks(consumer, tp.topic, tp.partition, timeout)
        stable = _stable_end(settings, tp, timeout, admin)
        end = stable if window.end is None else min(window.end, stable)
        messages = _consume(consumer, tp.topic, tp.partition, max(window.start, low), end, timeout)
    return [_record(m) for m in messages]


def _stable_end(
    settings: KafkaSettings, tp: TopicPartition, timeout: float, admin: AdminClient | None = None
) -> int:
    """The last stable offset, through a client of its own (``admin``, dropped with its
    :class:`MirrorReaders`): a cached one would keep reconnecting to a cluster that went away.
    """
    admin = admin if admin is not None else admin_client(settings)
    future = admin.list_offsets(
        {KafkaTopicPartition(tp.topic, tp.partition): OffsetSpec.latest()},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=timeout,
    )
    [result] = future.values()
    return int(result.result().offset)


def first_offset(
    settings: KafkaSettings,
    tp: TopicPartition,
    timeout: float = 10.0,
    *,
    consumer: Consumer | None = None,
) -> int:
    """The partition's first offset still held (the floor of a translation onto it)."""
    with _borrowed(settings, consumer) as consumer:
        return _watermarks(consumer, tp.topic, tp.partition, timeout)[0]


def timestamps_kept(
    settings: KafkaSettings, topic: str, timeout: float = 10.0, admin: AdminClient | None = None
) -> bool:
    """Whether ``topic`` keeps producers' (and MM2's) timestamps: ``LogAppendTime`` restamps copies.
    A topic whose config cannot be read counts as not (the offset syncs alone bound then).
    """
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = admin if admin is not None else admin_client(settings)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
    except Exception as exc:  # any failure: do not rely on timestamps
        log.warning("%s: timestamp type unknown (%s); the offset syncs alone bound", topic, exc)
        return False
    entry = entries.get("message.timestamp.type")
    return entry is not None and entry.value == "CreateTime"


def offset_for_time(
    settings: KafkaSettings,
    tp: TopicPartition,
    timestamp_ms: int,
    timeout: float = 10.0,
    admin: AdminClient | None = None,
) -> int | None:
    """The earliest offset of ``tp`` whose timestamp is at or after ``timestamp_ms``; None when
    there is none (Kafka answers -1) or the lookup fails. Kafka counts transaction markers too
    (stamped when their transaction commits), so on a topic written in transactions (MM2's
    replicas) the offset can be a marker's, before the data record: still never after it."""
    admin = admin if admin is not None else admin_client(settings)
    spec = {KafkaTopicPartition(tp.topic, tp.partition): OffsetSpec.for_timestamp(timestamp_ms)}
    try:
        future = admin.list_offsets(
            spec, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout
        )
        [result] = future.values()
        offset = int(result.result().offset)
    except Exception as exc:  # the syncs still bound the window
        log.warning(
            "%s: no offset for time %d (%s); the offset syncs alone bound", tp, timestamp_ms, exc
        )
        return None
    return offset if offset >= 0 else None


class TimeFloors:
    """Per partition of one cluster, the first offset at a mark's timestamp (the time bound of
    :func:`~eos_pipeline.core.failover.read_start`); None where it must not be used."""

    def __init__(
        self, settings: KafkaSettings, timeout: float = 10.0, admin: AdminClient | None = None
    ) -> None:
        self.settings = settings
        self.timeout = timeout
        self.admin = admin
        self._kept: dict[str, bool] = {}

    def __call__(self, tp: TopicPartition, mark: Mark) -> int | None:
        if mark.timestamp_ms is None:
            return None
        if tp.topic not in self._kept:
            self._kept[tp.topic] = timestamps_kept(
                self.settings, tp.topic, self.timeout, self.admin
            )
        if not self._kept[tp.topic]:
            return None
        return offset_for_time(self.settings, tp, mark.timestamp_ms, self.timeout, self.admin)


def find_resume_point(
    target: KafkaSettings,
    route: Route,
    history: SyncHistory,
    partition: int,
    last_offset: int,
    fingerprint: str,
    *,
    timeout: float = 60.0,
) -> ResumePoint:
    """Exact next position on ``route.target`` after the last record the sink wrote
    (``last_offset``, ``fingerprint``, read from ``route.source``), or the core's
    :class:`~eos_pipeline.core.failover.ResumeError`; ``target`` reaches the cluster switched to.
    """
    tp = TopicPartition(route.target.topic, partition)
    floor = first_offset(target, tp, timeout)
    window = route.window(history, partition, last_offset, floor)
    records = read_window(target, tp, window, timeout=timeout)
    return resume_after(TopicPartition(route.target.topic, partition), fingerprint, records, window)


__all__ = [
    "PROBE_TIMEOUT",
    "MirrorReadError",
    "MirrorReaders",
    "TimeFloors",
    "find_resume_point",
    "first_offset",
    "offset_for_time",
    "read_offset_syncs",
    "read_window",
    "timestamps_kept",
]
