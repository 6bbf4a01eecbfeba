"""Kafka through confluent-kafka: settings, admin, offsets, exact offset-range reads, producing.

Reads are by explicit assignment, never by consumer-group subscription: the pipeline keeps its
positions in its sinks (the keeper, the Hudi commit), so Kafka's committed group offsets play no
part and are never written. Consumers run in ``read_committed`` isolation so that records of
aborted transactions are never delivered, and with ``auto.offset.reset=error`` so that a range
whose start was deleted by retention fails loudly instead of silently jumping ahead.

Facts for many topics are asked at once (one DescribeTopics, one ListOffsets per cluster), never
per partition, and :class:`TopicFacts` keeps them ``max_age_s`` for a run. A few seconds old is
safe: an end offset is a run's *target*, and a caller that would *refuse* on an old answer (a log
that seems to end before the stored position, a missing partition) asks again with
``fresh=True`` first. Secrets in the settings are kept out of logs.

Errors are raised as the kind the adapter knows where it meets the cause (``core.errors``; what
the sensors do after a failed run follows from the kind): :class:`KafkaUnavailable` (no answer in
time), :class:`KafkaRefused` (credentials, authorization), :class:`TopicMissingError`,
:class:`ReadStalled`, :class:`OffsetsDeleted`; an error of Kafka's own is told by its code
(:func:`kafka_error`). The base :class:`KafkaReadError` is a failure of no known kind.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
import operator
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from eos_pipeline.core.errors import (
    Fault,
    LogChanged,
    NeedsPerson,
    PipelineError,
    Transient,
    fault_of_kafka_code,
)
from eos_pipeline.core.failover import record_fingerprint
from eos_pipeline.core.offsets import OffsetRange, TopicPartition


class KafkaReadError(PipelineError, RuntimeError):
    """A Kafka request or an offset range read failed; raised as is only when no kind is known
    (then retried a bounded number of times), else as one of its kinds below."""

    code = "kafka"


class KafkaUnavailable(Transient, KafkaReadError):
    """The cluster did not answer in time (down, unreachable, no leader yet): ask again later."""

    code = "kafka-unavailable"


class KafkaRefused(NeedsPerson, KafkaReadError):
    """The cluster answered no: credentials, authorization, or an error code no retry fixes."""

    code = "kafka-refused"


class TopicMissingError(NeedsPerson, KafkaReadError):
    """The cluster answered: this topic does not exist there (or may not be described). Kept
    apart from a cluster that did not answer, which callers must never read as "no topic"."""

    code = "topic-missing"


class ReadStalled(Transient, KafkaReadError):
    """A range's records did not all arrive in time (a slow broker, an open transaction)."""

    code = "read-stalled"


class OffsetsDeleted(LogChanged, KafkaReadError):
    """The range's start is no longer in the log (retention, or a recreated topic): reading on
    would skip records."""


def kafka_error(message: str, *errors: KafkaError) -> KafkaReadError:
    """The error saying ``message`` about Kafka's ``errors``, of the kind their codes say
    (``core.errors.fault_of_kafka_code``; a code for a person wins over a transient one)."""
    faults = {fault_of_kafka_code(error.name()) for error in errors}
    if Fault.NEEDS_PERSON in faults:
        return KafkaRefused(message)
    if Fault.TRANSIENT in faults:
        return KafkaUnavailable(message)
    return KafkaReadError(message)


