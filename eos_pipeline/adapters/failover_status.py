"""What ``eos-pipeline failover status`` reads: the active cluster and MM2's lag, both ways.

For each flow MirrorMaker 2 replicates for a pipeline (``A->B``, ``B->A``) and each partition
of the pipeline's topics: the source topic's end on the flow's source, the replica's end on its
target (read twice, ``sample_s`` apart, to see whether it moves), MM2's latest offset sync and
when it was written, and the original of the replica's last record (found by fingerprint in the
window the syncs give). ``core.failover.replication`` turns these into a lag and a verdict.

Each cluster is asked once, briefly (``MirrorReaders.unreachable``): a cluster that does not
answer is reported as unreachable, with its endpoint and the cause, and its flows are not read.
Reads only; nothing is written anywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from eos_pipeline.adapters.failover import FailoverPipeline, FailoverStates
from eos_pipeline.adapters.kafka import (
    KafkaReadError,
    KafkaSettings,
    end_offsets_of,
    ends_and_starts,
)
from eos_pipeline.adapters.keeper import KeeperStateStore
from eos_pipeline.adapters.mirror import (
    PROBE_TIMEOUT,
    MirrorReaders,
    read_offset_syncs,
    read_window,
)
from eos_pipeline.core.failover import (
    FRESH_SYNC_S,
    ActiveState,
    Flow,
    FlowReplication,
    MirroredRecord,
    ReplicaFacts,
    ResumeError,
    SyncHistory,
    Window,
    failback_advice,
    judge,
    resume_after,
)
from eos_pipeline.core.offsets import TopicPartition

#: The replica's last record is looked for among its last this many offsets (markers between).
_TAIL = 20
#: Longest stretch of the source read to find an original, or to count what is not copied.
_MAX_READ = 10_000


@dataclass(frozen=True)
class FailoverStatus:
    pipeline: str
    state: ActiveState
    flows: tuple[FlowReplication, ...]

    def lines(self) -> list[str]:
        """The report, as the command prints it."""
        s = self.state
        switch = (
            "no switch in flight"
            if s.switch is None
            else f"a switch {s.switch.source} -> {s.switch.target} is in flight (rerun "
            f"`eos-pipeline failover --pipeline {self.pipeline} --to {s.switch.target}`)"
        )
        done = f"{s.switches} switch{'' if s.switches == 1 else 'es'} so far"
        out = [f"{self.pipeline}: active cluster {s.active} ({done}); {switch}"]
        for f in self.flows:
            head = f"{f.flow}: {f.state}"
            if f.unreachable:
                head += ": " + "; ".join(f"{alias}: {why}" for alias, why in f.unreachable)
            elif f.partitions or f.missing:
                head += f", lag {f.lag} records"
            out.append(head)
            out += [f"  {name}: no replica on {f.flow.target} yet" for name in f.missing]
            out += [f"  {name}: not on {f.flow.source}, nothing to copy" for name in f.absent]
            for p in f.partitions:
                x = p.facts
                sync = (
                    "no offset sync"
                    if x.last_sync is None
                    else f"last sync {x.last_sync[0]}->{x.last_sync[1]}"
                    + ("" if x.sync_age_s is None else f" {x.sync_age_s:.0f} s ago")
                )
                copied = x.copied_to if p.exact else f"at least {x.synced_to} (by the syncs)"
                out.append(
                    f"  {p.name}: {p.state}, lag {p.lag}{'' if p.exact else ' at most'}; "
                    f"source end {x.source_end}, copied up to {copied}; replica end "
                    f"{x.remote_end} ({'moving' if x.remote_moved else 'not moving'}); {sync}"
                )
        out += failback_advice(s.active, self.flows)
        return out


def read_status(
    store: KeeperStateStore,
    fp: FailoverPipeline,
    *,
    sample_s: float = 1.0,
    fresh_s: float = FRESH_SYNC_S,
    probe_timeout: float = PROBE_TIMEOUT,
) -> FailoverStatus:
    """The pipeline's active cluster and, per flow MM2 replicates for it, the replication."""
    state, _ = FailoverStates(store).read(fp.name, fp.initial)
    with MirrorReaders(probe_timeout) as readers:
        flows = sorted(fp.clusters.flows)
        down = {
            f: tuple(
                (alias, why)
                for alias in (f.source, f.target)
                if (why := readers.unreachable(fp.settings[alias])) is not None
            )
            for f in flows
        }
        before: dict[Flow, dict[str, dict[int, int] | KafkaReadError]] = {}
        for f in flows:
            if not down[f]:
                try:
                    before[f] = _replica_ends(fp, f)
                except KafkaReadError as exc:  # it answered the probe, then stopped
                    down[f] = ((f.target, str(exc)),)
        if before and sample_s > 0:
            time.sleep(sample_s)

        def flow_or_fault(f: Flow) -> FlowReplication:
            if f not in before:
                return FlowReplication(f, unreachable=down[f])
            try:
                return _flow(fp, f, before[f], readers, fresh_s)
            except KafkaReadError as exc:  # a cluster lost after its probe: named, not raised
                return FlowReplication(f, unreachable=((str(f), str(exc)),))

        flows_read = tuple(flow_or_fault(f) for f in flows)
    return FailoverStatus(fp.name, state, flows_read)


