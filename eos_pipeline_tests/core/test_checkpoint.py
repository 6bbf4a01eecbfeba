"""The HoodieStreamer-style Kafka checkpoint string: format, parse, merge, metadata keys."""

from __future__ import annotations

import pytest

from eos_pipeline.core.checkpoint import (
    CHECKPOINT_KEY_V1,
    CHECKPOINT_KEY_V2,
    CheckpointError,
    checkpoint_from_metadata,
    checkpoint_metadata,
    format_checkpoint,
    merge_checkpoint,
    parse_checkpoint,
    validate_checkpoint,
)
from eos_pipeline.core.offsets import TopicPartition


def tp(p: int, topic: str = "orders") -> TopicPartition:
    return TopicPartition(topic, p)


def test_keys_are_the_ones_hudi_streamer_uses() -> None:
    # Literal values from Hudi 1.2's StreamerCheckpointV1/V2: a typo here breaks hand-over.
    assert CHECKPOINT_KEY_V2 == "streamer.checkpoint.key.v2"
    assert CHECKPOINT_KEY_V1 == "deltastreamer.checkpoint.key"


def test_format_orders_partitions_and_uses_next_offsets() -> None:
    positions = {tp(2): 7, tp(0): 10, tp(1): 0}
    assert format_checkpoint(positions) == "orders,0:10,1:0,2:7"


def test_parse_is_the_inverse_of_format() -> None:
    text = "my.topic-1_x,0:0,1:9223372036854775807,2:42"
    parsed = parse_checkpoint(text)
    assert parsed == {
        tp(0, "my.topic-1_x"): 0,
        tp(1, "my.topic-1_x"): 2**63 - 1,
        tp(2, "my.topic-1_x"): 42,
    }
    assert format_checkpoint(parsed) == text


def test_parse_accepts_hudi_written_order_even_if_unsorted() -> None:
    # HoodieStreamer sorts, but a hand-set checkpoint (--checkpoint) may not be.
    assert parse_checkpoint("t,1:5,0:3") == {tp(0, "t"): 3, tp(1, "t"): 5}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("orders", "names no partition"),
        ("orders,", "names no partition"),
        ("20250101120000000", "names no partition"),  # a V2 instant-time checkpoint
        (",0:1", "invalid Kafka topic name"),
        ("bad topic,0:1", "invalid Kafka topic name"),
        ("orders,0:1,", "bad entry ''"),
        ("orders,0", "bad entry '0'"),
        ("orders,0:", "bad entry '0:'"),
        ("orders,:5", "bad entry ':5'"),
        ("orders,0:-1", "bad entry '0:-1'"),
        ("orders,0:+1", "bad entry '0:+1'"),
        ("orders,0: 1", "bad entry '0: 1'"),
        ("orders,0:1:2", "bad entry '0:1:2'"),
        ("orders,0:1.5", "bad entry '0:1.5'"),
        ("orders,0:9223372036854775808", "out of range"),
        ("orders,2147483648:1", "out of range"),
        ("orders,0:1,0:2", "partition 0 appears twice"),
    ],
)
def test_parse_rejects_malformed_strings_with_a_clear_message(text: str, fragment: str) -> None:
    with pytest.raises(CheckpointError) as info:
        parse_checkpoint(text)
    assert fragment in str(info.value)


def test_format_refuses_incomplete_or_mixed_checkpoints() -> None:
    with pytest.raises(CheckpointError, match=r"missing \[1\]"):
        format_checkpoint({tp(0): 1, tp(2): 1})
    with pytest.raises(CheckpointError, match=r"missing \[3\]"):
        format_checkpoint({tp(0): 1, tp(1): 1, tp(2): 1}, partition_count=4)
    with pytest.raises(CheckpointError, match=r"unexpected \[2\]"):
        format_checkpoint({tp(0): 1, tp(1): 1, tp(2): 1}, partition_count=2)
    with pytest.raises(CheckpointError, match="exactly one topic"):
        format_checkpoint({tp(0, "a"): 1, tp(0, "b"): 1})
    with pytest.raises(CheckpointError, match="exactly one topic"):
        format_checkpoint({})
    with pytest.raises(CheckpointError, match="outside"):
        validate_checkpoint({tp(0): -1})
    with pytest.raises(CheckpointError, match="must be an int"):
        validate_checkpoint({tp(0): True})


