"""A deliberate replay: re-process a chosen range ``[a, b)`` of one partition, below the sink's
committed position, on purpose (a fixed decoder, lost rows). Pure; :func:`plan_replay` says
before anything runs whether it may run and what it will do.

* ClickHouse: **delete** the partition's rows in ``[a, b)``, then re-read and insert in chunks
  under replay tokens (``<pipeline>~replay-<epoch>``: the original tokens are still in the
  dedup window and would drop the re-insert). A crash leaves the replay in flight in its
  journal; running it again deletes and re-inserts all under a new epoch. The position never
  moves.
* Hudi: rows are upserted by their Kafka coordinates, so re-writing is idempotent; commits keep
  the checkpoint (never backwards); rows of records now dead letters are deleted first.
* Dead letters: the proof counts ``rows = records - dead letters``, so the replay first writes
  a *marker* into every dead-letter partition; for that sink it withdraws the letters of the
  range before it, and the replay's own verdicts (after it, with ``eos.sink``) count instead.
  Markers are not letters (:func:`dead_offsets`); other sinks' proofs are unaffected.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.errors import LogChanged
from eos_pipeline.core.offsets import OffsetRange, TopicPartition

#: Journal phases: a replay started and not known to be complete, or complete.
RUNNING = "RUNNING"
DONE = "DONE"

#: Headers that make a dead-letter-topic record a replay marker rather than a letter.
MARKER_HEADERS = ("eos.replay.sink", "eos.replay.start", "eos.replay.end")


class ReplayRefused(ValueError):
    """The replay would not keep the tables exact, or cannot run now; nothing was written."""


class ReplayLogChanged(LogChanged, ReplayRefused):
    """The partition's position is not from the log Kafka holds now; nothing was written."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """The replay of one (pipeline, sink, partition), kept in the keeper."""

    range: OffsetRange
    phase: str
    epoch: int

    def encode(self) -> bytes:
        body = {"start": self.range.start, "end": self.range.end}
        body.update(epoch=self.epoch, phase=self.phase)
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> JournalEntry:
        try:
            body = json.loads(data)
            entry = cls(OffsetRange(body["start"], body["end"]), body["phase"], body["epoch"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ReplayRefused(f"unreadable replay journal at {where}: {exc}") from None
        if entry.phase not in (RUNNING, DONE):
            raise ReplayRefused(f"unreadable replay journal at {where}: phase {entry.phase!r}")
        return entry


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What a replay will do, fixed before it runs: ``position`` stays where it is, ``chunks`` are
    written one after the other, ``resumes`` finishes an interrupted replay of the range."""

    pipeline: str
    sink: str
    tp: TopicPartition
    range: OffsetRange
    position: int
    chunks: tuple[OffsetRange, ...]
    resumes: bool = False

    def describe(self) -> list[str]:
        """The plan in the words a user reads before confirming it."""
        what = f"{self.pipeline}/{self.sink} {self.tp} {self.range}"
        lines = [f"replay {what}: {self.range.width} offsets, position stays at {self.position}"]
        if self.resumes:
            lines.append("an interrupted replay of this range is finished (started again)")
        lines.append(
            f"1. write a replay marker for {self.range} to every dead-letter partition: "
            "earlier dead letters of the range no longer count for this sink"
        )
        if self.sink == "hudi":
            lines += [
                f"2. re-read {self.range} from Kafka, decode, send the bad records to the "
                "dead-letter topic",
                "3. delete the table's rows of records that are dead letters now (a commit "
                "with the checkpoint unchanged, only if there are any)",
                "4. upsert the good rows by their Kafka coordinates in one commit; the "
                "checkpoint stays unchanged",
            ]
        else:
            lines += [
                f"2. delete the table's rows of {self.tp} with offsets in {self.range}",
                f"3. re-read, decode and insert in {len(self.chunks)} chunk(s) under replay "
                "tokens; bad records go to the dead-letter topic",
                "4. mark the replay done in the keeper; a crash before: run it again",
            ]
        return lines


def plan_replay(
    pipeline: str,
    sink: str,
    tp: TopicPartition,
    *,
    start: int,
    end: int | None,
    state: SinkState | None,
    log_start: int,
    max_records: int,
    pending: JournalEntry | None = None,
) -> ReplayPlan:
    """Whether ``[start, end)`` (None: up to the position) may be replayed, and how; ``state``:
    the sink's stored position, ``pending``: its replay journal."""
    if state is None:
        raise ReplayRefused(
            f"{tp}: the {sink} sink has written nothing yet: there is nothing to replay, a "
            "normal run writes it"
        )
    if state.phase is Phase.BEFORE:
        raise ReplayRefused(
            f"{tp}: the {sink} sink has {state} in flight: let a run (or backfill) of the "
            "partition finish it first, then replay"
        )
    position = state.range.end
    stop = position if end is None else end
    if start < 0 or stop <= start:
        raise ReplayRefused(f"{tp}: nothing to replay in [{start}, {stop})")
    if stop > position:
        raise ReplayRefused(
            f"{tp}: [{start}, {stop}) reaches past the {sink} sink's position {position}: "
            f"offsets from {position} on are not written yet, a normal run writes them; "
            f"replay [{start}, {position}) at most"
        )
    if start < log_start:
        raise ReplayRefused(
            f"{tp}: offsets below {log_start} were deleted from Kafka (retention or "
            f"compaction); they cannot be read again. Replay from {log_start} on"
        )
    wanted = OffsetRange(start, stop)
    resumes = False
    if pending is not None and pending.phase == RUNNING:
        if wanted == pending.range:
            resumes = True
        else:
            raise ReplayRefused(
                f"{tp}: a replay of {pending.range} into {sink} was interrupted and its rows "
                f"may be missing: run that replay again first (--from {pending.range.start} "
                f"--to {pending.range.end})"
            )
    if max_records < 1:
        raise ValueError("max_records must be at least 1")
    cuts = range(wanted.start, wanted.end, max_records)
    chunks = tuple(OffsetRange(lo, min(lo + max_records, wanted.end)) for lo in cuts)
    return ReplayPlan(pipeline, sink, tp, wanted, position, chunks, resumes)


def replay_token_name(token_name: str, epoch: int) -> str:
    """The dedup token name a replay inserts under: never a normal one (pipeline names cannot
    hold ``~``) and new per attempt (a higher lease epoch), so the originals, still in the dedup
    window, do not swallow the replayed blocks."""
    if epoch < 1:
        raise ValueError(f"epoch must be >= 1, got {epoch}")
    return f"{token_name}~replay-{epoch}"


def marker_headers(
    pipeline: str, sink: str, tp: TopicPartition, replayed: OffsetRange
) -> list[tuple[str, bytes]]:
    """Headers of the replay marker (a record without key and value)."""
    return [
        ("eos.pipeline", pipeline.encode()),
        ("eos.source.topic", tp.topic.encode()),
        ("eos.source.partition", str(tp.partition).encode()),
        ("eos.replay.sink", sink.encode()),
        ("eos.replay.start", str(replayed.start).encode()),
        ("eos.replay.end", str(replayed.end).encode()),
    ]


def is_marker(headers: Mapping[str, str]) -> bool:
    return all(h in headers for h in MARKER_HEADERS)


def dead_offsets(
    entries: Iterable[tuple[int, int, Mapping[str, str]]], pipeline: str, sink: str | None
) -> dict[TopicPartition, set[int]]:
    """Source offsets that are dead letters *for* ``sink`` (None: every letter counts) from
    ``(partition, offset, headers)`` of the dead-letter log; a replay marker of ``sink``
    withdraws the earlier letters of its range in its partition."""
    by_partition: dict[int, list[tuple[int, Mapping[str, str]]]] = {}
    for part, offset, headers in entries:
        if headers.get("eos.pipeline") == pipeline:
            by_partition.setdefault(part, []).append((offset, headers))
    out: dict[TopicPartition, set[int]] = {}
    for records in by_partition.values():
        alive: dict[TopicPartition, set[int]] = {}
        for _, h in sorted(records, key=lambda r: r[0]):
            tp = TopicPartition(h["eos.source.topic"], int(h["eos.source.partition"]))
            if is_marker(h):
                if sink is not None and h["eos.replay.sink"] == sink:
                    withdrawn = OffsetRange(int(h["eos.replay.start"]), int(h["eos.replay.end"]))
                    alive[tp] = {o for o in alive.get(tp, set()) if o not in withdrawn}
                continue
            named = h.get("eos.sink")
            if sink is not None and named is not None and named != sink:
                continue
            alive.setdefault(tp, set()).add(int(h["eos.source.offset"]))
        for tp, offsets in alive.items():
            out.setdefault(tp, set()).update(offsets)
    return out