@dataclass(frozen=True)
class KafkaSettings:
    """Connection settings shared by admin, consumer and producer clients; ``client_config`` goes to
    librdkafka as is (``security.protocol``, ``sasl.*``, ``ssl.*``): how SASL/SSL is reached.
    """

    bootstrap_servers: str
    client_config: Mapping[str, Any] = field(default_factory=dict)
    #: Seconds a metadata or offsets request waits for an answer before the cluster counts as
    #: unreachable: what a sensor tick or a run waits out while a broker is down.
    request_timeout_s: float = 10.0

    def timeout(self, given: float | None = None) -> float:
        return self.request_timeout_s if given is None else given

    def config(self, **extra: Any) -> dict[str, Any]:
        # The client's refusals (a wrong password, a TLS mismatch) reach only its error
        # callback, while requests just time out: remember them so a timeout can name them.
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "error_cb": self._remember_refusal,
            **self.client_config,
            **extra,
        }

    def _key(self) -> tuple[str, str]:
        return self.bootstrap_servers, str(self.client_config.get("sasl.username", ""))

    def _remember_refusal(self, error: KafkaError) -> None:
        if error.code() in _REFUSALS:
            _LAST_REFUSAL[self._key()] = error.str()

    def refused(self, what: str, client: Any = None) -> KafkaReadError | None:
        """The cluster's refusal of this client's credentials, if it refused them (what to
        fix); None when it did not (``client``, whose request went unanswered, is polled once
        first: librdkafka hands its errors to the callback only from a poll)."""
        if client is not None:
            client.poll(0)
        refusal = _LAST_REFUSAL.get(self._key())
        if not refusal:
            return None
        return KafkaRefused(
            f"{what}: Kafka at {self.bootstrap_servers} refused this client: {refusal}. "
            "Fix the pipeline's kafka.client settings (sasl.username / sasl.password, "
            "security.protocol, ssl.ca.location); the run read and wrote nothing."
        )

    def __repr__(self) -> str:
        # The dataclass repr would print sasl.password & co. into logs, tracebacks and metadata.
        shown = {k: "***" if is_secret_setting(k) else v for k, v in self.client_config.items()}
        return f"KafkaSettings(bootstrap_servers={self.bootstrap_servers!r}, client_config={shown})"


#: ``fetch.wait.max.ms`` (ms) of consumers of known offsets: librdkafka's 500 ms is paid whenever
#: the broker has nothing at once (a range ending on a commit marker, a reused consumer's
#: metadata lookups); ranges already in the log lose nothing by an early answer.
RANGE_FETCH_WAIT_MS = 10

#: librdkafka errors that mean "the cluster will not talk to this client as configured".
_REFUSALS = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})
#: The newest such error per (bootstrap servers, SASL user), for :meth:`KafkaSettings.refused`.
_LAST_REFUSAL: dict[tuple[str, str], str] = {}


def is_secret_setting(name: str) -> bool:
    """True for client settings whose value is a secret (``sasl.password``, ``ssl.key.pem``...)."""
    secret = re.search(r"password|secret|jaas|token|\.pem$|key$|credentials", name, re.I)
    return bool(secret) and not name.endswith(".location")


@dataclass
class KafkaBatch:
    """The records of one topic-partition in ``range``, column by column; ``range`` may be wider
    than the offsets present (transaction markers, aborted records, compaction) or hold none.
    """

    tp: TopicPartition
    range: OffsetRange
    offsets: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    #: Headers by position in the batch, only for records that have any (most have none).
    headers: dict[int, tuple[tuple[str, bytes | None], ...]] = field(default_factory=dict)
    value_bytes: int = 0

    def fingerprint(self, index: int) -> str:
        """The record identity MirrorMaker 2 preserves (``core.failover.record_fingerprint``)."""
        return record_fingerprint(
            self.keys[index],
            self.values[index],
            self.timestamps_ms[index],
            self.headers.get(index, ()),
        )

    def __len__(self) -> int:
        return len(self.offsets)


def admin_client(settings: KafkaSettings) -> AdminClient:
    """A new admin client (the caller keeps it alive while its futures are pending)."""
    return AdminClient(settings.config())


_SHARED_ADMINS: dict[tuple[int, str, tuple[tuple[str, str], ...]], AdminClient] = {}
_SHARED_ADMINS_LOCK = threading.Lock()
_MAX_SHARED_ADMINS = 8


def shared_admin(settings: KafkaSettings) -> AdminClient:
    """One admin client per process and connection settings (a new one costs ~30 ms of bootstrap
    per lookup; librdkafka's admin client is thread-safe). Callers hold the client until their
    futures resolve, so one dropped from this small cache dies only when idle. The process id is
    in the key: a client's threads do not survive a fork.
    """
    key = (
        os.getpid(),
        settings.bootstrap_servers,
        tuple(sorted((str(k), repr(v)) for k, v in settings.client_config.items())),
    )
    admin = _SHARED_ADMINS.get(key)
    if admin is None:
        with _SHARED_ADMINS_LOCK:
            admin = _SHARED_ADMINS.get(key)
            if admin is None:
                admin = _SHARED_ADMINS[key] = admin_client(settings)
                while len(_SHARED_ADMINS) > _MAX_SHARED_ADMINS:
                    _SHARED_ADMINS.pop(next(iter(_SHARED_ADMINS)))
    return admin


