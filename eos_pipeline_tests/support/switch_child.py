"""A cluster switch in a process of its own, killed with SIGKILL at a chosen step boundary.

Usage: ``python -m eos_pipeline_tests.support.switch_child '<json job>'`` with ``name``,
``topics``, ``clusters`` (alias -> bootstrap servers), ``initial``, ``location``, ``keeper``
(hosts), ``root``, ``to`` and ``kill_at`` (a step boundary of
:func:`eos_pipeline.adapters.failover.switch`, e.g. ``switch_after_fence``).
"""

from __future__ import annotations

import json
import os
import signal
import sys

from eos_pipeline.adapters.failover import FailoverPipeline, switch
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.core.failover import ClusterSet


def main(raw: str) -> int:
    job = json.loads(raw)
    fp = FailoverPipeline(
        name=job["name"],
        topics=tuple(job["topics"]),
        sinks=("clickhouse",),
        clusters=ClusterSet.parse(list(job["clusters"])),
        settings={a: KafkaSettings(s) for a, s in job["clusters"].items()},
        initial=job["initial"],
        offset_syncs_location=job["location"],
    )

    def kill(step: str) -> None:
        if step == job["kill_at"]:
            os.kill(os.getpid(), signal.SIGKILL)

    with KeeperStateStore(KeeperSettings(hosts=job["keeper"], root=job["root"])) as store:
        switch(store, fp, job["to"], hook=kill)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
