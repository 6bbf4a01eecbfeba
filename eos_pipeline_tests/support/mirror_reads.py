"""Resume-point lookup on its own, as the mirror tests measure it (a switch does it in bulk)."""

from __future__ import annotations

from eos_pipeline.adapters.failover import first_offset, read_window
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.core.failover import ResumePoint, Route, SyncHistory, resume_after
from eos_pipeline.core.offsets import TopicPartition


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