#: Tries of :func:`create_topic` when the cluster does not answer in time (creating is idempotent).
_CREATE_TRIES = 3


def create_topic(
    settings: KafkaSettings,
    topic: str,
    partitions: int,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create ``topic``; an existing one is accepted as it is. A request unanswered in ``timeout``
    (a busy broker, a loaded machine) is sent again, up to three times; other errors are raised.
    """
    new = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
    for attempt in range(1, _CREATE_TRIES + 1):
        admin = admin_client(settings)  # keep a reference: the futures die with their client
        futures = admin.create_topics([new], operation_timeout=timeout)
        try:
            # The broker answers by operation_timeout at the latest: wait a little longer.
            futures[topic].result(timeout + min(5.0, timeout))
            return
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if not error.retriable() or attempt == _CREATE_TRIES:
                raise
        except FutureTimeout:
            if attempt == _CREATE_TRIES:
                raise KafkaUnavailable(
                    f"creating topic {topic!r} on {settings.bootstrap_servers}: no answer in "
                    f"{_CREATE_TRIES} tries of {timeout:g}s; is the cluster up?"
                ) from None


def unreachable(
    settings: KafkaSettings, what: str, timeout: float, exc: object, client: Any = None
) -> KafkaReadError:
    """The error of a request the cluster did not answer (:class:`KafkaUnavailable`): what, where,
    the cause and the fix. A definite answer keeps Kafka's own words and is of the kind its code
    says; a refusal of this client's credentials says what to fix (``KafkaSettings.refused``).
    """
    if isinstance(exc, KafkaException) and not is_down(exc):
        message = f"could not {what} on {settings.bootstrap_servers}: {exc}"
        return kafka_error(message, exc.args[0])
    refused = settings.refused(f"could not {what}", client)
    if refused is not None:
        return refused
    cause = f": {exc}" if str(exc) else ""
    return KafkaUnavailable(
        f"could not {what} on {settings.bootstrap_servers} within {timeout:g} s (unreachable or "
        f"timed out{cause}); is the broker up? Check kafka.bootstrap_servers, or start the "
        "local stack with `eos-pipeline stack up`"
    )


#: librdkafka's codes for a cluster that does not answer (some are not flagged retriable).
_DOWN = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT})


def is_down(exc: object) -> bool:
    """True when ``exc`` says the cluster did not answer (not a refusal of the request)."""
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(error, KafkaError):
        return True
    if error.code() in _REFUSED:  # Kafka flags an unknown topic retriable; it is an answer
        return False
    return error.retriable() or error.code() in _DOWN


#: Definite answers about one topic, whatever their retriable flag says.
_REFUSED = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.UNKNOWN_TOPIC_ID,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


def partition_count(settings: KafkaSettings, topic: str, timeout: float | None = None) -> int:
    timeout = settings.timeout(timeout)
    admin = shared_admin(settings)
    try:
        info = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if info is not None and info.error is not None and is_down(KafkaException(info.error)):
            raise KafkaException(info.error)
    except KafkaException as exc:
        what = f"read the metadata of topic {topic!r}"
        raise unreachable(settings, what, timeout, exc, admin) from exc
    if info is None or info.error is not None:
        raise TopicMissingError(f"topic {topic!r} does not exist on {settings.bootstrap_servers}")
    return len(info.partitions)


def topic_id(settings: KafkaSettings, topic: str, timeout: float | None = None) -> str:
    """Kafka's id of the topic, new each time it is created: what tells a recreated topic from the
    old one once its log outgrew a stored position. Sinks store it and refuse another.
    """
    timeout = settings.timeout(timeout)
    admin = shared_admin(settings)
    future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic]
    try:
        description = future.result(timeout)
    except FutureTimeout:
        raise unreachable(settings, f"describe topic {topic!r}", timeout, "", admin) from None
    except KafkaException as exc:
        raise unreachable(settings, f"describe topic {topic!r}", timeout, exc, admin) from exc
    return str(description.topic_id)


def end_offsets(
    settings: KafkaSettings,
    topic: str,
    committed: bool = True,
    timeout: float | None = None,
) -> dict[int, int]:
    """Next offset to be written per partition, in one request for the whole topic; with
    ``committed`` the last stable offset (beyond it, open transactions whose fate is unknown).
    """
    wanted = {topic: range(partition_count(settings, topic, timeout))}
    return list_offsets(settings, wanted, committed=committed, timeout=timeout)[topic]


def start_offsets(
    settings: KafkaSettings, topic: str, timeout: float | None = None
) -> dict[int, int]:
    """Earliest offset still held per partition (retention or compaction may have moved it)."""
    wanted = {topic: range(partition_count(settings, topic, timeout))}
    return list_offsets(settings, wanted, latest=False, timeout=timeout)[topic]


@dataclass(frozen=True)
class TopicInfo:
    """What DescribeTopics says of one topic."""

    topic_id: str
    partitions: int


def describe(
    settings: KafkaSettings, topics: Iterable[str], timeout: float | None = None
) -> dict[str, TopicInfo | KafkaReadError]:
    """Partition count and id of each topic, in one request; a topic that cannot be described
    (missing, not authorized) maps to the error naming it."""
    timeout = settings.timeout(timeout)
    names = sorted(set(topics))
    if not names:
        return {}
    admin = shared_admin(settings)
    futures = admin.describe_topics(TopicCollection(names), request_timeout=timeout)
    found: dict[str, TopicInfo | KafkaReadError] = {}
    for name, future in futures.items():
        try:
            d = future.result(timeout)
        except FutureTimeout:
            raise unreachable(settings, f"describe topic {name!r}", timeout, "", admin) from None
        except KafkaException as exc:
            error = unreachable(settings, f"describe topic {name!r}", timeout, exc, admin)
            if is_down(exc):
                raise error from exc  # the cluster did not answer: a fact for the caller
            found[name] = TopicMissingError(  # a definite refusal of this topic alone
                f"topic {name!r} does not exist on {settings.bootstrap_servers} "
                f"(or cannot be described): {exc}"
            )
            continue
        found[name] = TopicInfo(str(d.topic_id), len(d.partitions))
    return found


def list_offsets(
    settings: KafkaSettings,
    wanted: Mapping[str, Iterable[int]],
    *,
    latest: bool = True,
    committed: bool = True,
    timeout: float | None = None,
) -> dict[str, dict[int, int]]:
    """Latest (last stable with ``committed``) or earliest offset of each wanted partition of
    each topic, in one ListOffsets request for all of them."""
    timeout = settings.timeout(timeout)
    spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
    request = {
        KafkaTopicPartition(topic, p): spec for topic, parts in wanted.items() for p in parts
    }
    found: dict[str, dict[int, int]] = {topic: {} for topic in wanted}
    if not request:
        return found
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    admin = shared_admin(settings)  # kept alive while the futures are pending
    futures = admin.list_offsets(request, isolation_level=level, request_timeout=timeout)
    for ktp, future in futures.items():
        what = f"list the offsets of {ktp.topic}[{ktp.partition}]"
        try:
            found[ktp.topic][ktp.partition] = future.result(timeout).offset
        except FutureTimeout:
            raise unreachable(settings, what, timeout, "", admin) from None
        except KafkaException as exc:
            raise unreachable(settings, what, timeout, exc, admin) from exc
    return found


def end_offsets_of(
    settings: KafkaSettings, topics: Iterable[str]
) -> dict[str, dict[int, int] | KafkaReadError]:
    """``end_offsets`` of many topics in two requests (DescribeTopics, then one ListOffsets);
    a topic that cannot be described maps to its error."""
    infos = describe(settings, topics)
    known = {t: range(i.partitions) for t, i in infos.items() if isinstance(i, TopicInfo)}
    ends = list_offsets(settings, known)
    return {t: ends[t] if t in known else info for t, info in infos.items()}  # type: ignore[misc]


def ends_and_starts(
    settings: KafkaSettings, topics: Iterable[str], timeout: float | None = None
) -> tuple[dict[str, dict[int, int] | KafkaReadError], dict[str, dict[int, int] | KafkaReadError]]:
    """End and start offsets of many topics in three requests (one description, two
    ListOffsets); a topic Kafka refuses maps to its error, Kafka not answering raises."""
    infos = describe(settings, topics, timeout)
    known = {t: range(i.partitions) for t, i in infos.items() if isinstance(i, TopicInfo)}
    ends = list_offsets(settings, known, timeout=timeout)
    lows = list_offsets(settings, known, latest=False, timeout=timeout)
    pick = lambda found: {t: found[t] if t in known else i for t, i in infos.items()}  # noqa: E731
    return pick(ends), pick(lows)


class TopicFacts:
    """Topic ids, partition counts, end and start offsets of the partitions a caller named, asked
    together and kept ``max_age_s`` (0: asked on every use, for one partition only). One lookup at
    a time, so a run's threads may share it.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        max_age_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.max_age_s = max_age_s
        self._clock = clock
        self._wanted: dict[str, set[int]] = {}
        self._infos: dict[str, tuple[float, TopicInfo | KafkaReadError]] = {}
        self._ends: dict[str, tuple[float, dict[int, int]]] = {}
        self._starts: dict[str, tuple[float, dict[int, int]]] = {}
        self._lock = threading.RLock()

    def want(self, tps: Iterable[TopicPartition]) -> None:
        """Name the partitions later lookups will be about (asked for together)."""
        with self._lock:
            for tp in tps:
                self._wanted.setdefault(tp.topic, set()).add(tp.partition)

    # ------------------------------------------------------------------------------ lookups
    def info(self, topic: str, *, fresh: bool = False) -> TopicInfo:
        """The topic's id and partition count; raises :class:`KafkaReadError` if missing."""
        with self._lock:
            got = self._fetch_infos(topic, fresh)
        if isinstance(got, KafkaReadError):
            raise got
        return got

    def topic_id(self, topic: str) -> str:
        return self.info(topic).topic_id

    def end(self, tp: TopicPartition, *, fresh: bool = False) -> int | None:
        """Last stable offset of ``tp``, or None when the topic has no such partition."""
        with self._lock:
            return self._offset(self._ends, tp, fresh, latest=True)

    def start(self, tp: TopicPartition, *, fresh: bool = False) -> int | None:
        """Earliest offset still held of ``tp``, or None when there is no such partition."""
        with self._lock:
            return self._offset(self._starts, tp, fresh, latest=False)

    # ------------------------------------------------------------------------------ plumbing
    def _live(self, at: float) -> bool:
        return self.max_age_s > 0 and self._clock() - at <= self.max_age_s

    def _due(self, table: Mapping[str, tuple[float, object]], topic: str) -> list[str]:
        """``topic`` and every wanted topic whose entry in ``table`` is missing or too old."""
        if self.max_age_s <= 0:
            return [topic]
        due = {t for t in self._wanted if t not in table or not self._live(table[t][0])}
        return sorted(due | {topic})

    def _fetch_infos(self, topic: str, fresh: bool) -> TopicInfo | KafkaReadError:
        held = self._infos.get(topic)
        if held is not None and not fresh and self._live(held[0]):
            return held[1]
        now = self._clock()
        for name, got in describe(self.settings, self._due(self._infos, topic)).items():
            self._infos[name] = (now, got)
        return self._infos[topic][1]

    def _offset(
        self,
        table: dict[str, tuple[float, dict[int, int]]],
        tp: TopicPartition,
        fresh: bool,
        *,
        latest: bool,
    ) -> int | None:
        held = table.get(tp.topic)
        if held is not None and not fresh and self._live(held[0]) and tp.partition in held[1]:
            return held[1][tp.partition]
        count = self.info(tp.topic, fresh=fresh).partitions
        if tp.partition >= count:
            return None
        if self.max_age_s > 0:
            self._wanted.setdefault(tp.topic, set()).add(tp.partition)
        wanted: dict[str, list[int]] = {}
        for topic in [tp.topic] if fresh else self._due(table, tp.topic):
            got = self._infos.get(topic, (0.0, None))[1]
            if not isinstance(got, TopicInfo):
                continue  # not described yet, or missing: asked for when it is named
            parts = self._wanted.get(topic, set()) if self.max_age_s > 0 else {tp.partition}
            wanted[topic] = sorted(p for p in parts if p < got.partitions)
        now = self._clock()
        found = list_offsets(self.settings, wanted, latest=latest)
        for topic, values in found.items():
            table[topic] = (now, values)
        return table[tp.topic][1].get(tp.partition)


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
    """One consumer for the :func:`read_range` calls of a run, then closed: a reused consumer saves
    a bootstrap and fetch start-up per batch and continues what it fetched. ``topics`` are fetched
    first: a consumer assigned a topic it knows nothing of spends its first ``consume()`` timeout
    on metadata (half a second per topic, 32 s over 64 topics).
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
    """No cyclic garbage collection while a batch is consumed: with a large heap (Dagster, PySpark)
    each message's allocation triggers full collections (a third of read time in profiles), and
    messages hold no cycles. The young generations are collected first, so the previous batch's
    cyclic garbage (its insert buffers, +85 MB at 25,000 records) does not live through this read.
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
    """Read exactly the committed records of ``tp`` in ``wanted`` (whose end is at most the last
    stable offset). ``max_bytes`` stops before the record that would exceed it; a committed range
    never changes, so the cut is the same every time. ``consumer`` (:func:`range_consumer`) is
    reused, left open, and re-assigned unless it stopped exactly at ``wanted.start``.
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
    """The read loop of :func:`read_range` (the sink's CPU floor), returning where the batch ends:
    an error-free list of messages is taken apart column by column with ``map``, no Python statement
    per message (:func:`_take_all`); any other list is split at its errors (:func:`_take_each`).
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
            raise ReadStalled(
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
    """Append records from ``msgs`` (none of them an error) to ``batch``, in bulk, up to the
    range's end and the byte limit. Returns (end, position, done)."""
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
    """Append records from ``msgs``, some of them errors, to ``batch``: each run of records by
    :func:`_take_all`, then the error after it (the end of the partition, or a failure).
    Returns (end, position, done)."""
    done = False
    records: list[Message] = []
    for msg in [*msgs, None]:
        err = None if msg is None else msg.error()
        if msg is not None and err is None:
            records.append(msg)
            continue
        if records:
            end, position, done = _take_all(batch, records, end, limit)
            records = []
            if done:
                break
        if err is None:
            break
        if err.code() == KafkaError._PARTITION_EOF:
            # Nothing more to read right now. If the log ends at or past our end,
            # the rest of the range held only markers or aborted records.
            done = msg.offset() >= end
            continue
        tp = batch.tp
        if err.code() == KafkaError._AUTO_OFFSET_RESET:
            raise OffsetsDeleted(
                f"{tp}: offset {wanted.start} is no longer in the log (deleted by "
                "retention, or the topic was recreated); refusing to skip ahead. "
                f"Details: {err.str()}",
                "retention",
            )
        raise kafka_error(f"{tp}: error while reading {wanted}: {err.str()}", err)
    return end, position, done


def idempotent_producer(settings: KafkaSettings, **extra: Any) -> Producer:
    """A producer whose retries never duplicate or reorder records within a partition."""
    return Producer(
        settings.config(
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "compression.type": "lz4",
                **extra,
            }
        )
    )


def produce_all(
    producer: Producer,
    topic: str,
    records: Iterable[tuple[int | None, bytes | None, bytes | None]],
    headers: list[tuple[str, bytes]] | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, int]]:
    """Send ``(partition, key, value)`` records and wait for all; return their (partition, offset).
    Any delivery failure raises: a caller never goes on believing a record was written.
    """

    def arguments() -> Iterator[dict[str, Any]]:
        for partition, key, value in records:
            kwargs: dict[str, Any] = {"key": key, "value": value}
            if partition is not None:
                kwargs["partition"] = partition
            if headers:
                kwargs["headers"] = headers
            yield kwargs

    delivered, remaining, failures = send_records(producer, topic, arguments(), timeout)
    if remaining or failures:
        raise kafka_error(
            f"producing to {topic!r} failed: {remaining} undelivered, errors: "
            f"{[error.str() for error in failures[:3]]}",
            *failures,
        )
    return delivered


def send_records(
    producer: Producer, topic: str, records: Iterable[Mapping[str, Any]], timeout: float
) -> tuple[list[tuple[int, int]], int, list[KafkaError]]:
    """Produce each record (``produce()``'s keyword arguments) and flush: the (partition, offset)
    of the delivered ones, how many are still unacknowledged, and the delivery errors."""
    delivered: list[tuple[int, int]] = []
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))

    for kwargs in records:
        while True:
            try:
                producer.produce(topic, on_delivery=on_delivery, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    return delivered, producer.flush(timeout), failures
