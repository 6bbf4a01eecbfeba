"""Partitions of a range run that need a person: set aside so the others go on.

On an embedded chDB path one run catches up every lagging partition. If one of them fails in
a way no retry can fix (its offsets were deleted by retention, its topic was recreated, ...),
stopping the whole run would stall every healthy partition behind it until a person acts. So
the run goes on with the others, then fails naming the stuck ones, and records them in a run
tag (:data:`NEEDS_PERSON_TAG`): ``{partition key: [state label, cause]}``. The sensor leaves a
recorded partition out of its next range runs, with a warning, for as long as the partition's
keeper state is still the one it failed from; a run launched by hand after the fix moves the
state and ends that.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from eos_pipeline.core.dedup import SinkState
from eos_pipeline.core.planning.runs import RunInfo

#: Set by a range run on itself: the partitions it set aside (see the module docstring).
NEEDS_PERSON_TAG = "eos_pipeline/needs_person"
#: Longest cause kept per partition (Dagster shows tags in full in the run's page).
_CAUSE_CHARS = 300


def state_label(state: SinkState | None) -> str:
    """The keeper state a partition failed from, as a short stable text."""
    if state is None:
        return "none"
    return f"{state.phase.value}:{state.range.start}-{state.range.end}"


def encode(stuck: Mapping[str, tuple[str, str]]) -> str:
    """The tag value for ``{key: (state label, cause)}``."""
    return json.dumps(
        {k: [label, cause[:_CAUSE_CHARS]] for k, (label, cause) in sorted(stuck.items())},
        separators=(",", ":"),
    )


def decode(value: str) -> dict[str, tuple[str, str]]:
    """The inverse of :func:`encode`; a malformed value (edited by hand) sets nothing aside."""
    try:
        raw = json.loads(value)
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {
        str(k): (str(v[0]), str(v[1]))
        for k, v in raw.items()
        if isinstance(v, list) and len(v) == 2
    }


def stuck_partitions(failed_newest_first: Iterable[RunInfo]) -> dict[str, tuple[str, str]]:
    """``{key: (state label, cause)}`` from failed runs' tags; the newest run's word counts."""
    out: dict[str, tuple[str, str]] = {}
    for run in failed_newest_first:
        value = run.tags.get(NEEDS_PERSON_TAG)
        if value:
            for key, entry in decode(value).items():
                out.setdefault(key, entry)
    return out


def set_aside(
    key: str, state: SinkState | None, stuck: Mapping[str, tuple[str, str]]
) -> str | None:
    """A warning if ``key`` is still stuck in the state it failed from, else None."""
    entry = stuck.get(key)
    if entry is None or entry[0] != state_label(state):
        return None
    return (
        f"{key} is left out of the runs until a person acts: it failed from {entry[0]} with "
        f"{entry[1]} (fix the cause, then launch a run of {key} by hand)"
    )
