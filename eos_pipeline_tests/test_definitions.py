"""The Dagster code location loads, and a materialization moves one partition exactly once."""

from __future__ import annotations

import dagster as dg
import pytest

from eos_pipeline import definitions
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.definitions import parse_partition_key, partition_key


def test_code_location_loads() -> None:
    dg.Definitions.validate_loadable(definitions.defs)
    keys = definitions.demo_partitions.get_partition_keys()
    assert keys[0] == "demo-events__p0000"


@pytest.mark.parametrize("tp", [TopicPartition("orders", 7), TopicPartition("a.b-c_d", 1234)])
def test_partition_keys_round_trip_without_awkward_characters(tp: TopicPartition) -> None:
    key = partition_key(tp)
    assert not set(key) & set(", |[] ")
    assert parse_partition_key(key) == tp


def test_bad_partition_key_names_the_expected_form() -> None:
    with pytest.raises(ValueError, match="<topic>__p<NNNN>"):
        parse_partition_key("orders-7")