def _remote(fp: FailoverPipeline, flow: Flow, topic: str) -> str:
    return fp.clusters.policy.remote_topic(flow.source, topic)


def _replica_ends(fp: FailoverPipeline, flow: Flow) -> dict[str, dict[int, int] | KafkaReadError]:
    remotes = [_remote(fp, flow, t) for t in fp.topics]
    return end_offsets_of(fp.settings[flow.target], remotes)


def _flow(
    fp: FailoverPipeline,
    flow: Flow,
    before: dict[str, dict[int, int] | KafkaReadError],
    readers: MirrorReaders,
    fresh_s: float,
) -> FlowReplication:
    source, target = fp.settings[flow.source], fp.settings[flow.target]
    history, written_at = _syncs(fp, flow, readers)
    now_ms = time.time() * 1000
    ends, starts = ends_and_starts(source, fp.topics)
    r_ends, r_starts = ends_and_starts(target, [_remote(fp, flow, t) for t in fp.topics])
    parts, missing, absent = [], [], []
    for topic in fp.topics:
        remote = _remote(fp, flow, topic)
        t_ends, t_starts = ends[topic], starts[topic]
        if isinstance(t_ends, KafkaReadError) or isinstance(t_starts, KafkaReadError):
            absent.append(topic)
            continue
        for p in sorted(t_ends):
            got, low = r_ends.get(remote), r_starts.get(remote)
            if isinstance(got, KafkaReadError) or got is None or p not in got:
                if t_ends[p] > t_starts[p]:  # records to copy, and nowhere to copy them yet
                    missing.append(f"{topic}[{p}]")
                continue
            earlier = before.get(remote)
            moved = isinstance(earlier, dict) and got[p] > earlier.get(p, got[p])
            tp = TopicPartition(topic, p)
            rtp = TopicPartition(remote, p)
            facts = _facts(
                source,
                target,
                tp,
                rtp,
                history,
                (t_starts[p], t_ends[p]),
                (low[p] if isinstance(low, dict) else 0, got[p]),
                readers,
            )
            sync = history.syncs(tp)
            age = None if tp not in written_at else max(0.0, (now_ms - written_at[tp]) / 1000)
            facts = replace(
                facts,
                last_sync=(sync[-1].upstream, sync[-1].downstream) if sync else None,
                sync_age_s=age,
                remote_moved=moved,
            )
            parts.append(judge(facts, fresh_s))
    return FlowReplication(flow, tuple(parts), missing=tuple(missing), absent=tuple(absent))


def _syncs(
    fp: FailoverPipeline, flow: Flow, readers: MirrorReaders
) -> tuple[SyncHistory, dict[TopicPartition, int]]:
    """Every sync the flow's topic holds, and when the latest of each partition was written."""
    holder = fp.settings[flow.offset_syncs_cluster(fp.offset_syncs_location)]
    written_at: dict[TopicPartition, int] = {}
    try:
        history = read_offset_syncs(
            holder,
            flow,
            location=fp.offset_syncs_location,
            policy=fp.clusters.policy,
            timeout=10.0,
            consumer=readers.get(holder),
            written_at=written_at,
        )
    except KafkaReadError:  # no syncs topic yet: MM2 has copied nothing on this flow
        return SyncHistory(flow), {}
    return history, written_at


def _facts(
    source: KafkaSettings,
    target: KafkaSettings,
    tp: TopicPartition,
    rtp: TopicPartition,
    history: SyncHistory,
    source_range: tuple[int, int],
    remote_range: tuple[int, int],
    readers: MirrorReaders,
) -> ReplicaFacts:
    """The ends, the syncs' bound and, when it can be found, the exact copied position."""
    (s_low, s_end), (r_low, r_end) = source_range, remote_range
    synced_to = history.inverse(tp, r_end, floor=s_low).position
    copied_to = s_low if r_end == r_low else None  # an empty replica: nothing copied yet
    tail = _read(target, rtp, Window(max(r_low, r_end - _TAIL), r_end), readers)
    if tail:
        last = tail[-1]
        window = history.origin_window(tp, last.offset, floor=s_low)
        end = min(s_end, window.end if window.end is not None else s_end)
        if end - window.start <= _MAX_READ:
            records = _read(source, tp, Window(window.start, end), readers)
            try:
                copied_to = resume_after(tp, last.fingerprint, records, window).position
            except ResumeError:
                copied_to = None  # not where the syncs say: the bound stands in
    uncopied = None
    if copied_to is not None and 0 < s_end - copied_to <= _MAX_READ:
        uncopied = len(_read(source, tp, Window(copied_to, s_end), readers))
    return ReplicaFacts(tp.topic, tp.partition, s_end, r_end, synced_to, copied_to, uncopied)


def _read(
    settings: KafkaSettings, tp: TopicPartition, window: Window, readers: MirrorReaders
) -> list[MirroredRecord]:
    return read_window(
        settings, tp, window, timeout=10.0, consumer=readers.get(settings),
        admin=readers.admin(settings),
    )  # fmt: skip


__all__ = ["FailoverStatus", "read_status"]
