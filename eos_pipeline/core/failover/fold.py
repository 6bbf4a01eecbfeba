"""What the sensors see of a clustered pipeline: one state per Dagster partition.

A pipeline's Dagster partitions are ``T/p``; on the active cluster a run of ``T/p`` reads
partition ``p`` of every physical topic (``T``, ``B.T``...). The sensors' planner
(:mod:`eos_pipeline.core.planning`) reasons about one (end, stored state) pair per partition, so
the physical partitions fold into the one that most needs a run: one left in ``BEFORE`` first
(it must recover), else the one furthest behind. A run is requested when any of them is behind,
and the request's start state changes whenever that partition moves, as it does for one topic.

A Hudi table whose latest commit is on another cluster has not moved yet: every partition is
behind until a run moves it (:mod:`eos_pipeline.sinks.hudi_clusters`). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from eos_pipeline.core.dedup import Phase
from eos_pipeline.core.positions import SinkState, committed


def _behind(end: int, position: int | None) -> int:
    # Nothing stored counts from offset 0: a run then starts wherever the reset policy says,
    # and a needless run (an emptied log) reads nothing and stores the position.
    return end - (position or 0)


def fold_keeper_states(
    physical: Iterable[tuple[int, SinkState | None]],
) -> tuple[int, SinkState | None]:
    """``(end, state)`` of the physical partition that most needs a run (``BEFORE`` first)."""
    items = list(physical)
    if not items:
        raise ValueError("a partition folds at least one physical partition")

    def urgency(item: tuple[int, SinkState | None]) -> tuple[bool, int]:
        end, state = item
        before = state is not None and state.phase is Phase.BEFORE
        return before, _behind(end, committed(state))

    return max(items, key=urgency)


def fold_positions(
    physical: Mapping[int, Iterable[tuple[int, int | None]]], moved: bool
) -> tuple[dict[int, int], dict[int, int]]:
    """Per partition ``(ends, positions)`` for a table's positions on the active cluster.

    ``physical`` maps each partition to ``(end, stored next offset or None)`` of each physical
    topic; ``moved``: the table's latest commit is on another cluster. A partition without a
    position is left out of ``positions``, as a new partition is.
    """
    ends: dict[int, int] = {}
    positions: dict[int, int] = {}
    for p, items in physical.items():
        listed = list(items)
        if not listed:
            continue
        if moved:
            ends[p], positions[p] = 1, 0  # behind by construction until a run moves the table
            continue
        end, position = max(listed, key=lambda item: _behind(*item))
        ends[p] = end
        if position is not None:
            positions[p] = position
    return ends, positions


__all__ = ["fold_keeper_states", "fold_positions"]
