"""When each Kafka record became readable in a Hudi table, read without a JVM (hudi-rs).

Used by ``python -m benchmarks.latency_phase --hudi``. A thread polls the table's completed
commits (:mod:`eos_pipeline.adapters.hudi_timeline`) every ``POLL_S``: it notes when it first saw
each commit and the Kafka checkpoint of the newest one (what the sensor reads too). Afterwards the
table is read once: every row carries ``_hoodie_commit_time``, the instant of the commit that
wrote it (rows are never updated: the record key is the Kafka coordinates), so each record is
attributed to that commit and its **completion time** (the moment Hudi made it visible). The
poller's first sight of the commit is kept next to it as an upper bound (completion + up to one
poll + the listing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import datetime
from zoneinfo import ZoneInfo

from eos_pipeline.adapters.hudi_timeline import (
    HudiTimelineError,
    completed_instants,
    extra_metadata,
)
from eos_pipeline.core.checkpoint import checkpoint_from_metadata

POLL_S = 0.25


def instant_epoch(instant: str, timezone: str = "LOCAL") -> float:
    """Hudi's ``yyyyMMddHHmmssSSS`` (in the timeline's time zone) as epoch seconds."""
    moment = datetime.strptime(instant[:14], "%Y%m%d%H%M%S")
    millis = int(instant[14:17] or 0)
    zone = ZoneInfo("UTC") if timezone.upper() == "UTC" else None
    stamp = moment.replace(tzinfo=zone).timestamp() if zone else moment.timestamp()
    return stamp + millis / 1000


class HudiWatch(threading.Thread):
    """Polls a Hudi table's timeline: commits first seen, their completion, the checkpoint."""

    def __init__(self, table_path: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.table_path, self.topic = table_path, topic
        self.ends: dict[int, int] = {}  # the newest checkpoint: next offset per partition
        self.seen: dict[str, float] = {}  # instant -> when this poll first saw it completed
        self.completed: dict[str, float] = {}  # instant -> its completion time (epoch)
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.poll()
            except HudiTimelineError:
                self.errors += 1
            time.sleep(POLL_S)

    def poll(self) -> None:
        now = time.time()
        timeline, instants = completed_instants(self.table_path)
        if timeline is None:
            return
        zone = timeline_zone(self.table_path)
        for i in instants:
            if i.instant_time not in self.seen:
                self.seen[i.instant_time] = now
                if i.completion_time:
                    self.completed[i.instant_time] = instant_epoch(i.completion_time, zone)
        for i in instants:  # newest first: the first with a checkpoint is the position
            found = checkpoint_from_metadata(extra_metadata(timeline, i, self.table_path))
            if found is not None:
                ends = {tp.partition: o for tp, o in found.items() if tp.topic == self.topic}
                self.ends = ends
                return


_ZONES: dict[str, str] = {}


def timeline_zone(table_path: str) -> str:
    """``hoodie.table.timeline.timezone`` of the table (Hudi's default: LOCAL)."""
    if table_path not in _ZONES:
        from hudi import HudiTableBuilder

        props = HudiTableBuilder.from_base_uri(table_path).build().hudi_options()
        _ZONES[table_path] = props.get("hoodie.table.timeline.timezone", "LOCAL")
    return _ZONES[table_path]


def table_rows(table_path: str) -> list[tuple[int, int, str]]:
    """``(partition, offset, commit instant)`` of every row of the latest snapshot."""
    import pyarrow as pa
    from hudi import HudiTableBuilder

    batches = HudiTableBuilder.from_base_uri(table_path).build().read()
    if not batches:
        return []
    data = pa.Table.from_batches(batches)
    return list(
        zip(
            (int(p) for p in data["_partition"].to_pylist()),
            (int(o) for o in data["_offset"].to_pylist()),
            data["_hoodie_commit_time"].to_pylist(),
            strict=True,
        )
    )


def exactly_once(
    rows: list[tuple[int, int, str]], ends: Mapping[int, int], dead: Mapping[int, set[int]]
) -> dict[str, int]:
    """Missing and duplicate offsets: every offset below each end once, dead letters never."""
    counts: dict[tuple[int, int], int] = {}
    for p, o, _ in rows:
        counts[(p, o)] = counts.get((p, o), 0) + 1
    expected = {(p, o) for p, end in ends.items() for o in range(end) if o not in dead.get(p, ())}
    return {
        "rows": len(rows),
        "expected": len(expected),
        "missing": len(expected - counts.keys()),
        "unexpected": len(counts.keys() - expected),
        "duplicates": sum(n - 1 for n in counts.values() if n > 1),
    }


__all__ = ["HudiWatch", "exactly_once", "instant_epoch", "table_rows", "timeline_zone"]
