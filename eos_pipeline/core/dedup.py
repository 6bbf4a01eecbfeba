"""The exactly-once state machine for one (pipeline, sink, topic-partition), as a pure function.

For every topic-partition the sink keeps one small record in the keeper: the bounds of the last
range it started to write and a phase. ``BEFORE`` means "an insert of exactly this range, under
the dedup tokens derived from its bounds, was started and may have landed fully, partly or not at
all". ``AFTER`` means "this range is fully in the table". Positions below the stored start were
dealt with by earlier ranges. The first range a sink ever stores is its origin: positions below
it are outside the pipeline's history.

:func:`decide` compares a batch with that record and says what to do. It works on offset bounds
only, never on record counts: a non-empty range may hold no record at all and still moves the
position when it is written (the insert is then skipped but the keeper writes still happen).

Why the rules below keep exactly-once
-------------------------------------
ClickHouse drops an insert whose ``insert_deduplication_token`` it has already seen, so an insert
is idempotent only if it is sent again with the same token *and the same rows*. Tokens come from
a chunk's own bounds (:func:`dedup_token`), so the only thing that can
safely be sent twice is a chunk with exactly the bounds of the first attempt. After a crash in
``BEFORE`` that is the stored range and nothing else: any other range touching it would carry a
different token and might duplicate rows that already landed. Positions at or past the stored
end were never sent and are simply new.

How the sink runs a decision
----------------------------
Each entry of :attr:`Decision.steps` is one round: write ``BEFORE(step)`` (it may already be stored,
when the step is the stored range being re-sent), insert the step's records (one insert of one
block, under the token of the step's bounds), then write ``AFTER(step)``. One ``BEFORE`` per step,
never one for the whole batch: if ``[s0, b1)`` were stored for "re-send ``[s0, s1)`` then send
``[s1, b1)``", a retry would see SAME on ``[s0, b1)`` and re-send it under a token nobody used
before, duplicating ``[s0, s1)``. With one round per step, a retry after a crash anywhere re-derives
exactly the remaining steps (the retry is cropped down to the step that was in flight). Dead-letter
records are written before the first step. Keeper writes only ever happen in steps; a decision
without steps writes nothing.

Decision table
--------------
Stored range ``S = [s0, s1)``, batch ``B = [b0, b1)``, both half-open. A batch that starts below
``s0`` but ends above it is first *cropped*: ``[b0, s0)`` lies below the stored start, so it was
dealt with already, and the rest ``[s0, b1)`` is classified. ``c0 = max(b0, s0)``.

========= ========================= ============================ ==============================
case      relation (after cropping) in AFTER                     in BEFORE
========= ========================= ============================ ==============================
EMPTY     b0 == b1                  nothing                      nothing
FIRST     no stored record          insert B                     (no record, no phase)
BELOW     b1 <= s0                  error, write nothing         error, write nothing
NEW       c0 >= s1                  insert [c0, b1)              insert [c0, b1); S unconfirmed
SAME      c0 == s0, b1 == s1        skip S                       re-send S
OVERLAP   c0 == s0, b1 > s1         skip S, insert [s1, b1)      re-send S, insert [s1, b1)
CONTAINED [c0, b1) proper part of S skip [c0, b1)                dead-letter [c0, b1)
STRADDLE  s0 < c0 < s1 < b1         skip [c0, s1),               dead-letter [c0, s1),
                                    insert [s1, b1)              insert [s1, b1);
                                                                 [s0, c0) unconfirmed
========= ========================= ============================ ==============================

Choices where the source design is silent, and why:

* EMPTY (``b0 == b1``): covers no position, so it can neither add data nor move the position. It is
  a no-op in every state, wherever it lies (even below ``s0``: there is nothing to protect).
* BELOW includes ``b1 == s0`` (the batch ends right before the stored start): no position of the
  batch reaches the stored range, so the reader was moved back by hand. A batch that reaches even
  one position into ``S`` is cropped instead, because its tail is explained by a replay.
* CONTAINED is any proper part of ``S``: strictly inside, same start with a smaller end, same end
  with a larger start, or a single position. In ``AFTER`` it is written already. In ``BEFORE`` no
  insert of a part of ``S`` can reuse the token of ``S``, so the rows go to the dead-letter topic
  and the record stays ``BEFORE`` on ``S`` (a later re-read of ``S`` still resolves it).
* STRADDLE (starts inside ``S``, ends past it) is CONTAINED for the part inside ``S`` and NEW for
  the rest. In ``BEFORE``, the unsent start ``[s0, c0)`` of ``S`` is reported as unconfirmed.
* NEW allows a gap: ``c0 > s1`` is reported in :attr:`Decision.gap` (positions never read, e.g.
  removed by retention). In ``BEFORE``, moving past ``S`` abandons its unconfirmed rows:
  whatever landed stays, the rest is lost, and :attr:`Decision.unconfirmed` says so. A planner that
  re-reads ``S`` from ``s0`` whenever the record is ``BEFORE`` never reaches this branch.
* A batch that starts below ``s0`` and ends past ``s1`` is cropped, then OVERLAP.
* A degenerate stored range ``s0 == s1`` (never written by this module) classifies as NEW.

Duplicates are impossible under every rule: no step overlaps ``S`` except ``S`` itself in
``BEFORE``, no step reaches below ``s0``, and steps never overlap each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from eos_pipeline.core.errors import NeedsPerson
from eos_pipeline.core.offsets import OffsetRange, TopicPartition


class Phase(Enum):
    """Where the last write of a topic-partition got to."""

    BEFORE = "BEFORE"  # insert started; may have landed fully, partly or not at all
    AFTER = "AFTER"  # insert acknowledged


class Case(Enum):
    """How a batch relates to the stored record (see the module's decision table)."""

    EMPTY = "EMPTY"
    FIRST = "FIRST"
    BELOW = "BELOW"
    NEW = "NEW"
    SAME = "SAME"
    OVERLAP = "OVERLAP"
    CONTAINED = "CONTAINED"
    STRADDLE = "STRADDLE"


class OffsetRegressionError(NeedsPerson, RuntimeError):
    """A batch lies entirely below the stored start: the reader was moved back by hand."""

    code = "offset-regression"


@dataclass(frozen=True, slots=True)
class SinkState:
    """The keeper record of one (pipeline, sink, topic-partition); fencing lives in the adapter."""

    range: OffsetRange
    phase: Phase

    def __str__(self) -> str:
        return f"{self.phase.value} {self.range}"


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one batch.

    For a non-empty batch that is not an error, ``cropped``, ``skipped``, ``dead_letter`` and
    ``steps`` are disjoint and together cover the batch exactly.
    """

    case: Case
    batch: OffsetRange
    #: Rounds to run in order: write BEFORE(step), insert it under its own token(s), write AFTER.
    steps: tuple[OffsetRange, ...] = ()
    #: Part of the stored range known to be in the table (AFTER), not sent again.
    skipped: tuple[OffsetRange, ...] = ()
    #: Part of the batch below the stored start, dealt with by earlier ranges.
    cropped: OffsetRange | None = None
    #: Part of a BEFORE range that cannot be re-sent identically: its rows go to the DLQ.
    dead_letter: OffsetRange | None = None
    #: Positions between the stored end and the batch start that no batch has read.
    gap: OffsetRange | None = None
    #: Part of a BEFORE range this batch moves past without re-sending it (rows may be lost).
    unconfirmed: OffsetRange | None = None
    #: The keeper record once every step is done (the input record when there is no step).
    final_state: SinkState | None = None
    #: Set for BELOW only; the message names both ranges.
    error: str | None = None

    @property
    def label(self) -> str:
        """Short name for run metadata, e.g. ``CROPPED+OVERLAP``."""
        return self.case.value if self.cropped is None else f"CROPPED+{self.case.value}"


def _nonempty(start: int, end: int) -> OffsetRange | None:
    return OffsetRange(start, end) if end > start else None


def decide(
    state: SinkState | None, batch: OffsetRange, tp: TopicPartition | None = None
) -> Decision:
    """Classify ``batch`` against the stored ``state`` and say what to write.

    Pure and total: it never touches I/O and returns a :class:`Decision` for every input; an
    invalid batch is reported through :attr:`Decision.error`. ``tp`` only enriches that message.
    """
    if batch.is_empty:
        return Decision(Case.EMPTY, batch, final_state=state)
    if state is None:
        return Decision(Case.FIRST, batch, steps=(batch,), final_state=_after(batch))

    s0, s1 = state.range.start, state.range.end
    b0, b1 = batch.start, batch.end
    before = state.phase is Phase.BEFORE

    if b1 <= s0:
        where = f" of {tp}" if tp is not None else ""
        message = (
            f"batch {batch}{where} lies entirely below the stored range {state}: offsets were "
            f"moved back outside this pipeline; reset its keeper record or the reader on purpose"
        )
        return Decision(Case.BELOW, batch, final_state=state, error=message)

    cropped = _nonempty(b0, s0)
    c0 = max(b0, s0)

    if c0 >= s1:
        step = OffsetRange(c0, b1)
        return Decision(
            Case.NEW,
            batch,
            steps=(step,),
            cropped=cropped,
            gap=_nonempty(s1, c0),
            unconfirmed=state.range if before and not state.range.is_empty else None,
            final_state=_after(step),
        )

    if c0 == s0 and b1 >= s1:
        case = Case.SAME if b1 == s1 else Case.OVERLAP
        tail = _nonempty(s1, b1)
        if before:
            steps = (state.range,) if tail is None else (state.range, tail)
            final = _after(steps[-1])
            return Decision(case, batch, steps=steps, cropped=cropped, final_state=final)
        if tail is None:
            return Decision(case, batch, skipped=(state.range,), cropped=cropped, final_state=state)
        return Decision(
            case,
            batch,
            steps=(tail,),
            skipped=(state.range,),
            cropped=cropped,
            final_state=_after(tail),
        )

    if b1 <= s1:
        inside = OffsetRange(c0, b1)
        if before:
            return Decision(
                Case.CONTAINED, batch, cropped=cropped, dead_letter=inside, final_state=state
            )
        return Decision(
            Case.CONTAINED, batch, skipped=(inside,), cropped=cropped, final_state=state
        )

    # s0 < c0 < s1 < b1: the batch starts inside the stored range and runs past its end.
    inside = OffsetRange(c0, s1)
    tail = OffsetRange(s1, b1)
    if before:
        return Decision(
            Case.STRADDLE,
            batch,
            steps=(tail,),
            cropped=cropped,
            dead_letter=inside,
            unconfirmed=OffsetRange(s0, c0),
            final_state=_after(tail),
        )
    return Decision(
        Case.STRADDLE,
        batch,
        steps=(tail,),
        skipped=(inside,),
        cropped=cropped,
        final_state=_after(tail),
    )


def _after(r: OffsetRange) -> SinkState:
    return SinkState(r, Phase.AFTER)


# --------------------------------------------------------------------------------- dedup tokens
# ClickHouse drops an insert whose ``insert_deduplication_token`` is still in the table's dedup
# window, so a re-sent step must carry the same token and rows as its first attempt: the token
# is a pure function of (pipeline, topic, partition, step bounds), with no ``hash()`` (salted
# per process), clock or randomness. The ``v1`` format is frozen: a new one needs a new prefix,
# rolled out only when every record is AFTER. Each step is one insert of one block, since
# ClickHouse suffixes the token per block. The window (per table, shared by all its writers)
# must hold more blocks than they can insert between a crash and its retry.

TOKEN_PREFIX = "eos:v1"


def dedup_token(pipeline: str, tp: TopicPartition, chunk: OffsetRange) -> str:
    """The insert dedup token of ``chunk``: ``eos:v1:<pipeline>:<topic>:<partition>:<start>-<end>``,
    readable in ``system.query_log`` and injective (topics hold no ``:`` and the last three fields
    are fixed in shape, so it splits from the right whatever the pipeline name).
    """
    if not pipeline:
        raise ValueError("pipeline name must not be empty")
    return f"{TOKEN_PREFIX}:{pipeline}:{tp.topic}:{tp.partition}:{chunk.start}-{chunk.end}"
