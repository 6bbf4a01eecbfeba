"""The switch between clusters as a plan of re-runnable steps, and the state that records it.

Which cluster a pipeline reads is state, not configuration: one keeper node per pipeline holds
the active alias and, while a switch runs, the switch in flight. A switch is four steps, each
safe to run again after a crash at any point:

1. ``begin``: record the switch in flight (from, to). Sinks refuse to run while it is there.
2. ``fence``: take every position on the old cluster (bump its epoch), so that a writer still
   running there can no longer move it; positions are read from what the fence took.
3. ``positions``: for each position on the old cluster, store on the new cluster the translated
   position and a pending mark (the fingerprint of the last record written, and the window where
   its copy lies): the sink skips through that copy before writing (``sinks/resume.py``).
   Each store overwrites the whole record, so running it twice stores the same thing.
4. ``activate``: make the new cluster active and clear the switch in flight, in one write.

Pure: no I/O; the adapter ``eos_pipeline.adapters.failover`` reads and writes. The rules apply
to any sink whose positions carry a :class:`~eos_pipeline.core.keeper.Mark`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from eos_pipeline.core.failover.bounds import SYNCS, read_start
from eos_pipeline.core.failover.errors import FailoverError
from eos_pipeline.core.failover.naming import (
    DEFAULT_POLICY,
    Flow,
    PhysicalTopic,
    ReplicationPolicy,
    physical_topics,
)
from eos_pipeline.core.failover.syncs import Route, SyncHistory, Window, route
from eos_pipeline.core.keeper import KeeperRecord, Mark, validate_cluster

STATE_VERSION = 1
STEPS = ("begin", "fence", "positions", "activate")


class SwitchRefused(FailoverError):
    """The switch cannot start as asked; nothing was changed."""


@dataclass(frozen=True, slots=True)
class SwitchInFlight:
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class ActiveState:
    """The keeper's word on which cluster a pipeline reads, and the switch in flight if any."""

    active: str
    switch: SwitchInFlight | None = None
    switches: int = 0

    def encode(self) -> bytes:
        switch = None if self.switch is None else [self.switch.source, self.switch.target]
        body = {
            "v": STATE_VERSION,
            "active": self.active,
            "switch": switch,
            "switches": self.switches,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, path: str) -> ActiveState:
        try:
            raw = json.loads(data.decode())
            if raw.get("v") != STATE_VERSION:
                raise ValueError(f"unknown version {raw.get('v')!r}")
            switch = raw["switch"]
            return cls(
                str(raw["active"]),
                None if switch is None else SwitchInFlight(str(switch[0]), str(switch[1])),
                int(raw["switches"]),
            )
        except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise FailoverError(f"corrupt failover state at {path}: {exc}") from None

    def begun(self, target: str) -> ActiveState:
        return ActiveState(self.active, SwitchInFlight(self.active, target), self.switches)

    def finished(self) -> ActiveState:
        assert self.switch is not None
        return ActiveState(self.switch.target, None, self.switches + 1)


@dataclass(frozen=True, slots=True)
class ClusterSet:
    """A pipeline's clusters (aliases, in configured order) and the flows MM2 replicates."""

    aliases: tuple[str, ...]
    flows: frozenset[Flow]
    policy: ReplicationPolicy = DEFAULT_POLICY

    @classmethod
    def both_ways(cls, aliases: Sequence[str]) -> ClusterSet:
        pairs = {Flow(a, b) for a in aliases for b in aliases if a != b}
        return cls(tuple(aliases), frozenset(pairs))

    @classmethod
    def parse(cls, aliases: Sequence[str], flows: Sequence[str] | None = None) -> ClusterSet:
        """From configured aliases and flows written ``"A->B"`` (None: every pair, both ways)."""
        if len(aliases) < 2 or len(set(aliases)) != len(aliases):
            raise FailoverError(f"name two or more distinct clusters, got {list(aliases)}")
        for alias in aliases:
            validate_cluster(alias)
        if flows is None:
            return cls.both_ways(aliases)
        parsed = set()
        for text in flows:
            source, sep, target = text.partition("->")
            if not sep or source not in aliases or target not in aliases:
                raise FailoverError(f"flow {text!r} is not '<alias>-><alias>' of {list(aliases)}")
            parsed.add(Flow(source, target))
        return cls(tuple(aliases), frozenset(parsed))

    def topics(self, pipeline_topic: str, active: str) -> tuple[PhysicalTopic, ...]:
        """The physical topics to read on ``active``: the local one and each replica MM2 makes."""
        return tuple(
            t
            for t in physical_topics(pipeline_topic, self.aliases, active, self.policy)
            if t.is_local or Flow(t.origin, active) in self.flows
        )


@dataclass(frozen=True, slots=True)
class SwitchPlan:
    """What a run of the switch must still do (an empty ``steps`` means nothing is left)."""

    source: str
    target: str
    steps: tuple[str, ...]


