"""Which dynamic partitions the partitions sensor adds and removes: a pure rule.

One key per Kafka partition not yet known; keys that match no Kafka partition (added by hand,
a typo) are removed, naming the valid keys. Re-exported by :mod:`eos_pipeline.core.planning`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from eos_pipeline.core.partition_keys import keys_for, parse_partition_key, partition_key

__all__ = ["MAX_KEYS_NAMED", "NewPartitions", "plan_new_partitions", "stray_keys"]


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Partition keys to add and to remove, or why none."""

    keys: tuple[str, ...] = ()
    skip_reason: str | None = None
    #: Keys that match no Kafka partition of the pipeline's topics (added by hand, a typo):
    #: the sensor deletes them, and says why in :attr:`remove_reason`.
    remove: tuple[str, ...] = ()
    remove_reason: str | None = None


#: Most valid keys a removal message lists one by one (more are summarised per topic).
MAX_KEYS_NAMED = 20


def _valid_keys_text(counts: Mapping[str, int]) -> str:
    keys = [k for topic, n in counts.items() for k in keys_for(topic, n)]
    if len(keys) <= MAX_KEYS_NAMED:
        return ", ".join(keys) if keys else "none"
    return "; ".join(
        f"{keys_for(topic, n)[0]} .. {keys_for(topic, n)[-1]} ({n} keys)"
        for topic, n in counts.items()
        if n
    )


def stray_keys(
    existing: Iterable[str], counts: Mapping[str, int], missing_topics: Sequence[str] = ()
) -> list[str]:
    """Keys of ``existing`` that match no partition of the pipeline's topics, sorted.

    A key matches when it is exactly ``partition_key`` of a partition below its topic's count.
    Keys of a topic that could not be read (``missing_topics``) are kept: the topic may be
    back on the next evaluation, and only what Kafka says is judged.
    """
    stray = []
    for key in existing:
        try:
            tp = parse_partition_key(key)
        except ValueError:
            stray.append(key)
            continue
        if tp.topic in missing_topics and partition_key(tp) == key:
            continue
        if partition_key(tp) != key or tp.partition >= counts.get(tp.topic, 0):
            stray.append(key)
    return sorted(stray)


def plan_new_partitions(
    existing: Collection[str], counts: Mapping[str, int], missing_topics: Sequence[str] = ()
) -> NewPartitions:
    """The keys of ``counts`` (topic -> partition count) not in ``existing``, in order, and
    the keys of ``existing`` that match no Kafka partition (:func:`stray_keys`), to remove."""
    wanted = [k for topic, n in counts.items() for k in keys_for(topic, n) if k not in existing]
    remove = tuple(stray_keys(existing, counts, missing_topics))
    reason = None
    if remove:
        topics = [*counts, *missing_topics]
        reason = (
            f"removing partition key(s) {list(remove)}: they match no Kafka partition of "
            f"topic(s) {topics}. Valid keys: {_valid_keys_text(counts)}"
        )
    if wanted or remove:
        return NewPartitions(tuple(wanted), remove=remove, remove_reason=reason)
    note = f"; topics not found: {list(missing_topics)}" if missing_topics else ""
    return NewPartitions(skip_reason=f"{len(existing)} partitions, none new{note}")
