"""One run of the clustered Hudi sink in a process of its own, on the session's Connect server.

Usage: ``python -m eos_pipeline_tests.support.hudi_failover_child '<json job>'`` with ``name``,
``topic``, ``clusters`` (alias -> bootstrap servers), ``initial``, ``location``, ``keeper``,
``root``, ``table``, ``remote`` (the Spark Connect URL) and ``kill_at`` (a Hudi sink step: the
process SIGKILLs itself there). A thin Connect client starts in seconds, where a classic session
would start a JVM of its own; the kill points are step boundaries with no Spark job running, so
the server has nothing of this run left to finish.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.failover import FailoverPipeline
from eos_pipeline.adapters.hudi import SMALL_TABLE_OPTIONS
from eos_pipeline.adapters.kafka import KafkaSettings
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.adapters.spark_remote import connect
from eos_pipeline.core.failover import ClusterSet
from eos_pipeline.core.schema import TableSchema
from eos_pipeline.sinks.hudi import HudiTableSpec, HudiTableSync
from eos_pipeline.sinks.source import ActiveCluster


def main(raw: str) -> int:
    job = json.loads(raw)
    fp = FailoverPipeline(
        name=job["name"],
        topics=(job["topic"],),
        sinks=(),
        clusters=ClusterSet.parse(list(job["clusters"])),
        settings={a: KafkaSettings(s) for a, s in job["clusters"].items()},
        initial=job["initial"],
        offset_syncs_location=job["location"],
    )
    spec = HudiTableSpec(
        pipeline=fp.name,
        topic=job["topic"],
        table_path=job["table"],
        table_name="events",
        schema=TableSchema.from_mapping({"id": "String"}),
        hudi_options=SMALL_TABLE_OPTIONS,
    )

    def kill(step: str) -> None:
        if step == job["kill_at"]:
            os.kill(os.getpid(), signal.SIGKILL)

    spark = connect(job["remote"])
    with KeeperStateStore(KeeperSettings(hosts=job["keeper"], root=job["root"])) as store:
        source = ActiveCluster(fp, store)
        dead_letters = DeadLetterWriter(source.kafka, f"{spec.topic}.dlq", spec.pipeline)
        HudiTableSync(spec, source, spark, dead_letters, fault=kill).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
