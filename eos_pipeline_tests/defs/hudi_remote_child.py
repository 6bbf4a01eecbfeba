"""Child process: one Dagster run of the Hudi asset whose Spark resource is a Connect client.

Run as ``python -m eos_pipeline_tests.defs.hudi_remote_child <defs folder> <partition keys>
[follow]`` (keys comma-separated; ``follow``: tagged as the lag sensor tags a run to follow). A
fresh process, as a Dagster run is: the resource puts it in Connect mode. Prints one JSON line:
the run's per-partition metadata, what a following run recorded as it went, and whether this
process held a JVM (it must not).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from eos_pipeline.components.assets import hudi_key
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.components.project import load_project
from eos_pipeline.core.planning import FOLLOW_TAG
from eos_pipeline_tests.support.definitions import build_definitions


def main(argv: list[str]) -> int:
    config = load_project(Path(argv[1])).config
    keys = argv[2].split(",")
    pipeline = config.pipelines[0]
    defs = build_definitions(config)
    follow = {FOLLOW_TAG: "true"} if argv[3:] == ["follow"] else {}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(pipeline.name), keys)
        result = dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=dg.AssetSelection.assets(hudi_key(pipeline)),
            tags={
                ASSET_PARTITION_RANGE_START_TAG: keys[0],
                ASSET_PARTITION_RANGE_END_TAG: keys[-1],
                **follow,
            },
            instance=instance,
            resources=defs.resources,
        )
    from pyspark import SparkContext

    meta = {
        e.materialization.partition: {k: v.value for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
    }
    # what a following run recorded while it ran (in order): partition, position, rows
    recorded = [
        (m.partition, m.metadata["position"].value, m.metadata["dagster/row_count"].value)
        for e in result.get_asset_materialization_events()
        if "following" in (m := e.materialization).metadata
    ]
    checks = [c.passed for c in result.get_asset_check_evaluations()]
    jvm = SparkContext._active_spark_context is not None
    out = {"meta": meta, "checks": checks, "jvm": jvm, "recorded": recorded}
    print(json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
