"""A run that follows its partitions after catching up: a ClickHouse run step by step per
partition, a Hudi run commit by commit (see :mod:`eos_pipeline.core.planning` for the
rule and why)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import FollowPolicy, pending, stop_reason
from eos_pipeline.sinks.clickhouse import SyncReport

if TYPE_CHECKING:  # the Hudi sink imports pyspark: a ClickHouse run never loads it
    from eos_pipeline.sinks.hudi import HudiReport

log = logging.getLogger(__name__)


def follow_positions(
    step: Callable[[list[TopicPartition]], Mapping[TopicPartition, int]],
    positions: Mapping[TopicPartition, int],
    ends: Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]],
    policy: FollowPolicy,
    *,
    others_waiting: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The follow loop of any sink: while :func:`stop_reason` lets it, look at Kafka's ends
    (``ends``: last stable offsets) and call ``step`` with the partitions that have records
    past their ``positions``; ``step`` writes them and returns where they stand now. Returns
    why following ended.

    The idle time counts from the end of the last step that moved a position (a Hudi commit
    takes seconds: a burst that arrives while one is written is not "idle"); a step that moved
    nothing counts as no new records, and the loop pauses before it looks again.
    """
    positions = dict(positions)
    by_key = {str(tp): tp for tp in positions}
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
            return reason
        ahead = pending(
            {str(tp): end for tp, end in ends(list(positions)).items()},
            {str(tp): end for tp, end in positions.items()},
        )
        moved = dict(step([by_key[key] for key in ahead])) if ahead else {}
        if any(moved.get(tp, at) != at for tp, at in positions.items()):
            positions.update({tp: end for tp, end in moved.items() if tp in positions})
            last_data = clock()
        else:
            sleep(policy.poll_seconds)


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
    (the caught-up ones first) and why following ended. ``run`` is the sink's own step
    (:meth:`ClickHousePartitionSync.run`): every write goes through the keeper as in any run.
    """
    out = list(reports)

    def step(ahead: list[TopicPartition]) -> dict[TopicPartition, int]:
        done = [run(tp) for tp in ahead]
        out.extend(done)
        return {r.tp: r.end for r in done}

    why = follow_positions(
        step,
        {r.tp: r.end for r in reports},
        ends,
        policy,
        others_waiting=others_waiting,
        clock=clock,
        sleep=sleep,
    )
    return out, why


def follow_table(
    run: Callable[[list[int]], HudiReport],
    report: HudiReport,
    tps: Sequence[TopicPartition],
    ends: Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]],
    policy: FollowPolicy,
    *,
    others_waiting: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[HudiReport], str]:
    """Keep a Hudi table's partitions ``tps`` caught up after the run's first transaction
    (``report``); returns every transaction's report (``report`` first) and why following ended.
    ``run(partitions)`` is one complete transaction (:meth:`HudiTableSync.run`): planned from the
    latest completed commit, one fenced commit carrying its checkpoint, so each step is exactly
    once on its own.
    """
    out = [report]

    def step(ahead: list[TopicPartition]) -> dict[TopicPartition, int]:
        done = run(sorted(tp.partition for tp in ahead))
        out.append(done)
        return {tp: done.checkpoint_after[tp] for tp in tps if tp in done.checkpoint_after}

    positions = {tp: report.checkpoint_after[tp] for tp in tps if tp in report.checkpoint_after}
    why = follow_positions(
        step, positions, ends, policy, others_waiting=others_waiting, clock=clock, sleep=sleep
    )
    return out, why


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


def merge_hudi_reports(reports: Sequence[HudiReport]) -> HudiReport:
    """One report for a following Hudi run's transactions (given in commit order): each
    partition's offset range from the first start to the last end, the numbers summed, the
    checkpoint before the first commit and after the last, the last instant."""
    first, last = reports[0], reports[-1]
    ranges: dict[TopicPartition, OffsetRange] = {}
    sums: tuple[dict[TopicPartition, int], ...] = ({}, {}, {})
    for r in reports:
        for tp, rng in r.ranges.items():
            had = ranges.get(tp)
            ranges[tp] = rng if had is None else OffsetRange(had.start, max(had.end, rng.end))
        for total, part in zip(sums, (r.records_read, r.rows_written, r.dead_letters), strict=True):
            for tp, n in part.items():
                total[tp] = total.get(tp, 0) + n
    instants = [r.instant_time for r in reports if r.instant_time is not None]
    return replace(
        last,
        instant_time=instants[-1] if instants else None,
        ranges=ranges,
        checkpoint_before=first.checkpoint_before,
        records_read=sums[0],
        rows_written=sums[1],
        dead_letters=sums[2],
        seconds=sum(r.seconds for r in reports),
    )
