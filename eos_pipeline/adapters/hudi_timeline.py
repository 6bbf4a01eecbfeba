"""A Hudi table's checkpoint and commit history, read without a JVM (hudi-rs), for the thin
clients (a Spark Connect run, a sensor tick, the CLI) that have none.

hudi-rs 0.5 does not give an instant's *completion* time, which the newest commit (the last to
complete under optimistic concurrency) and the checkpoint fence need; it is taken from the
timeline listing as Hudi's Java timeline does: ``<requested>_<completed>.<action>`` in
``.hoodie/timeline`` (table version 8+), the file's modification time in ``.hoodie`` (version 6).
The tests compare every answer with the Java API's.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from eos_pipeline.core.checkpoint import (
    CHECKPOINT_KEY_V1,
    CHECKPOINT_KEY_V2,
    CLUSTER_POSITION_SUFFIX,
    TOPIC_ID_SUFFIX,
    Checkpoint,
    checkpoint_from_metadata,
)

log = logging.getLogger(__name__)

#: Actions of Hudi's commits timeline that can complete (compaction completes as ``commit``,
#: clustering as ``replacecommit``).
COMMIT_ACTIONS = ("commit", "deltacommit", "replacecommit")
#: A read meeting a file being completed sees it whole on a quick re-read.
_ATTEMPTS = 3
_RETRY_PAUSE = 0.1

T = TypeVar("T")


class HudiTimelineError(RuntimeError):
    """The timeline of a Hudi table could not be read."""


@dataclass(frozen=True)
class CommitInfo:
    """A completed Hudi commit that carries a Kafka checkpoint."""

    instant_time: str  # when the commit was requested: Hudi's name for the instant
    completion_time: str | None
    action: str  # commit, or deltacommit for log-file writes to a Merge-on-Read table
    checkpoint: Checkpoint
    extra_metadata: Mapping[str, str]

    @property
    def topic_id(self) -> str | None:
        """Kafka's id of the topic the checkpoint is for; None if the writer did not record it."""
        return self._beside_checkpoint(TOPIC_ID_SUFFIX)

    @property
    def cluster_position(self) -> str | None:
        """The cluster position a clustered pipeline stored (JSON); None for other tables."""
        return self._beside_checkpoint(CLUSTER_POSITION_SUFFIX)

    def _beside_checkpoint(self, suffix: str) -> str | None:
        keys = (CHECKPOINT_KEY_V2 + suffix, CHECKPOINT_KEY_V1 + suffix)
        return next((self.extra_metadata[k] for k in keys if self.extra_metadata.get(k)), None)


@dataclass(frozen=True)
class Instant:
    """One completed instant of the commits timeline."""

    instant_time: str  # requested time: the instant's name
    completion_time: str | None  # None only if the listing no longer holds it (archived since)
    action: str
    handle: Any  # hudi-rs ``HudiInstant``, to read its metadata

    @property
    def order(self) -> tuple[str, str]:
        """Sort key of Hudi's own reader here: completion time, then requested time."""
        return (self.completion_time or "", self.instant_time)


def _with_retries(what: str, table_path: str, read: Callable[[], T]) -> T:
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            return read()
        except Exception as exc:
            if attempt == _ATTEMPTS:
                raise HudiTimelineError(f"{table_path}: reading {what} failed: {exc}") from exc
            log.debug("%s: reading %s failed (%s); again", table_path, what, exc)
            time.sleep(_RETRY_PAUSE)
    raise AssertionError("unreachable")  # pragma: no cover


def _filesystem(table_path: str) -> tuple[Any, str]:
    """A pyarrow filesystem and the table's path on it (local paths, ``file://``, object stores)."""
    from pyarrow import fs

    uri = table_path if "://" in table_path else os.path.abspath(table_path)
    return fs.FileSystem.from_uri(uri)


def table_exists(table_path: str) -> bool:
    """The path holds a Hudi table (its ``.hoodie/hoodie.properties`` exists)."""
    from pyarrow import fs

    filesystem, root = _filesystem(table_path)
    info = filesystem.get_file_info(f"{root.rstrip('/')}/.hoodie/hoodie.properties")
    return bool(info.type != fs.FileType.NotFound)


