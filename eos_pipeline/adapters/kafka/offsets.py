"""Offsets and topic facts for many topics at once, and a short-lived memo of them for a run.

A sensor tick or a run over a thousand topic-partitions must not ask Kafka once per partition:
each request about a topic answers for all of its partitions, and one ListOffsets request
covers every topic of a cluster (librdkafka sends one per partition leader). So here every
lookup takes a set of topics: one DescribeTopics request for their partition counts and ids,
one ListOffsets request for their offsets.

:class:`TopicFacts` keeps those answers for ``max_age_s`` so that a run over many partitions
asks once per round, not once per partition. An answer a few seconds old is safe where it is
used: an end offset is a run's *target* (any end at or below the last stable offset is a valid
target; what arrives later is the next run's), and a caller that would *refuse* on an old
answer (a log that seems to end before the stored position, a partition that seems missing)
asks again with ``fresh=True`` before refusing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import OffsetSpec

from eos_pipeline.adapters.kafka.admin import is_down, shared_admin, unreachable
from eos_pipeline.adapters.kafka.settings import KafkaReadError, KafkaSettings, TopicMissingError
from eos_pipeline.core.offsets import TopicPartition


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
    settings: KafkaSettings,
    topics: Iterable[str],
    *,
    committed: bool = True,
    timeout: float | None = None,
) -> dict[str, dict[int, int] | KafkaReadError]:
    """``end_offsets`` of many topics in two requests (DescribeTopics, then one ListOffsets);
    a topic that cannot be described maps to its error."""
    infos = describe(settings, topics, timeout)
    known = {t: range(i.partitions) for t, i in infos.items() if isinstance(i, TopicInfo)}
    ends = list_offsets(settings, known, committed=committed, timeout=timeout)
    return {t: ends[t] if t in known else info for t, info in infos.items()}  # type: ignore[misc]


def start_offsets_of(
    settings: KafkaSettings, topics: Iterable[str], timeout: float | None = None
) -> dict[str, dict[int, int] | KafkaReadError]:
    """``start_offsets`` of many topics in two requests, as :func:`end_offsets_of`."""
    infos = describe(settings, topics, timeout)
    known = {t: range(i.partitions) for t, i in infos.items() if isinstance(i, TopicInfo)}
    lows = list_offsets(settings, known, latest=False, timeout=timeout)
    return {t: lows[t] if t in known else info for t, info in infos.items()}  # type: ignore[misc]


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
    """Topic ids, partition counts, end and start offsets of the partitions a caller named,
    asked for all of them together and kept for ``max_age_s`` (0: asked on every use, for one
    partition only, as a single run needs).

    Safe to share between a run's loop and its read-ahead thread: one lookup at a time.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        max_age_s: float = 0.0,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.max_age_s = max_age_s
        self.timeout = settings.timeout(timeout)
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
        for name, got in describe(
            self.settings, self._due(self._infos, topic), self.timeout
        ).items():
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
        found = list_offsets(self.settings, wanted, latest=latest, timeout=self.timeout)
        for topic, values in found.items():
            table[topic] = (now, values)
        return table[tp.topic][1].get(tp.partition)


__all__ = [
    "TopicFacts",
    "TopicInfo",
    "describe",
    "end_offsets_of",
    "ends_and_starts",
    "list_offsets",
    "start_offsets_of",
]
