"""Topic admin and offsets: create topics, partition counts, topic ids, start and end offsets."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from eos_pipeline.adapters.kafka.settings import KafkaReadError, KafkaSettings, TopicMissingError


def admin_client(settings: KafkaSettings) -> AdminClient:
    """A new admin client (the caller keeps it alive while its futures are pending)."""
    return AdminClient(settings.config())


_SHARED_ADMINS: dict[tuple[int, str, tuple[tuple[str, str], ...]], AdminClient] = {}
_SHARED_ADMINS_LOCK = threading.Lock()
_MAX_SHARED_ADMINS = 8


def shared_admin(settings: KafkaSettings) -> AdminClient:
    """One admin client per process and connection settings, reused by every lookup.

    Building a client costs a bootstrap connection and metadata round trip (~30 ms), paid on
    every offset lookup before. librdkafka's admin client is thread-safe. Callers keep the
    returned client in a local variable until their futures are resolved, so a client dropped
    from this small cache (more than a few clusters in one process, e.g. a test session) is
    only destroyed once no future of it is pending. The process id is part of the key: a
    client's background threads do not survive a fork, so a forked child builds its own.
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
    """Create ``topic``; an existing topic with the same name is accepted as it is.

    A request that gets no answer in ``timeout`` (a broker busy re-registering after a pause,
    a loaded machine) is sent again, up to three times: a topic the first request did create
    is then accepted as existing. Other errors are raised at once.
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
                raise KafkaReadError(
                    f"creating topic {topic!r} on {settings.bootstrap_servers}: no answer in "
                    f"{_CREATE_TRIES} tries of {timeout:g}s; is the cluster up?"
                ) from None


def unreachable(
    settings: KafkaSettings, what: str, timeout: float, exc: object, client: Any = None
) -> KafkaReadError:
    """The error of a request the cluster did not answer: what, where, the cause and the fix
    (its words mark it transient for the retry rules, ``core.retries``). A definite refusal
    (an unknown topic, no authorization) keeps Kafka's own words, without "unreachable"; a
    cluster that refused this client's credentials says so and what to fix
    (``KafkaSettings.refused``)."""
    if isinstance(exc, KafkaException) and not is_down(exc):
        return KafkaReadError(f"could not {what} on {settings.bootstrap_servers}: {exc}")
    refused = settings.refused(f"could not {what}", client)
    if refused is not None:
        return refused
    cause = f": {exc}" if str(exc) else ""
    return KafkaReadError(
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
        meta = admin.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        what = f"read the metadata of topic {topic!r}"
        raise unreachable(settings, what, timeout, exc, admin) from exc
    info = meta.topics.get(topic)
    if info is not None and info.error is not None and is_down(KafkaException(info.error)):
        what = f"read the metadata of topic {topic!r}"
        raise unreachable(settings, what, timeout, KafkaException(info.error), admin)
    if info is None or info.error is not None:
        raise TopicMissingError(f"topic {topic!r} does not exist on {settings.bootstrap_servers}")
    return len(info.partitions)


def topic_id(settings: KafkaSettings, topic: str, timeout: float | None = None) -> str:
    """Kafka's id of the topic (a UUID, new each time a topic is created).

    Offsets alone cannot tell a topic from one deleted and recreated under the same name once
    the new log has grown past a stored position; the id can. Sinks store it next to their
    positions and refuse to continue on another id.
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
    """Next offset to be written per partition, in one request for the whole topic.

    With ``committed`` (the default) this is the last stable offset: the end of what a
    read_committed consumer can see. Offsets beyond it belong to open transactions and must not
    be part of a batch, since their fate is not known yet.
    """
    timeout = settings.timeout(timeout)
    admin = shared_admin(settings)
    count = partition_count(settings, topic, timeout)
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(
        {KafkaTopicPartition(topic, p): OffsetSpec.latest() for p in range(count)},
        isolation_level=level,
        request_timeout=timeout,
    )
    return _offsets(settings, f"list the end offsets of topic {topic!r}", futures, timeout)


def start_offsets(
    settings: KafkaSettings, topic: str, timeout: float | None = None
) -> dict[int, int]:
    """Earliest offset still held per partition (retention or compaction may have moved it)."""
    timeout = settings.timeout(timeout)
    admin = shared_admin(settings)
    count = partition_count(settings, topic, timeout)
    futures = admin.list_offsets(
        {KafkaTopicPartition(topic, p): OffsetSpec.earliest() for p in range(count)},
        request_timeout=timeout,
    )
    return _offsets(settings, f"list the start offsets of topic {topic!r}", futures, timeout)


def _offsets(
    settings: KafkaSettings,
    what: str,
    futures: Mapping[KafkaTopicPartition, object],
    timeout: float,
) -> dict[int, int]:
    """The offsets of answered ListOffsets futures; an unanswered one names the cluster."""
    try:
        # the request carries its own timeout; the wait here only bounds a lost answer
        return {tp.partition: f.result(timeout + 5.0).offset for tp, f in futures.items()}  # type: ignore[attr-defined]
    except FutureTimeout:
        raise unreachable(settings, what, timeout, "") from None
    except KafkaException as exc:
        raise unreachable(settings, what, timeout, exc) from exc