def _format_millis(mtime_ns: int, timezone: str) -> str:
    """An mtime as Hudi's instant format ``yyyyMMddHHmmssSSS`` in the timeline's time zone."""
    seconds, nanos = divmod(mtime_ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    if timezone.upper() != "UTC":  # LOCAL, Hudi's default: the machine's zone, as Java's
        moment = moment.astimezone()
    return moment.strftime("%Y%m%d%H%M%S") + f"{nanos // 1_000_000:03d}"


def _completion_times(table_path: str, props: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """``(requested, action) -> completion`` for every completed instant in the listing."""
    from pyarrow import fs

    filesystem, root = _filesystem(table_path)
    meta = f"{root.rstrip('/')}/.hoodie"
    layout = int(props.get("hoodie.timeline.layout.version", "2"))
    found: dict[tuple[str, str], str] = {}
    if layout >= 2:
        folder = f"{meta}/{props.get('hoodie.timeline.path', 'timeline')}"
        for info in filesystem.get_file_info(fs.FileSelector(folder, allow_not_found=True)):
            stem, _, action = info.base_name.partition(".")
            requested, underscore, completed = stem.partition("_")
            if underscore and action in COMMIT_ACTIONS:
                found[(requested, action)] = completed
        return found
    timezone = props.get("hoodie.table.timeline.timezone", "LOCAL")
    for info in filesystem.get_file_info(fs.FileSelector(meta, allow_not_found=True)):
        requested, _, action = info.base_name.partition(".")
        if action in COMMIT_ACTIONS and requested.isdigit() and info.mtime_ns is not None:
            found[(requested, action)] = _format_millis(info.mtime_ns, timezone)
    return found


def _load(table_path: str, options: Mapping[str, str] | None) -> tuple[Any, list[Instant]]:
    from hudi import HudiTableBuilder

    builder = HudiTableBuilder.from_base_uri(table_path)
    if options:
        builder = builder.with_options(dict(options))
    table = builder.build()
    timeline = table.get_timeline()
    loaded = [
        *timeline.get_completed_commits(),
        *timeline.get_completed_deltacommits(),
        *timeline.get_completed_replacecommits(),
    ]
    completion = _completion_times(table_path, table.hudi_options())
    instants = [
        Instant(i.timestamp, completion.get((i.timestamp, i.action)), i.action, i) for i in loaded
    ]
    return timeline, sorted(instants, key=lambda i: i.order, reverse=True)


def completed_instants(
    table_path: str, options: Mapping[str, str] | None = None
) -> tuple[Any, list[Instant]]:
    """The table's hudi-rs timeline and its completed commits, newest first; none if no table."""
    if not table_exists(table_path):
        return None, []
    return _with_retries("the timeline", table_path, lambda: _load(table_path, options))


def extra_metadata(timeline: Any, instant: Instant, table_path: str = "") -> dict[str, str]:
    """The commit's extra metadata (``extraMetadata``), null values left out as Java does."""

    def read() -> dict[str, str]:
        doc = json.loads(timeline.get_instant_metadata_in_json(instant.handle))
        extra = doc.get("extraMetadata") or {}
        return {str(k): str(v) for k, v in extra.items() if v is not None}

    return _with_retries(f"instant {instant.instant_time}", table_path, read)


def _commit_info(timeline: Any, instant: Instant, table_path: str) -> CommitInfo | None:
    metadata = extra_metadata(timeline, instant, table_path)
    found = checkpoint_from_metadata(metadata)
    if found is None:
        return None
    i = instant
    return CommitInfo(i.instant_time, i.completion_time, i.action, found, metadata)


def completed_commits(
    table_path: str, options: Mapping[str, str] | None = None
) -> list[tuple[str, str | None, str]]:
    """``(instant_time, completion_time, action)`` of the completed commits, newest first."""
    _, instants = completed_instants(table_path, options)
    return [(i.instant_time, i.completion_time, i.action) for i in instants]


def checkpoint_history(
    table_path: str, options: Mapping[str, str] | None = None
) -> list[CommitInfo]:
    """Every completed commit that carries a checkpoint, newest first (the audit trail)."""
    timeline, instants = completed_instants(table_path, options)
    found = (_commit_info(timeline, i, table_path) for i in instants)
    return [c for c in found if c is not None]


def latest_commit(table_path: str, options: Mapping[str, str] | None = None) -> CommitInfo | None:
    """The newest completed commit carrying a Kafka checkpoint, or None. Commits without one
    (compaction, clustering) move files, not the source position: passed over, as HoodieStreamer
    does."""
    timeline, instants = completed_instants(table_path, options)
    found = (_commit_info(timeline, i, table_path) for i in instants)
    return next((c for c in found if c is not None), None)


def latest_checkpoint(
    table_path: str, options: Mapping[str, str] | None = None
) -> Checkpoint | None:
    """Next offset per topic-partition after the latest completed commit; None for a new table."""
    commit = latest_commit(table_path, options)
    return commit.checkpoint if commit else None
