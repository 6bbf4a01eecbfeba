"""MirrorMaker 2's offset syncs kept in the keeper, for a switch away from a cluster that is down.

MM2 writes a flow's offset syncs to a compacted topic on the flow's source cluster (its default
``offset-syncs.topic.location``). A failover away from that cluster, because it is down, cannot
read them there; and compaction keeps only the latest sync per partition, so an older position
would translate to the start of the replica. So the product keeps its own copy: every sink run
on the active cluster folds the syncs written since the last copy into it, and every switch
does too when it can read the topic, each stored trimmed to the latest :data:`KEEP` syncs per
partition (a few kilobytes) at ``<root>/<pipeline>/@syncs/<source>.<target>``. When the topic
cannot be read the switch uses the copy: the translation is as conservative as with the topic
(the fingerprint makes the resume exact), only the re-read may be longer if MM2 synced after
the last copy.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException
from kazoo.exceptions import NodeExistsError, NoNodeError

from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.adapters.mirror import MirrorReadError, read_offset_syncs
from eos_pipeline.core.failover import Flow, SyncHistory
from eos_pipeline.core.failover.errors import FailoverError

if TYPE_CHECKING:
    from eos_pipeline.adapters.failover import FailoverPipeline

log = logging.getLogger(__name__)

#: Syncs kept per partition: MM2 syncs at most every ``offset.lag.max`` records, so this covers
#: the last KEEP * offset.lag.max records of each partition at least.
KEEP = 64
#: How long a switch waits for the syncs topic when a stored copy can stand in for it.
SHORT_TIMEOUT = 10.0


class SyncArchive:
    """The stored copies of one pipeline's sync histories, one znode per flow."""

    def __init__(self, store: KeeperStateStore, pipeline: str) -> None:
        self.store = store
        self.pipeline = pipeline

    def path(self, flow: Flow) -> str:
        # '.' is not allowed in a cluster alias, so the two aliases read back unambiguously
        return f"{self.store.settings.root}/{self.pipeline}/@syncs/{flow.source}.{flow.target}"

    def load(self, flow: Flow) -> SyncHistory | None:
        try:
            data, _ = self.store.client.get(self.path(flow))
        except NoNodeError:
            return None
        try:
            history = SyncHistory.from_dict(json.loads(data.decode()))
        except (ValueError, UnicodeDecodeError) as exc:
            raise FailoverError(
                f"corrupt stored offset syncs at {self.path(flow)}: {exc}"
            ) from None
        if history.flow != flow:
            raise FailoverError(f"{self.path(flow)} holds the syncs of {history.flow}, not {flow}")
        return history

    def save(self, history: SyncHistory) -> None:
        """Store ``history`` trimmed (last writer wins: every copy is a prefix of the topic)."""
        data = json.dumps(history.trimmed(KEEP).to_dict(), separators=(",", ":")).encode()
        path = self.path(history.flow)
        try:
            self.store.client.set(path, data)
        except NoNodeError:
            try:
                self.store.client.create(path, data, makepath=True)
            except NodeExistsError:
                self.store.client.set(path, data)


def refresh(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    flow: Flow,
    *,
    timeout: float | None = None,
    consumer: Consumer | None = None,
) -> SyncHistory:
    """The flow's syncs: the stored copy plus what the topic holds since, stored again.

    When the topic cannot be read (its cluster is down) the stored copy is returned alone, with
    a warning; without a stored copy the read's error is raised. ``consumer``: one reaching the
    syncs' cluster, reused (``adapters.mirror.MirrorReaders``).
    """
    archive = SyncArchive(store, fp.name)
    stored = archive.load(flow)
    holder = flow.offset_syncs_cluster(fp.offset_syncs_location)
    wait = timeout if timeout is not None else (SHORT_TIMEOUT if stored is not None else 30.0)
    before = None if stored is None else (stored.source_position, len(stored))
    try:
        history = read_offset_syncs(
            fp.settings[holder],
            flow,
            stored,
            location=fp.offset_syncs_location,
            policy=fp.clusters.policy,
            timeout=wait,
            consumer=consumer,
        )
    except (KafkaException, MirrorReadError) as exc:
        if stored is None:
            raise
        log.warning(
            "%s: offset syncs of %s unreadable on %s (%s); using the %d stored syncs up to "
            "position %d of the syncs topic",
            fp.name,
            flow,
            holder,
            exc,
            len(stored),
            stored.source_position,
        )
        return stored
    if (history.source_position, len(history)) != before:
        archive.save(history)
    return history


def record_syncs(store: KeeperStateStore, fp: FailoverPipeline, active: str) -> int:
    """At a sink run on ``active``: fold in the syncs held there (what a switch away from it
    would need if it went down). Returns how many flows were stored; a flow whose syncs cannot
    be read now (MM2 has copied nothing on it yet) is left for the next run."""
    stored = 0
    for flow in sorted(fp.clusters.flows):
        if flow.offset_syncs_cluster(fp.offset_syncs_location) != active:
            continue
        try:
            refresh(store, fp, flow, timeout=SHORT_TIMEOUT)
            stored += 1
        except (KafkaException, MirrorReadError) as exc:
            # never a reason to stop the sink: the copy is refreshed again on the next run
            log.info("%s: offset syncs of %s not kept this time (%s)", fp.name, flow, exc)
    return stored


__all__ = ["KEEP", "SyncArchive", "record_syncs", "refresh"]
