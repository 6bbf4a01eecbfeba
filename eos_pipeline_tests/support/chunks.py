"""Cutting a chunk into pieces of at most ``max_records`` records: no sink cuts a step (a step is
never larger than one read), the dedup property tests model a sink that would."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from eos_pipeline.core.offsets import OffsetRange


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
