"""Following runs: a sensor's run that keeps reading new records until the stream goes quiet.

A run started by a lag sensor pays a queue wait and a process start (seconds on a small
machine) before it writes anything; for a trickle of records that start-up, not the write, is
what users see as latency. A *following* run, once caught up, keeps polling Kafka's end offsets
and writes what arrives, each step through the same keeper state machine as any other run, so
exactly-once is unchanged. It ends when nothing arrived for ``idle_seconds``, after
``max_seconds`` in all (so materializations, checks and metadata keep coming), or as soon as
another run that may need the same table or chDB path is queued: it never holds a path
somebody waits for.

While a following run of a sink is in flight the ClickHouse sensor asks for nothing on the
chDB path (the run covers every partition); on a ClickHouse server each partition's run
follows that partition, and the sensor already leaves partitions with a run in flight alone.

A Hudi run follows the same way: each step is one complete transaction of the Hudi sink (one
commit carrying its checkpoint, planned from the latest completed commit, fenced as any
other), so a record waits for a poll and a commit instead of a sensor tick, a queue wait, a
process start and a Spark Connect session. It holds its table (``HUDI_TABLE_TAG``) as a
chDB run holds its path, and while it is in flight the Hudi sensor asks for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from eos_pipeline.core.planning.runs import (
    CHDB_PATH_TAG,
    PARTITION_TAG,
    RANGE_START_TAG,
    SINK_TAG,
)

#: Set on runs the lag sensor asks to follow: runs launched by hand (the UI, backfills) end as
#: soon as they have caught up.
FOLLOW_TAG = "eos_pipeline/follow"


@dataclass(frozen=True, slots=True)
class FollowPolicy:
    """How long a following run goes on (``idle_seconds`` 0: runs do not follow)."""

    idle_seconds: float = 0.0
    max_seconds: float = 300.0
    #: Pause between two looks at Kafka's end offsets when nothing new arrived.
    poll_seconds: float = 0.2

    @property
    def enabled(self) -> bool:
        return self.idle_seconds > 0


def stop_reason(
    policy: FollowPolicy,
    *,
    started: float,
    last_data: float,
    now: float,
    others_waiting: bool,
) -> str | None:
    """Why a following run ends now, or None to keep following.

    ``started``: when following began; ``last_data``: when the run last found new records (or
    began following); ``others_waiting``: another run that may need the path is queued.
    """
    if others_waiting:
        return "another run waits for the table: handing it over"
    if now - started >= policy.max_seconds:
        return f"followed for {policy.max_seconds:g} s (the most a run follows)"
    if now - last_data >= policy.idle_seconds:
        return f"no new records for {policy.idle_seconds:g} s"
    return None


def yields_to(
    sink: str,
    held: str | None,
    queued: Iterable[Mapping[str, str]],
    partition: str | None = None,
    *,
    held_tag: str = CHDB_PATH_TAG,
) -> bool:
    """Whether one of the ``queued`` runs (their tags) may need what a following run of
    ``sink`` holds.

    ``held`` is what the run holds alone, named by the tag ``held_tag``: a chDB path
    (:data:`CHDB_PATH_TAG`, one process at a time) or a Hudi table (``HUDI_TABLE_TAG``,
    one writer at a time). It gives way to a run of the same sink, a run tagged with the same
    path or table, or a run without a sink tag (launched by hand: a backfill, a check, a replay,
    another asset; its needs are unknown); runs of other sinks on other paths or tables do not
    stop it. On a ClickHouse server (``held`` None) a following run holds only its
    ``partition``: a run of that partition, or a key-range run launched by hand (it may cover
    it); the sensor's runs of other partitions go on side by side.
    """
    for tags in queued:
        other = tags.get(SINK_TAG)
        if held is None:
            if partition is not None and tags.get(PARTITION_TAG) == partition:
                return True
            if other is None and RANGE_START_TAG in tags:
                return True
            continue
        if other is None or other == sink:
            return True
        if tags.get(held_tag) == held:
            return True
    return False


def follows(policy: FollowPolicy, run_tags: Mapping[str, str], clustered: bool) -> bool:
    """Whether a run with ``run_tags`` follows: only sensor runs tagged to follow, only when
    the policy is on, and never on a clustered pipeline (its runs end once caught up)."""
    return policy.enabled and run_tags.get(FOLLOW_TAG) == "true" and not clustered


def pending(ends: Mapping[str, int], positions: Mapping[str, int]) -> list[str]:
    """The partition keys whose Kafka end is past the run's position, in key order."""
    return sorted(key for key, end in ends.items() if end > positions.get(key, end))
