"""The follow loop on a fake clock: it steps partitions as records arrive, then stops."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning.follow import FollowPolicy
from eos_pipeline.sinks.clickhouse_reports import BatchReport, SyncReport, case_summary
from eos_pipeline.sinks.follow import follow, merge_reports

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class Stream:
    """Kafka ends that grow on a schedule, and a sink step that catches a partition up."""

    def __init__(self, arrivals: dict[float, dict[TopicPartition, int]]) -> None:
        self.now = 0.0
        self.arrivals = arrivals
        self.ends = {A: 3, B: 5}
        self.steps: list[tuple[TopicPartition, int, int]] = []
        self.position = {A: 3, B: 5}

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for at, more in self.arrivals.items():
            if at <= self.now:
                for tp, n in more.items():
                    self.ends[tp] = max(self.ends[tp], n)

    def kafka_ends(self, tps: Sequence[TopicPartition]) -> Mapping[TopicPartition, int]:
        return {tp: self.ends[tp] for tp in tps}

    def run(self, tp: TopicPartition) -> SyncReport:
        start, end = self.position[tp], self.ends[tp]
        self.steps.append((tp, start, end))
        self.position[tp] = end
        batch = BatchReport("normal", OffsetRange(start, end), records_read=end - start)
        return SyncReport(
            tp, epoch=len(self.steps), start=start, target_end=end, end=end, batches=[batch]
        )


def test_steps_each_arrival_once_and_ends_when_the_stream_is_quiet() -> None:
    stream = Stream({1.0: {A: 7}, 2.0: {B: 6, A: 8}})
    first = [SyncReport(A, 1, 0, 3, 3), SyncReport(B, 1, 0, 5, 5)]
    reports, why = follow(
        stream.run,
        first,
        stream.kafka_ends,
        FollowPolicy(idle_seconds=3, max_seconds=100, poll_seconds=0.5),
        others_waiting=lambda: False,
        clock=stream.clock,
        sleep=stream.sleep,
    )
    assert stream.steps == [(A, 3, 7), (A, 7, 8), (B, 5, 6)]
    assert why == "no new records for 3 s" and 5.0 <= stream.now <= 5.5
    merged = {r.tp: r for r in merge_reports(reports)}
    assert (merged[A].start, merged[A].end, merged[A].records_read) == (0, 8, 5)
    assert (merged[B].start, merged[B].end, merged[B].records_read) == (0, 6, 1)
    assert merged[A].epoch == 2 and case_summary(merged[A].cases) == "normal x2"


def test_a_queued_run_ends_following_at_once() -> None:
    stream = Stream({0.1: {A: 9}})
    reports, why = follow(
        stream.run,
        [SyncReport(A, 1, 0, 3, 3)],
        stream.kafka_ends,
        FollowPolicy(idle_seconds=30),
        others_waiting=lambda: True,
        clock=stream.clock,
        sleep=stream.sleep,
    )
    assert "waits" in why and stream.steps == [] and len(reports) == 1


def test_case_summary_keeps_single_cases_as_they_were() -> None:
    assert case_summary(["resume", "normal", "normal", "normal"]) == "resume, normal x3"
    assert case_summary([]) == ""
