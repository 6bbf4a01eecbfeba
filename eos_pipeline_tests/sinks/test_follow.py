"""The follow loop on a fake clock: it steps partitions (ClickHouse) or commits (Hudi) as
records arrive, then stops."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import FollowPolicy
from eos_pipeline.sinks.clickhouse import BatchReport, SyncReport, case_summary
from eos_pipeline.sinks.follow import follow, follow_table, merge_hudi_reports, merge_reports
from eos_pipeline.sinks.hudi import HudiReport

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


class Table:
    """A Hudi table behind the fake stream: each transaction commits what Kafka holds."""

    def __init__(self, stream: Stream, *, commit_seconds: float = 0.0) -> None:
        self.stream = stream
        self.commit_seconds = commit_seconds
        self.checkpoint = dict(stream.position)
        self.commits: list[tuple[list[int], dict[TopicPartition, int]]] = []

    def report(self, partitions: list[int], instant: str | None) -> HudiReport:
        before = dict(self.checkpoint)
        ranges = {
            tp: OffsetRange(before[tp], self.stream.ends[tp])
            for tp in before
            if tp.partition in partitions
        }
        read = {tp: r.width for tp, r in ranges.items()}
        self.checkpoint.update({tp: r.end for tp, r in ranges.items()})
        return HudiReport(
            instant_time=instant,
            ranges=ranges,
            checkpoint_before=before,
            checkpoint_after=dict(self.checkpoint),
            end_offsets=dict(self.stream.ends),
            records_read=read,
            rows_written={tp: n - (1 if n > 1 else 0) for tp, n in read.items()},
            dead_letters={tp: 1 if n > 1 else 0 for tp, n in read.items()},
            seconds=1.5,
        )

    def run(self, partitions: list[int]) -> HudiReport:
        self.stream.now += self.commit_seconds  # a commit takes time; the clock goes on
        report = self.report(partitions, f"2026{len(self.commits):04d}")
        self.commits.append((partitions, report.checkpoint_after))
        return report


def _follow_table(
    stream: Stream,
    run: Callable[[list[int]], HudiReport],
    first: HudiReport,
    idle_seconds: float,
) -> tuple[list[HudiReport], str]:
    policy = FollowPolicy(idle_seconds=idle_seconds, max_seconds=100, poll_seconds=0.5)
    return follow_table(
        run,
        first,
        [A, B],
        stream.kafka_ends,
        policy,
        others_waiting=lambda: False,
        clock=stream.clock,
        sleep=stream.sleep,
    )


def test_a_hudi_run_commits_each_burst_once_and_ends_when_the_stream_is_quiet() -> None:
    stream = Stream({1.0: {A: 7}, 7.0: {B: 9, A: 8}})
    table = Table(stream, commit_seconds=4.0)  # longer than idle_seconds: still not idle
    first = table.report([0, 1], "20260000")
    first.checkpoint_before = None  # the table's first commit
    reports, why = _follow_table(stream, table.run, first, idle_seconds=3)
    # a commit per burst, each over the partitions that had new records
    assert table.commits == [([0], {A: 7, B: 5}), ([0, 1], {A: 8, B: 9})]
    assert why == "no new records for 3 s" and len(reports) == 3
    merged = merge_hudi_reports(reports)
    assert merged.ranges == {A: OffsetRange(3, 8), B: OffsetRange(5, 9)}
    assert merged.records_read == {A: 5, B: 4}
    assert merged.rows_written == {A: 4, B: 3} and merged.dead_letters == {A: 1, B: 1}
    assert merged.checkpoint_before is None and merged.checkpoint_after == {A: 8, B: 9}
    assert merged.instant_time == "20260001" and merged.seconds == 4.5
    assert merged.lag_after == {A: 0, B: 0}


def test_a_hudi_step_that_moves_nothing_counts_as_idle() -> None:
    stream = Stream({0.5: {A: 9}})
    table = Table(stream)
    stuck = table.report([], None)  # e.g. Kafka's end is past offsets the plan does not read
    reports, why = _follow_table(stream, lambda partitions: stuck, stuck, idle_seconds=2)
    assert why == "no new records for 2 s" and 2.0 <= stream.now <= 2.5
    assert merge_hudi_reports(reports).instant_time is None
