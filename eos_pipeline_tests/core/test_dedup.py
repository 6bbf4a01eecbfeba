"""One test per case of the dedup state machine and per stored phase, with exact bounds.

The stored range is [10, 20) throughout unless a test says otherwise.
"""

from __future__ import annotations

import pytest

from eos_pipeline.core.dedup import (
    Case,
    Decision,
    Phase,
    SinkState,
    decide,
    dedup_token,
)
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline_tests.support.decisions import writes_state


def r(start: int, end: int) -> OffsetRange:
    return OffsetRange(start, end)


AFTER = SinkState(r(10, 20), Phase.AFTER)
BEFORE = SinkState(r(10, 20), Phase.BEFORE)


def after(start: int, end: int) -> SinkState:
    return SinkState(r(start, end), Phase.AFTER)


def assert_decision(
    d: Decision,
    case: Case,
    *,
    steps: tuple[OffsetRange, ...] = (),
    skipped: tuple[OffsetRange, ...] = (),
    cropped: OffsetRange | None = None,
    dead_letter: OffsetRange | None = None,
    gap: OffsetRange | None = None,
    unconfirmed: OffsetRange | None = None,
    final_state: SinkState | None,
) -> None:
    assert d.case is case
    assert d.steps == steps
    assert d.skipped == skipped
    assert d.cropped == cropped
    assert d.dead_letter == dead_letter
    assert d.gap == gap
    assert d.unconfirmed == unconfirmed
    assert d.final_state == final_state
    assert d.error is None
    assert writes_state(d) is bool(steps)


# --- no stored record -------------------------------------------------------------------------


def test_first_without_state_inserts_whole_batch_and_ends_after() -> None:
    d = decide(None, r(5, 9))
    assert_decision(d, Case.FIRST, steps=(r(5, 9),), final_state=after(5, 9))


def test_first_without_state_at_offset_zero_single_position() -> None:
    d = decide(None, r(0, 1))
    assert_decision(d, Case.FIRST, steps=(r(0, 1),), final_state=after(0, 1))


def test_empty_batch_without_state_is_a_noop() -> None:
    assert_decision(decide(None, r(7, 7)), Case.EMPTY, final_state=None)


# --- empty batches with a stored record -------------------------------------------------------


@pytest.mark.parametrize("state", [AFTER, BEFORE], ids=["after", "before"])
@pytest.mark.parametrize("at", [0, 9, 10, 15, 20, 30])
def test_empty_batch_with_state_is_a_noop_anywhere(state: SinkState, at: int) -> None:
    d = decide(state, r(at, at))
    assert_decision(d, Case.EMPTY, final_state=state)


# --- SAME -------------------------------------------------------------------------------------


def test_same_in_after_skips_everything() -> None:
    d = decide(AFTER, r(10, 20))
    assert_decision(d, Case.SAME, skipped=(r(10, 20),), final_state=AFTER)


def test_same_in_before_resends_identical_range() -> None:
    d = decide(BEFORE, r(10, 20))
    assert_decision(d, Case.SAME, steps=(r(10, 20),), final_state=after(10, 20))


# --- OVERLAP (same start, larger end) ---------------------------------------------------------


def test_overlap_in_after_inserts_only_the_rest() -> None:
    d = decide(AFTER, r(10, 35))
    assert_decision(
        d, Case.OVERLAP, steps=(r(20, 35),), skipped=(r(10, 20),), final_state=after(20, 35)
    )


def test_overlap_in_before_inserts_identical_first_chunk_and_rest() -> None:
    d = decide(BEFORE, r(10, 35))
    assert_decision(d, Case.OVERLAP, steps=(r(10, 20), r(20, 35)), final_state=after(20, 35))


def test_overlap_by_one_position_in_before() -> None:
    d = decide(BEFORE, r(10, 21))
    assert_decision(d, Case.OVERLAP, steps=(r(10, 20), r(20, 21)), final_state=after(20, 21))


# --- CONTAINED (any proper part of the stored range) ------------------------------------------


def test_contained_strictly_inside_in_after_skips() -> None:
    d = decide(AFTER, r(12, 18))
    assert_decision(d, Case.CONTAINED, skipped=(r(12, 18),), final_state=AFTER)


def test_contained_strictly_inside_in_before_goes_to_dead_letter() -> None:
    d = decide(BEFORE, r(12, 18))
    assert_decision(d, Case.CONTAINED, dead_letter=r(12, 18), final_state=BEFORE)


def test_contained_same_start_smaller_end_in_after_skips() -> None:
    d = decide(AFTER, r(10, 15))
    assert_decision(d, Case.CONTAINED, skipped=(r(10, 15),), final_state=AFTER)


