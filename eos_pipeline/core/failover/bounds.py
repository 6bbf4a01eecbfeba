"""Where the re-read after a switch starts: the offset syncs' bound, tightened by time.

The offset syncs place the copy of the last record written in a window ``[start, end)`` on the
cluster switched to; ``start`` is one past the last sync before it, so when MM2 writes syncs far
apart (under load, even with ``offset.lag.max=0``) the window is long and the sink re-reads all
of it before the copy.

MM2 copies each record's timestamp unchanged, and the sink's mark keeps the timestamp ``ts`` of
the last record it wrote. On the other cluster, Kafka's offset-for-time lookup returns the
*earliest* offset whose timestamp is ``>= ts``. The copy itself has timestamp ``ts``, so that
offset is never after the copy, whatever order the producers' timestamps come in: a lower bound
as safe as the syncs' one. The re-read starts at the later of the two; only the records before
the copy that share its millisecond (or carry a later timestamp) are still re-read.

The guards: no offset for that time (the lookup says none, e.g. every record is older: only
possible when timestamps were not kept) and an offset outside the syncs' window (same) fall back
to the syncs; the caller does not ask at all when the topic switched to rewrites timestamps
(``message.timestamp.type=LogAppendTime``). Pure: no I/O (the lookup is the adapter's).
"""

from __future__ import annotations

from dataclasses import dataclass

from eos_pipeline.core.failover.syncs import Window

#: The re-read starts where the offset syncs put it.
SYNCS = "syncs"
#: The re-read starts at the first offset at the last written record's timestamp.
TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class ReadStart:
    """Where the re-read starts (``position``), which bound set it, and the syncs' own start."""

    position: int
    bound: str
    syncs_position: int


def read_start(window: Window, time_offset: int | None) -> ReadStart:
    """The later of the syncs' window start and ``time_offset``, when the latter can be trusted.

    ``time_offset`` is the earliest offset of the partition switched to whose timestamp is at or
    after the last written record's (None, or negative as Kafka answers "none", when there is
    none or it was not asked). Used only inside the window: the copy lies in ``[start, end)``
    and the time offset is at or before the copy, so a value at or past ``end`` means the
    timestamps were not kept and the value is ignored. Never after the copy, never before the
    syncs' start.
    """
    syncs = ReadStart(window.start, SYNCS, window.start)
    if time_offset is None or time_offset <= window.start:
        return syncs
    if window.end is not None and time_offset >= window.end:
        return syncs
    return ReadStart(time_offset, TIMESTAMP, window.start)


__all__ = ["SYNCS", "TIMESTAMP", "ReadStart", "read_start"]
