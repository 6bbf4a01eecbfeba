"""The switch's look at a pipeline's Hudi table: can its position move, before anything changes?

The Hudi table moves itself on its first run on the new cluster
(:mod:`eos_pipeline.sinks.hudi_clusters`); the switch only has to refuse up front what that run
could not do, as it does for keeper positions: a position without a fingerprint that no offset
sync translates exactly, a flow MM2 does not replicate, or a last-written record whose copy is
not in its bounded window. Read without a JVM (the table's timeline via hudi-rs).
"""

from __future__ import annotations

from eos_pipeline.adapters import hudi_timeline
from eos_pipeline.adapters.failover import FailoverPipeline, _histories, describe_start
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.adapters.mirror import MirrorReaders, TimeFloors, first_offset, read_window
from eos_pipeline.core.failover import Window, resume_after
from eos_pipeline.core.failover.switch import SwitchRefused
from eos_pipeline.core.failover.table_position import carry_over, flows_needed, stored_position
from eos_pipeline.core.offsets import TopicPartition


def check_hudi_table(
    fp: FailoverPipeline,
    table_path: str,
    target: str,
    store: KeeperStateStore,
    *,
    starts: dict[str, dict[str, object]] | None = None,
    readers: MirrorReaders | None = None,
) -> dict[str, tuple[int, int]]:
    """Refuse (``SwitchRefused``, core errors) if the table's position cannot move to
    ``target``; per moved partition, records read to check its mark and how many precede it.
    ``starts`` gets where each marked partition's re-read will start, and by which bound."""
    commit = hudi_timeline.latest_commit(table_path)
    if commit is None:
        return {}
    stored = stored_position(commit.cluster_position, commit.checkpoint, fp.initial)
    if stored.cluster == target:
        return {}
    topics = fp.topics[:1]  # one Hudi table follows the pipeline's first topic
    flows = flows_needed(stored, target, fp.clusters, topics) & set(fp.clusters.flows)
    histories = _histories(store, fp, flows, readers)
    on_target = None if readers is None else readers.get(fp.settings[target])
    admin = None if readers is None else readers.admin(fp.settings[target])

    def floor(tp: TopicPartition) -> int:
        try:
            return first_offset(fp.settings[target], tp, consumer=on_target)
        except Exception as exc:  # the replica topic may not exist yet
            raise SwitchRefused(
                f"Hudi table {table_path}: {target}:{tp} cannot be read ({exc}); is MirrorMaker "
                f"2 replicating to {target!r}?"
            ) from None

    time_floor = TimeFloors(fp.settings[target], admin=admin)
    _, moves = carry_over(stored, target, fp.clusters, topics, histories, floor, time_floor)
    checked = {}
    for m in moves:
        if m.mark is not None and starts is not None:
            starts[f"hudi {m.route.target}[{m.partition}]"] = describe_start(m)
        if m.mark is None or m.mark.window_end is None:
            continue
        tp = TopicPartition(m.route.target.topic, m.partition)
        window = Window(m.position, m.mark.window_end)
        records = read_window(fp.settings[target], tp, window, consumer=on_target, admin=admin)
        point = resume_after(tp, m.mark.fingerprint, records, window)
        checked[f"hudi {m.route.target}[{m.partition}]"] = (len(records), point.skipped)
    return checked


__all__ = ["check_hudi_table"]