def test_contained_same_start_smaller_end_in_before_goes_to_dead_letter() -> None:
    d = decide(BEFORE, r(10, 15))
    assert_decision(d, Case.CONTAINED, dead_letter=r(10, 15), final_state=BEFORE)


def test_contained_same_end_larger_start_in_after_skips() -> None:
    d = decide(AFTER, r(15, 20))
    assert_decision(d, Case.CONTAINED, skipped=(r(15, 20),), final_state=AFTER)


def test_contained_same_end_larger_start_in_before_goes_to_dead_letter() -> None:
    d = decide(BEFORE, r(15, 20))
    assert_decision(d, Case.CONTAINED, dead_letter=r(15, 20), final_state=BEFORE)


def test_contained_last_single_position_in_before_goes_to_dead_letter() -> None:
    d = decide(BEFORE, r(19, 20))
    assert_decision(d, Case.CONTAINED, dead_letter=r(19, 20), final_state=BEFORE)


# --- STRADDLE (starts inside, ends past the stored end) ----------------------------------------


def test_straddle_in_after_skips_stored_part_and_inserts_tail() -> None:
    d = decide(AFTER, r(15, 30))
    assert_decision(
        d, Case.STRADDLE, steps=(r(20, 30),), skipped=(r(15, 20),), final_state=after(20, 30)
    )


def test_straddle_in_before_dead_letters_stored_part_and_inserts_tail() -> None:
    d = decide(BEFORE, r(15, 30))
    assert_decision(
        d,
        Case.STRADDLE,
        steps=(r(20, 30),),
        dead_letter=r(15, 20),
        unconfirmed=r(10, 15),
        final_state=after(20, 30),
    )


def test_straddle_touching_last_stored_position_in_after() -> None:
    d = decide(AFTER, r(19, 25))
    assert_decision(
        d, Case.STRADDLE, steps=(r(20, 25),), skipped=(r(19, 20),), final_state=after(20, 25)
    )


def test_straddle_touching_last_stored_position_in_before() -> None:
    d = decide(BEFORE, r(19, 25))
    assert_decision(
        d,
        Case.STRADDLE,
        steps=(r(20, 25),),
        dead_letter=r(19, 20),
        unconfirmed=r(10, 19),
        final_state=after(20, 25),
    )


# --- NEW (starts at or after the stored end) --------------------------------------------------


def test_new_adjacent_in_after_inserts_batch() -> None:
    d = decide(AFTER, r(20, 28))
    assert_decision(d, Case.NEW, steps=(r(20, 28),), final_state=after(20, 28))


def test_new_after_gap_in_after_inserts_batch_and_reports_gap() -> None:
    d = decide(AFTER, r(25, 28))
    assert_decision(d, Case.NEW, steps=(r(25, 28),), gap=r(20, 25), final_state=after(25, 28))


def test_new_adjacent_in_before_inserts_batch_and_reports_stored_range_unconfirmed() -> None:
    d = decide(BEFORE, r(20, 28))
    assert_decision(
        d, Case.NEW, steps=(r(20, 28),), unconfirmed=r(10, 20), final_state=after(20, 28)
    )


def test_new_after_gap_in_before_reports_gap_and_unconfirmed() -> None:
    d = decide(BEFORE, r(40, 41))
    assert_decision(
        d,
        Case.NEW,
        steps=(r(40, 41),),
        gap=r(20, 40),
        unconfirmed=r(10, 20),
        final_state=after(40, 41),
    )


# --- CROPPED: the batch starts below the stored start -----------------------------------------


def test_cropped_then_same_in_after_skips_all() -> None:
    d = decide(AFTER, r(3, 20))
    assert_decision(d, Case.SAME, skipped=(r(10, 20),), cropped=r(3, 10), final_state=AFTER)
    assert d.label == "CROPPED+SAME"


def test_cropped_then_same_in_before_resends_stored_range_only() -> None:
    d = decide(BEFORE, r(3, 20))
    assert_decision(d, Case.SAME, steps=(r(10, 20),), cropped=r(3, 10), final_state=after(10, 20))


def test_cropped_over_both_ends_in_after_inserts_only_past_stored_end() -> None:
    d = decide(AFTER, r(0, 30))
    assert_decision(
        d,
        Case.OVERLAP,
        steps=(r(20, 30),),
        skipped=(r(10, 20),),
        cropped=r(0, 10),
        final_state=after(20, 30),
    )
    assert d.label == "CROPPED+OVERLAP"


def test_cropped_over_both_ends_in_before_resends_stored_range_then_rest() -> None:
    d = decide(BEFORE, r(0, 30))
    assert_decision(
        d,
        Case.OVERLAP,
        steps=(r(10, 20), r(20, 30)),
        cropped=r(0, 10),
        final_state=after(20, 30),
    )


