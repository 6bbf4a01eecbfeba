"""Exact resume after a switch: skip the copies of records the sink already wrote elsewhere.

A switch (``eos-pipeline failover``) stores, per partition of the new cluster's topics, a
translated position (never ahead of the truth) and a *pending mark*: the fingerprint of the last
record written from the old cluster, whose copy lies somewhere in ``[position, window_end)``.
Before writing anything, the sink reads that window, finds the copy by fingerprint (the core's
:func:`~eos_pipeline.core.failover.resume_after`) and moves its position right after it. Every
record before the copy was written already, so skipping them is exact, not a guess.

When the window is open (no offset sync after the position yet) and the copy is not there,
MirrorMaker 2 has not copied it yet: everything read is a copy of an earlier record, so all of
it is skipped and the mark stays pending until the copy arrives. A closed window without the copy,
or two copies, stop the run with the core's error; nothing is written.
"""

from __future__ import annotations

import logging

from eos_pipeline.adapters.kafka import KafkaSettings, read_range
from eos_pipeline.adapters.keeper import Lease, StateStore
from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.failover import (
    MirroredRecord,
    ReplicaPending,
    Window,
    resume_after,
)
from eos_pipeline.core.keeper import Mark
from eos_pipeline.core.offsets import OffsetRange, TopicPartition

log = logging.getLogger(__name__)


def locate_copy(
    kafka: KafkaSettings, tp: TopicPartition, start: int, mark: Mark, target: int
) -> tuple[int, Mark, int, int]:
    """Find a pending mark's copy in ``tp`` from ``start``; (position, mark, re-read, skipped).

    Found: the position is right after the copy and the mark is located there. Not copied yet
    (open window): every record read precedes it, so all are skipped and the mark stays pending.
    """
    assert mark.pending
    end = target if mark.window_end is None else min(mark.window_end, target)
    batch = read_range(kafka, tp, OffsetRange(start, max(start, end)))
    records = [
        MirroredRecord(
            batch.offsets[i],
            batch.keys[i],
            batch.values[i],
            batch.timestamps_ms[i],
            batch.headers.get(i, ()),
        )
        for i in range(len(batch))
    ]
    window = Window(start, mark.window_end)
    try:
        point = resume_after(tp, mark.fingerprint, records, window)
    except ReplicaPending:
        # Only copies of earlier records so far: skip them all, keep looking from the end.
        log.warning(
            "%s: the last written record (fingerprint %s) is not copied here yet; skipping the "
            "%d copies before it and waiting for the rest",
            tp,
            mark.fingerprint,
            len(records),
        )
        return batch.range.end, mark, len(records), len(records)
    log.info(
        "%s: resumed after offset %d, the copy of the last record written before the switch "
        "(%d re-read, %d skipped)",
        tp,
        point.matched_offset,
        len(records),
        point.skipped,
    )
    located = Mark(mark.fingerprint, point.matched_offset, None, mark.timestamp_ms)
    return point.position, located, len(records), point.skipped


def resolve_pending(
    store: StateStore,
    lease: Lease,
    kafka: KafkaSettings,
    tp: TopicPartition,
    target: int,
    topic_id: str,
) -> tuple[int, int]:
    """Move past the pending mark's copy; returns (records re-read, records skipped)."""
    record = lease.record
    mark = record.mark
    assert mark is not None and mark.pending and record.range_end is not None
    position, found, reread, skipped = locate_copy(kafka, tp, record.range_end, mark, target)
    located = None if found.pending else found
    store.write(lease, position, position, Phase.AFTER.value, topic_id=topic_id, mark=located)
    return reread, skipped
