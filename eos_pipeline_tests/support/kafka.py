"""Kafka helpers only the tests use (the product asks through ``adapters.kafka`` directly)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eos_pipeline.adapters.kafka import (
    KafkaReadError,
    KafkaSettings,
    KafkaUnavailable,
    TopicInfo,
    describe,
    list_offsets,
)


def no_answer(
    settings: KafkaSettings, what: str, timeout: float, client: Any = None
) -> KafkaReadError:
    """The error for an unanswered request: the refusal of this client's credentials
    (:meth:`KafkaSettings.refused`), else an unreachable cluster.
    """
    refused = settings.refused(what, client)
    if refused is not None:
        return refused
    return KafkaUnavailable(
        f"{what}: no answer from Kafka at {settings.bootstrap_servers} (timed out after "
        f"{timeout:g} s); is the cluster up and reachable from here?"
    )


def start_offsets_of(
    settings: KafkaSettings, topics: Iterable[str], timeout: float | None = None
) -> dict[str, dict[int, int] | KafkaReadError]:
    """``start_offsets`` of many topics in two requests, as ``adapters.kafka.end_offsets_of``."""
    infos = describe(settings, topics, timeout)
    known = {t: range(i.partitions) for t, i in infos.items() if isinstance(i, TopicInfo)}
    lows = list_offsets(settings, known, latest=False, timeout=timeout)
    return {t: lows[t] if t in known else info for t, info in infos.items()}  # type: ignore[misc]