def test_cropped_then_contained_in_after_skips() -> None:
    d = decide(AFTER, r(5, 14))
    assert_decision(d, Case.CONTAINED, skipped=(r(10, 14),), cropped=r(5, 10), final_state=AFTER)


def test_cropped_then_contained_in_before_goes_to_dead_letter() -> None:
    d = decide(BEFORE, r(5, 14))
    assert_decision(d, Case.CONTAINED, dead_letter=r(10, 14), cropped=r(5, 10), final_state=BEFORE)


def test_cropped_touching_first_stored_position_in_after_skips_it() -> None:
    d = decide(AFTER, r(5, 11))
    assert_decision(d, Case.CONTAINED, skipped=(r(10, 11),), cropped=r(5, 10), final_state=AFTER)


def test_cropped_touching_first_stored_position_in_before_dead_letters_it() -> None:
    d = decide(BEFORE, r(5, 11))
    assert_decision(d, Case.CONTAINED, dead_letter=r(10, 11), cropped=r(5, 10), final_state=BEFORE)


# --- BELOW: entirely before the stored start ---------------------------------------------------


@pytest.mark.parametrize("state", [AFTER, BEFORE], ids=["after", "before"])
@pytest.mark.parametrize("batch", [r(0, 5), r(0, 10), r(9, 10)], ids=str)
def test_below_is_an_error_naming_both_ranges(state: SinkState, batch: OffsetRange) -> None:
    tp = TopicPartition("orders", 3)
    d = decide(state, batch, tp)
    assert d.case is Case.BELOW
    assert d.steps == () and d.skipped == () and d.dead_letter is None and d.cropped is None
    assert d.final_state == state
    assert not writes_state(d)
    assert d.error is not None
    assert f"[{batch.start}, {batch.end})" in d.error
    assert "[10, 20)" in d.error
    assert "orders[3]" in d.error


# --- degenerate stored record (an empty range, never written by decide itself) -----------------


@pytest.mark.parametrize("phase", list(Phase))
def test_empty_stored_range_makes_batch_at_its_position_new(phase: Phase) -> None:
    state = SinkState(r(10, 10), phase)
    d = decide(state, r(10, 15))
    assert_decision(d, Case.NEW, steps=(r(10, 15),), final_state=after(10, 15))


@pytest.mark.parametrize("phase", list(Phase))
def test_empty_stored_range_crops_batch_reaching_past_it(phase: Phase) -> None:
    state = SinkState(r(10, 10), phase)
    d = decide(state, r(4, 15))
    assert_decision(d, Case.NEW, steps=(r(10, 15),), cropped=r(4, 10), final_state=after(10, 15))


@pytest.mark.parametrize("phase", list(Phase))
def test_empty_stored_range_batch_ending_at_it_is_below(phase: Phase) -> None:
    d = decide(SinkState(r(10, 10), phase), r(4, 10))
    assert d.case is Case.BELOW and d.error is not None


# --- retry after a crash re-derives exactly the remaining steps --------------------------------


def test_retry_after_crash_inside_first_step_of_overlap_in_before_resends_same_chunks() -> None:
    batch = r(0, 30)
    # The first step [10, 20) is already stored BEFORE, so a crash leaves the same record.
    retry = decide(BEFORE, batch)
    assert retry.steps == (r(10, 20), r(20, 30))


def test_retry_after_crash_inside_second_step_resends_only_that_step() -> None:
    batch = r(0, 30)
    retry = decide(SinkState(r(20, 30), Phase.BEFORE), batch)
    assert retry.case is Case.SAME
    assert retry.cropped == r(0, 20)
    assert retry.steps == (r(20, 30),)


def test_retry_after_first_step_acknowledged_inserts_only_the_rest() -> None:
    retry = decide(after(10, 20), r(0, 30))
    assert retry.steps == (r(20, 30),)


def test_one_before_record_for_a_two_step_batch_would_resend_under_a_new_token() -> None:
    """Why the sink writes BEFORE per step: a whole-batch record breaks token identity."""
    tp = TopicPartition("orders", 3)
    steps = decide(BEFORE, r(10, 30)).steps
    first_attempt_tokens = {dedup_token("p", tp, step) for step in steps}
    # Had the sink stored BEFORE [10, 30) for both steps and crashed, the retry would see SAME
    # and re-send [10, 30) whole, under a token ClickHouse has never seen: [10, 20) twice.
    naive_retry = decide(SinkState(r(10, 30), Phase.BEFORE), r(10, 30))
    assert naive_retry.steps == (r(10, 30),)
    assert dedup_token("p", tp, r(10, 30)) not in first_attempt_tokens
    # With one record per step, the retry re-sends exactly the chunks of the first attempt.
    for step in steps:
        retry = decide(SinkState(step, Phase.BEFORE), r(10, 30))
        assert {dedup_token("p", tp, s) for s in retry.steps} <= first_attempt_tokens