def test_merge_carries_untouched_partitions_forward() -> None:
    previous = {tp(0): 10, tp(1): 20, tp(2): 30}
    merged = merge_checkpoint(previous, {tp(1): 25})
    assert merged == {tp(0): 10, tp(1): 25, tp(2): 30}
    assert previous == {tp(0): 10, tp(1): 20, tp(2): 30}  # not mutated
    assert format_checkpoint(merged) == "orders,0:10,1:25,2:30"


def test_merge_on_a_new_table_takes_the_transaction_as_is() -> None:
    assert merge_checkpoint(None, {tp(0): 3, tp(1): 4}) == {tp(0): 3, tp(1): 4}


def test_merge_adds_a_partition_new_to_the_topic() -> None:
    merged = merge_checkpoint({tp(0): 10, tp(1): 20}, {tp(2): 5})
    assert format_checkpoint(merged, partition_count=3) == "orders,0:10,1:20,2:5"


def test_merge_refuses_rewind_unless_asked() -> None:
    with pytest.raises(CheckpointError, match="move back from 20 to 15"):
        merge_checkpoint({tp(0): 10, tp(1): 20}, {tp(1): 15})
    assert merge_checkpoint({tp(1): 20}, {tp(1): 15}, allow_rewind=True) == {tp(1): 15}
    # Standing still is not a rewind: an empty range still commits its (unchanged) end.
    assert merge_checkpoint({tp(1): 20}, {tp(1): 20}) == {tp(1): 20}


def test_merge_refuses_other_topic_or_empty_transaction() -> None:
    with pytest.raises(CheckpointError, match="topic mismatch"):
        merge_checkpoint({tp(0, "a"): 1}, {tp(0, "b"): 2})
    with pytest.raises(CheckpointError, match="at least one partition"):
        merge_checkpoint({tp(0): 1}, {})


def test_metadata_written_under_v2_and_read_back() -> None:
    positions = {TopicPartition("orders", 0): 5, TopicPartition("orders", 1): 6}
    extra = checkpoint_metadata(positions)
    assert extra == {CHECKPOINT_KEY_V2: "orders,0:5,1:6"}
    assert checkpoint_from_metadata(extra) == positions


@pytest.mark.parametrize(
    ("table_version", "key"),
    [
        (None, CHECKPOINT_KEY_V2),
        (9, CHECKPOINT_KEY_V2),
        (8, CHECKPOINT_KEY_V2),
        (6, CHECKPOINT_KEY_V1),
    ],
)
def test_metadata_key_follows_the_table_version_as_hudi_streamer_does(
    table_version: int | None, key: str
) -> None:
    # Version-6 tables (Hudi 0.14/0.15) carry V1, the only key a 0.x streamer reads.
    positions = {TopicPartition("orders", 0): 5}
    assert checkpoint_metadata(positions, table_version=table_version) == {key: "orders,0:5"}


def test_metadata_v1_only_is_read_as_written_by_older_streamers() -> None:
    extra = {CHECKPOINT_KEY_V1: "orders,0:11,1:12", "schema": "{}"}
    assert checkpoint_from_metadata(extra) == {tp(0): 11, tp(1): 12}


def test_metadata_v2_wins_over_v1_and_empty_values_are_ignored() -> None:
    both = {CHECKPOINT_KEY_V1: "orders,0:1", CHECKPOINT_KEY_V2: "orders,0:2"}
    assert checkpoint_from_metadata(both) == {tp(0): 2}
    empty_v2 = {CHECKPOINT_KEY_V2: "", CHECKPOINT_KEY_V1: "orders,0:1"}
    assert checkpoint_from_metadata(empty_v2) == {tp(0): 1}
    assert checkpoint_from_metadata({"schema": "{}"}) is None
    assert checkpoint_from_metadata({CHECKPOINT_KEY_V2: None}) is None


def test_metadata_with_a_malformed_value_names_the_key() -> None:
    with pytest.raises(CheckpointError) as info:
        checkpoint_from_metadata({CHECKPOINT_KEY_V2: "20250101120000000"})
    assert str(info.value).startswith(f"commit metadata {CHECKPOINT_KEY_V2}: ")
    assert "names no partition" in str(info.value)
