"""The dead letters a test expects, as a reader of the topic sees them (markers left out)."""

from __future__ import annotations

from eos_pipeline.adapters.dlq import read_dead_letter_log
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.core.replay import is_marker


def read_dead_letters(
    settings: KafkaSettings, topic: str, timeout: float = 30.0
) -> list[dict[str, str]]:
    """Headers of every letter in ``topic`` (none if it does not exist), markers excluded; records
    sent twice (a re-run, two sinks) are all returned, for callers to de-duplicate on
    ``eos.source.topic/partition/offset``.
    """
    return [h for _, _, h in read_dead_letter_log(settings, topic, timeout) if not is_marker(h)]
