"""The Kafka checkpoint stored in a Hudi commit, in the exact form HoodieStreamer uses, so a table
moves between HoodieStreamer and this project either way without losing or repeating a record.
Pure (the commit I/O is ``eos_pipeline.adapters.hudi``).

``topic,partition:offset,...``: partitions ascending, each offset the *next* to read. Hudi 1.x
writes it under ``streamer.checkpoint.key.v2`` (tables of version 8+) or
``deltastreamer.checkpoint.key`` (V1); for Kafka both hold the same string, and a non-empty V2
wins, as in Hudi.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from eos_pipeline.core.errors import NeedsPerson
from eos_pipeline.core.offsets import TopicPartition

CHECKPOINT_KEY_V2 = "streamer.checkpoint.key.v2"
CHECKPOINT_KEY_V1 = "deltastreamer.checkpoint.key"
#: The topic id and a clustered pipeline's :class:`~eos_pipeline.core.failover.TablePosition` are
#: stored under ``<checkpoint key>`` + a suffix: the datasource copies into the commit metadata
#: only options of ONE prefix, and HoodieStreamer reads its key exactly, so they are invisible to
#: it.
TOPIC_ID_SUFFIX = ".eos.kafka.topic.id"
CLUSTER_POSITION_SUFFIX = ".eos.cluster.position"

_DIGITS = re.compile(r"^[0-9]+$")
# Same bound as Kafka's own offsets (a signed 64-bit long), so a parsed value always fits Java.
_MAX_OFFSET = 2**63 - 1
_MAX_PARTITION = 2**31 - 1

Checkpoint = dict[TopicPartition, int]


class CheckpointError(NeedsPerson, ValueError):
    """A checkpoint string or mapping is malformed or would lose or repeat records."""

    code = "bad-checkpoint"


def _topic_of(positions: Mapping[TopicPartition, int]) -> str:
    topics = {tp.topic for tp in positions}
    if len(topics) != 1:
        found = ", ".join(sorted(topics)) or "none"
        raise CheckpointError(
            f"a streamer checkpoint covers exactly one topic, got {len(topics)} ({found}); "
            "keep one Hudi table per source topic"
        )
    return topics.pop()


def validate_checkpoint(
    positions: Mapping[TopicPartition, int], partition_count: int | None = None
) -> None:
    """Partitions 0..n-1 of one topic, exactly: a missing one would restart by the reset policy
    (re-read or skipped); ``partition_count`` also catches partitions added meanwhile."""
    topic = _topic_of(positions)
    for tp, offset in positions.items():
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise CheckpointError(f"{tp}: offset must be an int, got {offset!r}")
        if not 0 <= offset <= _MAX_OFFSET:
            raise CheckpointError(f"{tp}: offset {offset} is outside 0..2^63-1")
    partitions = sorted(tp.partition for tp in positions)
    expected = list(range(partition_count if partition_count is not None else len(partitions)))
    if partitions != expected:
        missing = sorted(set(expected) - set(partitions))
        extra = sorted(set(partitions) - set(expected))
        raise CheckpointError(
            f"checkpoint for {topic!r} must hold every partition 0..{len(expected) - 1}: "
            f"missing {missing}, unexpected {extra}. Carry untouched partitions forward with "
            "merge_checkpoint()"
        )


def format_checkpoint(
    positions: Mapping[TopicPartition, int], partition_count: int | None = None
) -> str:
    validate_checkpoint(positions, partition_count)
    topic = _topic_of(positions)
    parts = ",".join(f"{tp.partition}:{positions[tp]}" for tp in sorted(positions))
    return f"{topic},{parts}"


def parse_checkpoint(text: str) -> Checkpoint:
    """Stricter than Hudi's parser (which takes signs or a bare topic): a misread position
    silently loses or repeats data."""
    if not isinstance(text, str) or not text:
        raise CheckpointError("empty checkpoint string; expected 'topic,partition:offset,...'")
    topic, sep, rest = text.partition(",")
    if not sep or not rest:
        raise CheckpointError(
            f"checkpoint {text!r} names no partition; expected 'topic,partition:offset,...' "
            "(a V2 value that is an instant time belongs to a Hudi-incremental source, not Kafka)"
        )
    try:
        TopicPartition(topic, 0)
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {text!r}: {exc}") from None
    result: Checkpoint = {}
    for item in rest.split(","):
        partition, colon, offset = item.partition(":")
        if not colon or not _DIGITS.match(partition) or not _DIGITS.match(offset):
            raise CheckpointError(
                f"checkpoint {text!r}: bad entry {item!r}; expected 'partition:offset' with "
                "non-negative integers"
            )
        p, o = int(partition), int(offset)
        if p > _MAX_PARTITION or o > _MAX_OFFSET:
            raise CheckpointError(f"checkpoint {text!r}: entry {item!r} is out of range")
        tp = TopicPartition(topic, p)
        if tp in result:
            raise CheckpointError(f"checkpoint {text!r}: partition {p} appears twice")
        result[tp] = o
    return result


def merge_checkpoint(
    previous: Mapping[TopicPartition, int] | None,
    advanced: Mapping[TopicPartition, int],
    allow_rewind: bool = False,
) -> Checkpoint:
    """Untouched partitions keep their position, so the commit names them all; moving back is
    refused unless ``allow_rewind`` (a deliberate reprocessing the key absorbs)."""
    if not advanced:
        raise CheckpointError("a transaction must advance at least one partition")
    merged: Checkpoint = dict(previous or {})
    if merged and _topic_of(merged) != _topic_of(advanced):
        raise CheckpointError(
            f"topic mismatch: table checkpoint is for {_topic_of(merged)!r}, "
            f"transaction is for {_topic_of(advanced)!r}"
        )
    for tp, offset in advanced.items():
        before = merged.get(tp)
        if before is not None and offset < before and not allow_rewind:
            raise CheckpointError(
                f"{tp}: position would move back from {before} to {offset}; records in "
                "between are already committed"
            )
        merged[tp] = offset
    return merged


#: First Hudi table version whose streamer checkpoint is V2 (Hudi's ``targetCheckpointV2``).
FIRST_V2_TABLE_VERSION = 8


def checkpoint_key(table_version: int | None = None) -> str:
    """V1 below table version 8, the only key HoodieStreamer 0.x reads."""
    if table_version is not None and table_version < FIRST_V2_TABLE_VERSION:
        return CHECKPOINT_KEY_V1
    return CHECKPOINT_KEY_V2


def checkpoint_metadata(
    positions: Mapping[TopicPartition, int],
    partition_count: int | None = None,
    table_version: int | None = None,
) -> dict[str, str]:
    return {checkpoint_key(table_version): format_checkpoint(positions, partition_count)}


def checkpoint_from_metadata(extra: Mapping[str, str | None]) -> Checkpoint | None:
    """As Hudi chooses: a non-empty V2 value first, then V1."""
    for key in (CHECKPOINT_KEY_V2, CHECKPOINT_KEY_V1):
        value = extra.get(key)
        if value:
            try:
                return parse_checkpoint(value)
            except CheckpointError as exc:
                raise CheckpointError(f"commit metadata {key}: {exc}") from None
    return None
