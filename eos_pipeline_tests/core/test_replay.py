"""The replay's planning rule and the dead-letter ledger, without a stack."""

from __future__ import annotations

import pytest

from eos_pipeline.core.dedup import Phase, SinkState, dedup_token
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.replay import (
    DONE,
    RUNNING,
    JournalEntry,
    ReplayRefused,
    dead_offsets,
    marker_headers,
    plan_replay,
)
from eos_pipeline_tests.support.core_readings import replay_token

TP = TopicPartition("events", 1)


def after(start: int, end: int) -> SinkState:
    return SinkState(OffsetRange(start, end), Phase.AFTER)


def plan(state: SinkState | None, start: int, end: int | None, **kw: object):
    args: dict[str, object] = {"log_start": 0, "max_records": 100}
    args.update(kw)
    return plan_replay("p", "clickhouse", TP, start=start, end=end, state=state, **args)


def test_a_range_below_the_position_is_planned_in_chunks_and_the_position_stays() -> None:
    p = plan(after(200, 250), 10, 240, max_records=100)
    assert p.range == OffsetRange(10, 240)
    assert p.position == 250
    assert p.chunks == (OffsetRange(10, 110), OffsetRange(110, 210), OffsetRange(210, 240))
    assert not p.resumes
    text = "\n".join(p.describe())
    assert "delete the table's rows of events[1] with offsets in [10, 240)" in text
    assert "position stays at 250" in text


def test_end_defaults_to_the_position() -> None:
    assert plan(after(0, 30), 5, None).range == OffsetRange(5, 30)


@pytest.mark.parametrize(
    ("state", "start", "end", "says"),
    [
        (None, 0, 10, "written nothing yet"),
        (SinkState(OffsetRange(0, 10), Phase.BEFORE), 0, 5, "in flight"),
        (after(0, 30), 10, 31, "reaches past"),
        (after(0, 30), 10, 10, "nothing to replay"),
        (after(0, 30), 3, 10, "deleted from Kafka"),
    ],
)
def test_refusals_name_the_reason(state: SinkState | None, start: int, end: int, says: str) -> None:
    with pytest.raises(ReplayRefused, match=says):
        plan(state, start, end, log_start=5)


def test_an_interrupted_replay_must_be_finished_before_another_range() -> None:
    pending = JournalEntry(OffsetRange(10, 20), RUNNING, 3)
    assert plan(after(0, 30), 10, 20, pending=pending).resumes
    with pytest.raises(ReplayRefused, match=r"--from 10 --to 20"):
        plan(after(0, 30), 0, 20, pending=pending)
    done = JournalEntry(OffsetRange(10, 20), DONE, 3)
    assert not plan(after(0, 30), 0, 20, pending=done).resumes


def test_journal_round_trips_and_refuses_garbage() -> None:
    entry = JournalEntry(OffsetRange(4, 9), RUNNING, 7)
    assert JournalEntry.decode(entry.encode(), "/x") == entry
    with pytest.raises(ReplayRefused, match="/x"):
        JournalEntry.decode(b'{"start": 1}', "/x")


def test_replay_tokens_differ_from_the_original_and_between_attempts() -> None:
    chunk = OffsetRange(0, 100)
    tokens = {dedup_token("p", TP, chunk), replay_token("p", TP, chunk, 1)}
    tokens.add(replay_token("p", TP, chunk, 2))
    assert len(tokens) == 3


def letter(offset: int, sink: str | None = None, pipeline: str = "p") -> dict[str, str]:
    h = {
        "eos.pipeline": pipeline,
        "eos.source.topic": TP.topic,
        "eos.source.partition": str(TP.partition),
        "eos.source.offset": str(offset),
    }
    if sink:
        h["eos.sink"] = sink
    return h


def marker(sink: str, start: int, end: int) -> dict[str, str]:
    return {k: v.decode() for k, v in marker_headers("p", sink, TP, OffsetRange(start, end))}


def test_a_marker_withdraws_earlier_letters_of_its_range_for_its_sink_only() -> None:
    log = [
        (0, 0, letter(3)),
        (0, 1, letter(12)),
        (0, 2, letter(25)),
        (0, 3, marker("clickhouse", 10, 20)),
        (0, 4, letter(15, sink="clickhouse")),
        (0, 5, letter(16, sink="hudi")),
        (0, 6, letter(99, pipeline="other")),
    ]
    assert dead_offsets(log, "p", "clickhouse") == {TP: {3, 15, 25}}
    assert dead_offsets(log, "p", "hudi") == {TP: {3, 12, 16, 25}}
    assert dead_offsets(log, "p", None) == {TP: {3, 12, 15, 16, 25}}


def test_order_counts_per_dead_letter_partition_not_across() -> None:
    log = [
        (1, 7, letter(12)),  # before the marker in its own partition: withdrawn
        (0, 0, marker("clickhouse", 10, 20)),
        (1, 8, marker("clickhouse", 10, 20)),
        (0, 1, letter(13, sink="clickhouse")),
    ]
    assert dead_offsets(log, "p", "clickhouse") == {TP: {13}}