def plan_switch(state: ActiveState, clusters: ClusterSet, target: str) -> SwitchPlan:
    """The steps left to switch to ``target`` from ``state``, or why it cannot be done."""
    if target not in clusters.aliases:
        raise SwitchRefused(
            f"unknown cluster {target!r}: this pipeline's clusters are {list(clusters.aliases)}"
        )
    if state.switch is not None:
        if state.switch.target != target:
            raise SwitchRefused(
                f"a switch {state.switch.source} -> {state.switch.target} is in flight; finish "
                f"it first (rerun the failover to {state.switch.target!r}), then switch again"
            )
        return SwitchPlan(state.switch.source, target, STEPS[1:])
    if state.active == target:
        return SwitchPlan(target, target, ())
    if Flow(state.active, target) not in clusters.flows:
        raise SwitchRefused(
            f"MirrorMaker 2 does not replicate {state.active} -> {target} for this pipeline "
            f"(flows: {sorted(str(f) for f in clusters.flows)}): the records written on "
            f"{state.active!r} would not be on {target!r}"
        )
    return SwitchPlan(state.active, target, STEPS)


@dataclass(frozen=True, slots=True)
class Move:
    """One position carried over: from ``route.source`` to ``route.target`` for a partition."""

    route: Route
    partition: int
    position: int
    mark: Mark | None
    #: What set ``position``: the offset syncs alone (``"syncs"``) or the first offset at the
    #: last written record's timestamp (``"timestamp"``, see ``core.failover.bounds``).
    bound: str = SYNCS
    #: Where the syncs alone would have started (equal to ``position`` when they set it).
    syncs_position: int | None = None


def check_movable(where: str, record: KeeperRecord | None) -> None:
    """A position can move only when it is settled: no range in flight."""
    if record is not None and record.phase == "BEFORE":
        raise SwitchRefused(
            f"{where}: a write is in flight (BEFORE {record.range_start}-{record.range_end}); "
            "run the sink on the active cluster once so it finishes, then switch"
        )


def move(
    physical: PhysicalTopic,
    partition: int,
    record: KeeperRecord,
    to_cluster: str,
    clusters: ClusterSet,
    history: SyncHistory,
    floor: int = 0,
    time_offset: int | None = None,
) -> Move:
    """The position on ``to_cluster`` for a settled position on ``physical``.

    With a located mark, the new position is the start of the window where the marked record's
    copy lies (``window_end`` its end): every record from there to the copy was written already.
    A pending mark (a switch not yet resolved by the sink) is carried over with an open window.
    Without a mark, only an exact translation (or a position at the log's start) is safe.
    ``time_offset``: the first offset on ``to_cluster`` at the mark's timestamp, which may
    start the window later (:func:`~eos_pipeline.core.failover.bounds.read_start`).
    """
    check_movable(f"{physical}[{partition}]", record)
    return move_position(
        physical,
        partition,
        record.range_end or 0,
        record.mark,
        to_cluster,
        clusters,
        history,
        floor,
        time_offset,
    )


def move_position(
    physical: PhysicalTopic,
    partition: int,
    end: int,
    mark: Mark | None,
    to_cluster: str,
    clusters: ClusterSet,
    history: SyncHistory,
    floor: int = 0,
    time_offset: int | None = None,
) -> Move:
    """:func:`move` for a position kept outside the keeper (a Hudi commit): next offset ``end``."""
    where = f"{physical}[{partition}]"
    r = route(physical, to_cluster, clusters.aliases, clusters.policy)
    if r.flow not in clusters.flows:
        raise SwitchRefused(
            f"{where}: positions move through flow {r.flow}, which MirrorMaker 2 does not "
            "replicate for this pipeline"
        )
    if mark is not None:
        if mark.last_offset is not None:
            window = r.window(history, partition, mark.last_offset, floor)
        else:  # still pending: its copy is somewhere after the translated position
            window = Window(r.translate(history, partition, end, floor).position, None)
        start = read_start(window, time_offset if mark.timestamp_ms is not None else None)
        pending = Mark(mark.fingerprint, None, window.end, mark.timestamp_ms)
        return Move(r, partition, start.position, pending, start.bound, start.syncs_position)
    translation = r.translate(history, partition, end, floor)
    if end == 0 or translation.exact:
        return Move(r, partition, translation.position, None, SYNCS, translation.position)
    raise SwitchRefused(
        f"{where}: the position {end} has no fingerprint of the last record written (it was "
        "stored before fingerprints were kept) and no offset sync lands on it exactly; run "
        "the sink once on the active cluster to store one, then switch"
    )


__all__ = [
    "STEPS",
    "ActiveState",
    "ClusterSet",
    "Move",
    "SwitchInFlight",
    "SwitchPlan",
    "SwitchRefused",
    "check_movable",
    "move",
    "move_position",
    "plan_switch",
]
