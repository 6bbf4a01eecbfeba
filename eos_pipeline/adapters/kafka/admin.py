"""Topic admin and offsets: create topics, partition counts, topic ids, start and end offsets."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from concurrent.futures import TimeoutError as FutureTimeout

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from eos_pipeline.adapters.kafka.settings import KafkaReadError, KafkaSettings


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


def partition_count(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> int:
    admin = shared_admin(settings)
    try:
        meta = admin.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        if exc.args[0].code() not in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
            raise
        raise settings.no_answer(f"cannot list topic {topic!r}", timeout, admin) from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        raise KafkaReadError(f"topic {topic!r} does not exist on {settings.bootstrap_servers}")
    return len(info.partitions)


def topic_id(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> str:
    """Kafka's id of the topic (a UUID, new each time a topic is created).

    Offsets alone cannot tell a topic from one deleted and recreated under the same name once
    the new log has grown past a stored position; the id can. Sinks store it next to their
    positions and refuse to continue on another id.
    """
    admin = shared_admin(settings)
    future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic]
    try:
        description = future.result(timeout)
    except FutureTimeout:
        raise settings.no_answer(f"cannot describe topic {topic!r}", timeout, admin) from None
    except KafkaException as exc:
        if exc.args[0].code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
            raise settings.no_answer(f"cannot describe topic {topic!r}", timeout, admin) from exc
        raise KafkaReadError(
            f"cannot describe topic {topic!r} on {settings.bootstrap_servers}: {exc}"
        ) from exc
    return str(description.topic_id)


def end_offsets(
    settings: KafkaSettings,
    topic: str,
    committed: bool = True,
    timeout: float = 10.0,
) -> dict[int, int]:
    """Next offset to be written per partition, in one request for the whole topic.

    With ``committed`` (the default) this is the last stable offset: the end of what a
    read_committed consumer can see. Offsets beyond it belong to open transactions and must not
    be part of a batch, since their fate is not known yet.
    """
    admin = shared_admin(settings)
    count = partition_count(settings, topic, timeout)
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(
        {KafkaTopicPartition(topic, p): OffsetSpec.latest() for p in range(count)},
        isolation_level=level,
        request_timeout=timeout,
    )
    return {tp.partition: f.result().offset for tp, f in futures.items()}


def start_offsets(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """Earliest offset still held per partition (retention or compaction may have moved it)."""
    admin = shared_admin(settings)
    count = partition_count(settings, topic, timeout)
    futures = admin.list_offsets(
        {KafkaTopicPartition(topic, p): OffsetSpec.earliest() for p in range(count)},
        request_timeout=timeout,
    )
    return {tp.partition: f.result().offset for tp, f in futures.items()}
