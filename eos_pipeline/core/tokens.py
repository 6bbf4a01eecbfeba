"""Dedup tokens for ClickHouse inserts (and a deterministic cut of a chunk, no sink uses yet).

ClickHouse drops an insert whose ``insert_deduplication_token`` is still in the table's dedup
window (``non_replicated_deduplication_window`` / ``replicated_deduplication_window``). That only
gives exactly-once if a re-sent insert carries the same token and the same rows as the first
attempt, so:

* a token is a pure function of (pipeline, topic, partition, chunk bounds): plain text, no Python
  ``hash()`` (salted per process), no clock, no randomness. The format is frozen for ``v1``:
  changing it while any sink is in BEFORE would make the re-sent chunk look new. A new format
  must use a new version prefix and be rolled out only when every record is AFTER;
* ClickHouse suffixes the token with the block index when one insert is split into several
  blocks, which ties dedup to its block size settings. To keep that out of the picture the sink
  sends each step as one insert of one block. A step is never larger than one read (the batch
  limits ``max_records`` and ``max_bytes`` cap the read), so the sink does not cut it further.
  :func:`split_range_by_offsets` is the rule for cutting a chunk should that ever be needed
  (each piece gets its own token from its own bounds); only the dedup property tests use it;
* the dedup window is per table and shared by every topic-partition writing to it: it must hold
  more blocks than all writers can insert between a crash and its retry.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from eos_pipeline.core.offsets import OffsetRange, TopicPartition

__all__ = ["TOKEN_PREFIX", "dedup_token", "split_range_by_offsets"]

TOKEN_PREFIX = "eos:v1"


def dedup_token(pipeline: str, tp: TopicPartition, chunk: OffsetRange) -> str:
    """The insert dedup token of ``chunk``: ``eos:v1:<pipeline>:<topic>:<partition>:<start>-<end>``.

    Readable on purpose (it shows up in ``system.query_log``). It is injective: topic names cannot
    hold ``:``, and the three fields after the pipeline name are fixed in shape, so the text splits
    back into its parts from the right even if the pipeline name contains ``:``.
    """
    if not pipeline:
        raise ValueError("pipeline name must not be empty")
    return f"{TOKEN_PREFIX}:{pipeline}:{tp.topic}:{tp.partition}:{chunk.start}-{chunk.end}"


def split_range_by_offsets(
    chunk: OffsetRange, offsets: Iterable[int], max_records: int
) -> list[OffsetRange]:
    """Cut ``chunk`` into consecutive sub-ranges holding at most ``max_records`` offsets each.

    ``offsets`` are the offsets of the records actually present in ``chunk``, strictly increasing.
    The result covers ``chunk`` exactly: the first piece starts at ``chunk.start``, each next one
    starts at the offset of its first record, the last ends at ``chunk.end``; a chunk with no
    record stays whole. The cut depends only on the bounds and the offsets present, and a fixed
    range of a partition always holds the same records when read with ``read_committed``, so a
    retry cuts a chunk exactly as the first attempt did. ``max_records`` must not change while a
    sink is in BEFORE: a different cut means different tokens.
    """
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")
    present = list(offsets)
    previous = None
    for offset in present:
        if offset not in chunk:
            raise ValueError(f"offset {offset} is outside the chunk {chunk}")
        if previous is not None and offset <= previous:
            raise ValueError(f"offsets must be strictly increasing: {previous} then {offset}")
        previous = offset

    cuts = present[max_records::max_records]
    bounds = [chunk.start, *cuts, chunk.end]
    return [OffsetRange(lo, hi) for lo, hi in pairwise(bounds)]
