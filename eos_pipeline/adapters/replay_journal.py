"""Where a ClickHouse replay is recorded while it runs: one znode per (pipeline, sink, partition).

``<root>/<pipeline>/@replay/<sink>/<topic>/<partition>`` holds a
:class:`~eos_pipeline.core.replay.JournalEntry` (``@`` keeps it apart from sink names, as
``@failover`` does). ``RUNNING`` means rows of the range may be deleted and not yet re-inserted:
the replay must be run again, and a replay of another range is refused until then. Writes are
compare-and-set on the znode's version, like every keeper write.
"""

from __future__ import annotations

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from eos_pipeline.adapters.keeper import ConflictError, KeeperStateStore
from eos_pipeline.core.keeper import validate_name, validate_topic
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.replay import JournalEntry

__all__ = ["ReplayJournal"]


class ReplayJournal:
    """Read and move the replay journal of one pipeline's sink."""

    def __init__(self, store: KeeperStateStore, pipeline: str, sink: str) -> None:
        self.store = store
        self.pipeline = validate_name("pipeline", pipeline)
        self.sink = validate_name("sink", sink)

    def path(self, tp: TopicPartition) -> str:
        topic = validate_topic(tp.topic)
        root = self.store.settings.root
        return f"{root}/{self.pipeline}/@replay/{self.sink}/{topic}/{tp.partition}"

    def read(self, tp: TopicPartition) -> tuple[JournalEntry | None, int | None]:
        """The entry and its znode version; (None, None) if no replay ever ran."""
        path = self.path(tp)
        try:
            data, stat = self.store.client.get(path)
        except NoNodeError:
            return None, None
        return JournalEntry.decode(data, path), stat.version

    def write(self, tp: TopicPartition, entry: JournalEntry, version: int | None) -> int:
        """Store ``entry`` if the znode is still at ``version``; return the new version."""
        path = self.path(tp)
        try:
            if version is None:
                self.store.client.create(path, entry.encode(), makepath=True)
                return 0
            return int(self.store.client.set(path, entry.encode(), version=version).version)
        except (BadVersionError, NodeExistsError):
            raise ConflictError(
                f"{path}: another replay of {tp} moved the journal; nothing more was done here"
            ) from None
