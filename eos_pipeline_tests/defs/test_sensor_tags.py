"""The planner's Dagster tag names are Dagster's own (no stack; the planner imports no Dagster)."""

from __future__ import annotations

import dagster as dg

from eos_pipeline.core.planning import RANGE_END_TAG, RANGE_START_TAG


def test_range_tags_make_a_partition_key_range_run() -> None:
    request = dg.RunRequest(tags={RANGE_START_TAG: "t__p0000", RANGE_END_TAG: "t__p0003"})
    assert request.partition_key_range == dg.PartitionKeyRange("t__p0000", "t__p0003")
