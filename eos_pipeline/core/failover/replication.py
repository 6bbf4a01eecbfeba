"""How far MirrorMaker 2 is behind, per replicated partition and per flow: the arithmetic.

Before failing back, an operator must know whether MM2 has copied what producers wrote on the
cluster being left (docs/failover.md, the runbook). Per partition of a flow ``S->T``, the
adapter (``adapters.failover_status``) reads the source topic's end on ``S``, the replica's end
on ``T`` (sampled twice, to see it move), MM2's latest offset sync and its age, and where the
replica's last record came from on ``S``; this module turns those facts into a lag and a verdict.

* ``synced_to``: the replica's end translated back through the latest sync (never ahead: the
  records MM2 copied after its last sync are not counted), so ``source_end - synced_to`` is an
  upper bound of the lag;
* ``copied_to``: one past the original of the replica's last record, found by fingerprint
  (exact); None when it could not be found, and the bound stands in for it.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eos_pipeline.core.failover.naming import Flow

CAUGHT_UP = "caught up"
REPLICATING = "replicating"
STALLED = "stalled"
UNREACHABLE = "unreachable"

#: A sync younger than this (seconds) shows MM2 at work, by default.
FRESH_SYNC_S = 60.0


@dataclass(frozen=True, slots=True)
class ReplicaFacts:
    """What was read of one replicated partition (``topic`` is its name on the flow's source)."""

    topic: str
    partition: int
    source_end: int
    remote_end: int
    synced_to: int
    copied_to: int | None = None
    #: Records (not offsets: transaction markers excluded) of the source not copied yet, when
    #: they were counted; None: only offsets are known.
    uncopied_records: int | None = None
    last_sync: tuple[int, int] | None = None
    sync_age_s: float | None = None
    remote_moved: bool = False


@dataclass(frozen=True, slots=True)
class PartitionReplication:
    facts: ReplicaFacts
    #: Records (or offsets, see ``exact``) of the source not on the target yet.
    lag: int
    #: True when the lag is counted from the replica's last record; False: an upper bound.
    exact: bool
    state: str

    @property
    def name(self) -> str:
        return f"{self.facts.topic}[{self.facts.partition}]"


def judge(facts: ReplicaFacts, fresh_s: float = FRESH_SYNC_S) -> PartitionReplication:
    """The lag of one partition and whether MM2 is copying it now.

    Caught up when nothing of the source is missing on the target; else replicating when the
    replica's end moved while sampled or MM2 wrote a sync within ``fresh_s``; else stalled.
    """
    exact = facts.copied_to is not None
    copied = facts.copied_to if facts.copied_to is not None else facts.synced_to
    lag = max(0, facts.source_end - copied)
    if exact and facts.uncopied_records is not None:
        lag = facts.uncopied_records
    if lag == 0:
        state = CAUGHT_UP
    elif facts.remote_moved or (facts.sync_age_s is not None and facts.sync_age_s <= fresh_s):
        state = REPLICATING
    else:
        state = STALLED
    return PartitionReplication(facts, lag, exact, state)


@dataclass(frozen=True, slots=True)
class FlowReplication:
    """One direction: its partitions, or why it could not be read (a cluster unreachable)."""

    flow: Flow
    partitions: tuple[PartitionReplication, ...] = ()
    #: Per cluster alias that did not answer: the endpoint and the cause.
    unreachable: tuple[tuple[str, str], ...] = ()
    #: Partitions holding records whose replica does not exist yet (MM2 has not created it).
    missing: tuple[str, ...] = ()
    #: Pipeline topics the flow's source does not have: nothing to copy.
    absent: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        if self.unreachable:
            return UNREACHABLE
        states = {p.state for p in self.partitions}
        if STALLED in states or self.missing:
            return STALLED
        if REPLICATING in states:
            return REPLICATING
        return CAUGHT_UP

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


def failback_advice(active: str, flows: Sequence[FlowReplication]) -> list[str]:
    """Per cluster a failback could go to: whether it would have to wait for MM2, and why.

    Failing back early loses nothing (the records not copied yet are read once MM2 copies
    them); it only delays them, which is what this says.
    """
    advice = []
    for f in flows:
        if f.flow.source != active:
            continue
        to = f.flow.target
        state = f.state
        if state == CAUGHT_UP:
            advice.append(f"a switch to {to} need not wait: {f.flow} has copied everything")
        elif state == UNREACHABLE:
            names = ", ".join(alias for alias, _ in f.unreachable)
            advice.append(f"a switch to {to} must wait: {names} unreachable, {f.flow} unknown")
        elif state == REPLICATING:
            advice.append(
                f"a switch to {to} would wait for {f.lag} records MM2 is still copying on "
                f"{f.flow}; check again shortly"
            )
        else:
            advice.append(
                f"a switch to {to} would wait for {f.lag} records: MM2 is not copying {f.flow} "
                "(no sync lately, the replica does not move); restart it (local stack: "
                "`eos-pipeline stack restart-mirror`)"
            )
    return advice


__all__ = [
    "CAUGHT_UP",
    "FRESH_SYNC_S",
    "REPLICATING",
    "STALLED",
    "UNREACHABLE",
    "FlowReplication",
    "PartitionReplication",
    "ReplicaFacts",
    "failback_advice",
    "judge",
]
