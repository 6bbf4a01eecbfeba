"""A ClickHouse run that follows its partitions after catching up (see
:mod:`eos_pipeline.core.planning.follow` for the rule and why)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning.follow import FollowPolicy, pending, stop_reason
from eos_pipeline.sinks.clickhouse_reports import SyncReport

log = logging.getLogger(__name__)


def follow(
    run: Callable[[TopicPartition], SyncReport],
    reports: Sequence[SyncReport],
    ends: Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]],
    policy: FollowPolicy,
    *,
    others_waiting: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[SyncReport], str]:
    """Keep catching up the partitions of ``reports`` as records arrive; returns every report
    (the caught-up ones first) and why following ended.

    ``run`` is the sink's own step (:meth:`ClickHousePartitionSync.run`): every write goes
    through the keeper state machine as in any run. ``ends`` gives Kafka's last stable offsets.
    """
    out = list(reports)
    positions = {r.tp: r.end for r in reports}
    tps = list(positions)
    started = last_data = clock()
    while True:
        reason = stop_reason(
            policy,
            started=started,
            last_data=last_data,
            now=clock(),
            others_waiting=others_waiting(),
        )
        if reason is not None:
            log.info("following ends: %s", reason)
            return out, reason
        by_key = {str(tp): tp for tp in tps}
        ahead = pending(
            {str(tp): end for tp, end in ends(tps).items()},
            {str(tp): positions[tp] for tp in tps},
        )
        if not ahead:
            sleep(policy.poll_seconds)
            continue
        last_data = clock()
        for key in ahead:
            report = run(by_key[key])
            positions[report.tp] = report.end
            out.append(report)


def merge_reports(reports: Sequence[SyncReport]) -> list[SyncReport]:
    """One report per partition (first appearance order): a following run steps a partition
    many times, while its metadata shows one row per partition."""
    merged: dict[TopicPartition, SyncReport] = {}
    for r in reports:
        first = merged.get(r.tp)
        if first is None:
            merged[r.tp] = replace(r, batches=list(r.batches))
            continue
        merged[r.tp] = replace(
            first,
            epoch=r.epoch,
            target_end=r.target_end,
            end=r.end,
            batches=first.batches + list(r.batches),
            reread=first.reread + r.reread,
            skipped=first.skipped + r.skipped,
        )
    return list(merged.values())
