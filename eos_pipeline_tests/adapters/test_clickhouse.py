"""ClickHouseSink against the real ClickHouse engine (chDB, in-process), no mocks.

Expected row sets are written out by hand or computed with plain SQL on the raw client, never
with the sink's own helpers alone, so a broken helper cannot vouch for itself.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import clickhouse_connect
import pyarrow as pa
import pytest
from clickhouse_connect.driver.client import Client

from eos_pipeline.adapters.clickhouse import (
    ONE_BLOCK_THRESHOLD,
    ClickHouseSink,
    ClickHouseSinkError,
    parse_url,
    redact_url,
)
from eos_pipeline.core.offsets import OffsetRange
from eos_pipeline.core.schema import Column, SchemaError, SourceColumns, TableSchema
from eos_pipeline_tests.support.clickhouse import (
    JsonEachRowSink,
    Replication,
    create_database_sql,
    create_table_sql,
)

SCHEMA = TableSchema.from_mapping({"user": "String", "amount": "Int64"})
UTC = dt.UTC
T0 = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def token(topic: str, partition: int, start: int, end: int) -> str:
    """Stand-in for the project's token function: a chunk's identity is its own bounds."""
    return f"test-pipeline/{topic}/{partition}/{start}-{end}"


def rows(topic: str, partition: int, start: int, end: int) -> dict[str, list[Any]]:
    """A columnar chunk with one record per offset in [start, end)."""
    offsets = list(range(start, end))
    return {
        "_topic": [topic] * len(offsets),
        "_partition": [partition] * len(offsets),
        "_offset": offsets,
        "_timestamp": [T0] * len(offsets),
        "user": [f"u{o}" for o in offsets],
        "amount": [o * 10 for o in offsets],
    }


def json_lines(topic: str, partition: int, start: int, end: int) -> bytes:
    return b"\n".join(
        json.dumps(
            {
                "_topic": topic,
                "_partition": partition,
                "_offset": o,
                # A JSON number is read as seconds: milliseconds go after the decimal point.
                "_timestamp": 1_767_323_045.678,
                "user": f"u{o}",
                "amount": o * 10,
            }
        ).encode()
        for o in range(start, end)
    )


def offset_counts(client: Client, db: str, table: str) -> dict[int, int]:
    """Rows per offset, by plain SQL on the raw client (independent of the sink's helpers)."""
    result = client.query(f"SELECT _offset, count() FROM `{db}`.`{table}` GROUP BY _offset")
    return {int(o): int(n) for o, n in result.result_rows}


def active_parts(client: Client, db: str, table: str) -> list[int]:
    result = client.query(
        "SELECT rows FROM system.parts WHERE database = {d:String} AND table = {t:String} "
        "AND active ORDER BY name",
        parameters={"d": db, "t": table},
    )
    return [int(r[0]) for r in result.result_rows]


@pytest.fixture
def sink(chdb_client: Client) -> JsonEachRowSink:
    # Shares the session client: closing it would stop the engine for everyone. The product's
    # sink, plus the JSONEachRow insert some tests compare it with.
    return JsonEachRowSink(chdb_client, target="chdb (test session)")


@pytest.fixture
def db() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def table(sink: ClickHouseSink, db: str) -> str:
    sink.ensure_table(db, "events", SCHEMA, dedup_window=100)
    return "events"


# ---- table creation -----------------------------------------------------------------------------


def test_ensure_table_creates_mergetree_with_window_and_offset_order(
    sink: ClickHouseSink, chdb_client: Client, db: str
) -> None:
    sink.ensure_table(db, "events", SCHEMA, dedup_window=321)
    sink.ensure_table(db, "events", SCHEMA, dedup_window=321)  # idempotent

    engine, sorting_key, engine_full = chdb_client.query(
        "SELECT engine, sorting_key, engine_full FROM system.tables "
        "WHERE database = {d:String} AND name = 'events'",
        parameters={"d": db},
    ).result_rows[0]
    assert engine == "MergeTree"
    assert sorting_key == "_topic, _partition, _offset"
    assert "non_replicated_deduplication_window = 321" in engine_full
    columns = chdb_client.query(
        "SELECT name, type FROM system.columns WHERE database = {d:String} AND table = 'events' "
        "ORDER BY position",
        parameters={"d": db},
    ).result_rows
    assert columns == [
        ("_topic", "LowCardinality(String)"),
        ("_partition", "Int32"),
        ("_offset", "Int64"),
        ("_timestamp", "DateTime64(3, 'UTC')"),
        ("user", "String"),
        ("amount", "Int64"),
    ]


def test_declared_types_are_spelled_as_the_server_spells_them(
    sink: ClickHouseSink, chdb_client: Client, db: str
) -> None:
    # If our canonical spelling drifted from the server's, re-running ensure_table on an
    # unchanged table would report a false mismatch.
    declared = {
        "a": "String",
        "b": "UInt32",
        "c": "Float64",
        "d": "DateTime64(3)",
        "e": "Nullable(String)",
        "f": "LowCardinality(String)",
        "g": "Array(String)",
        "h": "Map(String,String)",
        "i": "Decimal(18,4)",
        "j": "DateTime64(6,'Europe/Berlin')",
        "k": "Tuple(x String, y Array(Int64))",
        "l": "LowCardinality(Nullable(String))",
        "m": "Bool",
    }
    schema = TableSchema.from_mapping(declared, SourceColumns(timestamp=None))
    sink.ensure_table(db, "types", schema)
    sink.ensure_table(db, "types", schema)
    server = dict(
        chdb_client.query(
            "SELECT name, type FROM system.columns WHERE database = {d:String} AND table = 'types'",
            parameters={"d": db},
        ).result_rows
    )
    assert {k: server[k] for k in declared} == {
        "a": "String",
        "b": "UInt32",
        "c": "Float64",
        "d": "DateTime64(3)",
        "e": "Nullable(String)",
        "f": "LowCardinality(String)",
        "g": "Array(String)",
        "h": "Map(String, String)",
        "i": "Decimal(18, 4)",
        "j": "DateTime64(6, 'Europe/Berlin')",
        "k": "Tuple(x String, y Array(Int64))",
        "l": "LowCardinality(Nullable(String))",
        "m": "Bool",
    }


def test_existing_table_with_other_columns_fails_naming_them(
    sink: ClickHouseSink, chdb_client: Client, db: str
) -> None:
    sink.ensure_table(db, "events", SCHEMA)
    changed = TableSchema.from_mapping({"user": "Int64", "amount": "Int64", "country": "String"})
    with pytest.raises(ClickHouseSinkError) as err:
        sink.ensure_table(db, "events", changed)
    message = str(err.value)
    assert "missing columns: country String" in message
    assert "user is String in the table but declared Int64" in message
    assert "amount" not in message  # unchanged columns are not blamed


def test_existing_table_without_dedup_window_is_refused(
    sink: ClickHouseSink, chdb_client: Client, db: str
) -> None:
    chdb_client.command(f"CREATE DATABASE `{db}`")
    columns = ", ".join(f"`{c.name}` {c.sql_type}" for c in SCHEMA.all_columns)
    chdb_client.command(
        f"CREATE TABLE `{db}`.`events` ({columns}) ENGINE = MergeTree ORDER BY _offset"
    )
    with pytest.raises(ClickHouseSinkError) as err:
        sink.ensure_table(db, "events", SCHEMA)
    assert "non_replicated_deduplication_window = 0" in str(err.value)
    assert f"ALTER TABLE `{db}`.`events` MODIFY SETTING" in str(err.value)


def test_dedup_window_below_one_is_rejected(sink: ClickHouseSink, db: str) -> None:
    for window in (0, -1, True):
        with pytest.raises(ValueError, match="dedup_window"):
            sink.ensure_table(db, "events", SCHEMA, dedup_window=window)


def test_literal_default_is_escaped_and_applied(
    sink: ClickHouseSink, chdb_client: Client, db: str
) -> None:
    tricky = "it's \\ a ') ; DROP TABLE x --"
    schema = TableSchema(
        (Column("user", "String"), Column("note", "String", default=tricky)),
        SourceColumns(timestamp=None),
    )
    sink.ensure_table(db, "events", schema)
    sink.insert_chunk(
        db,
        "events",
        {"_topic": ["t"], "_partition": [0], "_offset": [0], "user": ["u"]},
        token("t", 0, 0, 1),
    )
    assert chdb_client.query(f"SELECT note FROM `{db}`.`events`").result_rows == [(tricky,)]


def test_ddl_text_for_mergetree_and_replicated() -> None:
    schema = TableSchema.from_mapping({"v": "String"}, SourceColumns(timestamp=None))
    assert create_table_sql("d", "t", schema, dedup_window=50) == (
        "CREATE TABLE IF NOT EXISTS `d`.`t`\n(\n"
        "    `_topic` LowCardinality(String),\n"
        "    `_partition` Int32,\n"
        "    `_offset` Int64,\n"
        "    `v` String\n)\n"
        "ENGINE = MergeTree\n"
        "ORDER BY (`_topic`, `_partition`, `_offset`)\n"
        "SETTINGS non_replicated_deduplication_window = 50"
    )
    replicated = Replication(cluster="prod", dedup_window_seconds=86400)
    assert create_table_sql("d", "t", schema, dedup_window=50, replication=replicated) == (
        "CREATE TABLE IF NOT EXISTS `d`.`t` ON CLUSTER `prod`\n(\n"
        "    `_topic` LowCardinality(String),\n"
        "    `_partition` Int32,\n"
        "    `_offset` Int64,\n"
        "    `v` String\n)\n"
        "ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', "
        "'{replica}')\n"
        "ORDER BY (`_topic`, `_partition`, `_offset`)\n"
        "SETTINGS replicated_deduplication_window = 50, "
        "replicated_deduplication_window_seconds = 86400"
    )
    assert (
        create_database_sql("d", replicated)
        == "CREATE DATABASE IF NOT EXISTS `d` ON CLUSTER `prod`"
    )
    with pytest.raises(ValueError, match="zookeeper_path"):
        Replication(zookeeper_path="/x'); DROP TABLE y; --")
    with pytest.raises(ValueError, match="replica_name"):
        Replication(replica_name="{replica}\n")
    with pytest.raises(SchemaError, match="cluster name"):
        Replication(cluster="a b")


# ---- deduplication ------------------------------------------------------------------------------


def test_identical_reinsert_with_same_token_is_dropped(
    sink: ClickHouseSink, chdb_client: Client, db: str, table: str
) -> None:
    chunk = rows("orders", 3, 0, 10)
    assert sink.insert_chunk(db, table, chunk, token("orders", 3, 0, 10)) == 10
    assert sink.insert_chunk(db, table, chunk, token("orders", 3, 0, 10)) == 10
    assert offset_counts(chdb_client, db, table) == {o: 1 for o in range(10)}
    assert sink.offsets_in_table(db, table, "orders", 3) == [(o, 1) for o in range(10)]


def test_same_rows_with_another_token_are_not_dropped(
    sink: ClickHouseSink, chdb_client: Client, db: str, table: str
) -> None:
    # The token, not the content, is what ClickHouse deduplicates on.
    chunk = rows("orders", 3, 0, 10)
    sink.insert_chunk(db, table, chunk, "token-a")
    sink.insert_chunk(db, table, chunk, "token-b")
    assert offset_counts(chdb_client, db, table) == {o: 2 for o in range(10)}


def test_other_rows_under_a_seen_token_are_dropped(
    sink: ClickHouseSink, chdb_client: Client, db: str, table: str
) -> None:
    # Why a token must name exactly one offset range: a reused token silently loses rows.
    sink.insert_chunk(db, table, rows("orders", 3, 0, 10), "reused")
    sink.insert_chunk(db, table, rows("orders", 3, 10, 20), "reused")
    assert offset_counts(chdb_client, db, table) == {o: 1 for o in range(10)}


@pytest.mark.parametrize(
    ("first_attempt", "retried_batch", "chunks"),
    [
        # Overlap: [0, 10) landed, the retry reads [0, 20) and splits it at the stored max.
        (OffsetRange(0, 10), OffsetRange(0, 20), [OffsetRange(0, 10), OffsetRange(10, 20)]),
        # Crop: [10, 20) landed, the retry reads [5, 20) and crops into [5, 10) + [10, 20).
        (OffsetRange(10, 20), OffsetRange(5, 20), [OffsetRange(5, 10), OffsetRange(10, 20)]),
    ],
)
def test_chunk_tokens_from_own_bounds_dedupe_and_batch_tokens_duplicate(
    sink: ClickHouseSink,
    chdb_client: Client,
    db: str,
    first_attempt: OffsetRange,
    retried_batch: OffsetRange,
    chunks: list[OffsetRange],
) -> None:
    schema = SCHEMA
    sink.ensure_table(db, "own", schema, dedup_window=100)
    sink.ensure_table(db, "batch", schema, dedup_window=100)
    first = rows("t", 0, first_attempt.start, first_attempt.end)
    for tb in ("own", "batch"):
        sink.insert_chunk(db, tb, first, token("t", 0, first_attempt.start, first_attempt.end))

    # Right: each chunk's token comes from the chunk's own bounds.
    for chunk in chunks:
        sink.insert_chunk(
            db, "own", rows("t", 0, chunk.start, chunk.end), token("t", 0, chunk.start, chunk.end)
        )
    # Wrong: the chunks carry a token built from the whole (uncropped) batch bounds, so the
    # already-written chunk no longer matches its first token and is written again.
    for i, chunk in enumerate(chunks):
        batch_token = token("t", 0, retried_batch.start, retried_batch.end) + f"#{i}"
        sink.insert_chunk(db, "batch", rows("t", 0, chunk.start, chunk.end), batch_token)

    expected_once = {o: 1 for o in range(retried_batch.start, retried_batch.end)}
    assert offset_counts(chdb_client, db, "own") == expected_once
    duplicated = offset_counts(chdb_client, db, "batch")
    assert {o for o, n in duplicated.items() if n == 2} == set(
        range(first_attempt.start, first_attempt.end)
    )


# Session profiles that cut one INSERT into several blocks, as a server's user profile could.
STRICT_1000_ROWS = {
    "use_strict_insert_block_limits": 1,
    "max_insert_block_size": 1000,
    "min_insert_block_size_rows": 1000,
    "min_insert_block_size_bytes": 0,
}
SPLIT_PROFILES = {
    "strict-1000-rows": STRICT_1000_ROWS,
    # Parallel parsing hands 64 KiB segments to the squashing stage, which emits at the minimum.
    "parallel-parsing-min-rows": {
        "min_chunk_bytes_for_parallel_parsing": 65536,
        "min_insert_block_size_rows": 1000,
        "min_insert_block_size_bytes": 0,
    },
    "parallel-parsing-min-bytes": {
        "min_chunk_bytes_for_parallel_parsing": 65536,
        "min_insert_block_size_rows": 0,
        "min_insert_block_size_bytes": 100_000,
    },
}


@pytest.fixture
def profile_client(chdb_client: Client, request: pytest.FixtureRequest) -> Iterator[Client]:
    client = clickhouse_connect.get_client(
        interface="chdb", path=chdb_client.path, settings=request.param
    )
    yield client
    client.close()


def _table_without_merges(sink: ClickHouseSink, client: Client, db: str, tb: str) -> None:
    sink.ensure_table(db, tb, SCHEMA)
    # Background merges would fold the parts together and hide the split.
    client.command(f"SYSTEM STOP MERGES `{db}`.`{tb}`")


@pytest.mark.parametrize(
    "profile_client", SPLIT_PROFILES.values(), ids=SPLIT_PROFILES.keys(), indirect=True
)
def test_one_call_is_one_block_whatever_the_session_block_settings(
    sink: JsonEachRowSink, chdb_client: Client, profile_client: Client, db: str
) -> None:
    for tb in ("raw", "sunk"):
        _table_without_merges(sink, chdb_client, db, tb)
    # Control: without the sink's settings this profile splits the insert.
    profile_client.raw_insert(f"`{db}`.`raw`", None, json_lines("t", 0, 0, 5000), fmt="JSONEachRow")
    assert len(active_parts(chdb_client, db, "raw")) > 1

    small = JsonEachRowSink(profile_client, target="profile client")
    small.insert_json_each_row(db, "sunk", json_lines("t", 0, 0, 5000), token("t", 0, 0, 5000))
    small.insert_chunk(db, "sunk", rows("t", 0, 5000, 10000), token("t", 0, 5000, 10000))
    assert active_parts(chdb_client, db, "sunk") == [5000, 5000]
    # Retries through either client: the same single block under the same token, dropped.
    for again in (sink, small):
        again.insert_json_each_row(db, "sunk", json_lines("t", 0, 0, 5000), token("t", 0, 0, 5000))
        again.insert_chunk(db, "sunk", rows("t", 0, 5000, 10000), token("t", 0, 5000, 10000))
    assert offset_counts(chdb_client, db, "sunk") == {o: 1 for o in range(10000)}


@pytest.mark.parametrize("profile_client", [STRICT_1000_ROWS], ids=["strict"], indirect=True)
def test_a_retry_split_differently_duplicates_rows_without_the_sink(
    sink: ClickHouseSink, chdb_client: Client, profile_client: Client, db: str
) -> None:
    # Why the sink pins the split: ClickHouse suffixes the token with the block index, so a
    # first attempt sent as one block and a retry cut in five match on block 0 only.
    _table_without_merges(sink, chdb_client, db, "raw")
    same = {"insert_deduplication_token": "same-token"}
    for client in (chdb_client, profile_client):
        client.raw_insert(
            f"`{db}`.`raw`", None, json_lines("t", 0, 0, 5000), settings=same, fmt="JSONEachRow"
        )
    assert active_parts(chdb_client, db, "raw") == [5000, 1000, 1000, 1000, 1000]
    counts = offset_counts(chdb_client, db, "raw")
    assert {o for o, n in counts.items() if n == 2} == set(range(1000, 5000))


def _arrow_in_batches(chunk: dict[str, list[Any]], batches: int) -> pa.Table:
    ms = [int(ts.timestamp() * 1000) for ts in chunk["_timestamp"]]
    table = pa.table(
        {
            "_topic": chunk["_topic"],
            "_partition": pa.array(chunk["_partition"], pa.int32()),
            "_offset": pa.array(chunk["_offset"], pa.int64()),
            "_timestamp": pa.array(ms, pa.timestamp("ms", tz="UTC")),
            "user": chunk["user"],
            "amount": pa.array(chunk["amount"], pa.int64()),
        }
    )
    pieces = table.to_batches(max_chunksize=-(-table.num_rows // batches))
    return pa.Table.from_batches(pieces)


@pytest.mark.parametrize(
    ("first", "retry"),
    [("json", "columns"), ("columns", "arrow"), ("arrow", "json"), ("json", "json")],
)
def test_a_chunk_resent_by_any_path_is_dropped(
    sink: JsonEachRowSink, chdb_client: Client, db: str, table: str, first: str, retry: str
) -> None:
    # 100,000 rows: more than one default Native block (~2 MiB), JSON read block (65,409 rows)
    # and, for Arrow, built from four record batches, so each path would split by default.
    n = 100_000
    chunk = rows("t", 0, 0, n)
    send = {
        "json": lambda: sink.insert_json_each_row(db, table, json_lines("t", 0, 0, n), "tok"),
        "columns": lambda: sink.insert_chunk(db, table, chunk, "tok"),
        "arrow": lambda: sink.insert_chunk(db, table, _arrow_in_batches(chunk, 4), "tok"),
    }
    send[first]()
    send[retry]()
    assert offset_counts(chdb_client, db, table) == {o: 1 for o in range(n)}
    assert active_parts(chdb_client, db, table) == [n]


def test_insert_settings_pin_dedup_and_one_block(sink: ClickHouseSink) -> None:
    # Some of these only matter on an HTTP server (max_insert_block_size parses HTTP bodies),
    # so the set is checked here as well as by behaviour above.
    huge = 2**40
    assert sink.insert_settings("tok") == {
        "insert_deduplication_token": "tok",
        "insert_deduplicate": 1,
        "deduplicate_insert": "enable",
        "async_insert": 0,
        "min_insert_block_size_rows": huge,
        "min_insert_block_size_bytes": huge,
        "max_insert_block_size_bytes": 0,
        "use_strict_insert_block_limits": 0,
        "input_format_parallel_parsing": 0,
        "max_insert_block_size": huge,
        "max_block_size": huge,
        "input_format_max_block_size_bytes": 0,
    }
    assert huge == ONE_BLOCK_THRESHOLD
    for bad in ("", None, 5):
        with pytest.raises(ValueError, match="dedup_token"):
            sink.insert_settings(bad)  # type: ignore[arg-type]


def test_arrow_chunk_dedups_and_keeps_millisecond_timestamps(
    sink: ClickHouseSink, chdb_client: Client, db: str, table: str
) -> None:
    ms = [1_767_323_045_678 + i for i in range(5)]
    chunk = pa.table(
        {
            "_topic": ["t"] * 5,
            "_partition": pa.array([1] * 5, pa.int32()),
            "_offset": pa.array(range(100, 105), pa.int64()),
            "_timestamp": pa.array(ms, pa.timestamp("ms", tz="UTC")),
            "user": [f"u{i}" for i in range(5)],
            "amount": pa.array(range(5), pa.int64()),
        }
    )
    assert sink.insert_chunk(db, table, chunk, token("t", 1, 100, 105)) == 5
    assert sink.insert_chunk(db, table, chunk, token("t", 1, 100, 105)) == 5
    stored = chdb_client.query(
        f"SELECT _offset, toUnixTimestamp64Milli(_timestamp) FROM `{db}`.`{table}` ORDER BY _offset"
    ).result_rows
    assert stored == list(zip(range(100, 105), ms, strict=True))


def test_json_each_row_fast_path_dedups(
    sink: JsonEachRowSink, chdb_client: Client, db: str, table: str
) -> None:
    raw = json_lines("t", 2, 0, 50)
    sink.insert_json_each_row(db, table, raw, token("t", 2, 0, 50))
    sink.insert_json_each_row(db, table, raw, token("t", 2, 0, 50))
    assert offset_counts(chdb_client, db, table) == {o: 1 for o in range(50)}
    ts = chdb_client.query(
        f"SELECT DISTINCT toUnixTimestamp64Milli(_timestamp) FROM `{db}`.`{table}`"
    )
    assert ts.result_rows == [(1_767_323_045_678,)]


def test_a_bad_record_fails_the_whole_chunk_and_does_not_burn_its_token(
    sink: JsonEachRowSink, chdb_client: Client, db: str, table: str
) -> None:
    good = json_lines("t", 0, 0, 100).split(b"\n")
    broken = b"\n".join([*good[:50], b'{"_offset": "not a number"}', *good[50:]])
    with pytest.raises(ClickHouseSinkError, match="_offset"):
        sink.insert_json_each_row(db, table, broken, token("t", 0, 0, 100))
    assert offset_counts(chdb_client, db, table) == {}
    sink.insert_json_each_row(db, table, b"\n".join(good), token("t", 0, 0, 100))
    assert offset_counts(chdb_client, db, table) == {o: 1 for o in range(100)}


def test_empty_chunk_sends_nothing(
    sink: JsonEachRowSink, chdb_client: Client, db: str, table: str
) -> None:
    assert sink.insert_chunk(db, table, rows("t", 0, 5, 5), token("t", 0, 5, 5)) == 0
    sink.insert_json_each_row(db, table, b"\n", token("t", 0, 5, 5))
    # The token was not consumed: real rows under it still land.
    sink.insert_chunk(db, table, rows("t", 0, 5, 6), token("t", 0, 5, 5))
    assert offset_counts(chdb_client, db, table) == {5: 1}


def test_columns_of_unequal_length_are_rejected(sink: ClickHouseSink, db: str, table: str) -> None:
    chunk = rows("t", 0, 0, 3)
    chunk["amount"] = [1]
    with pytest.raises(ValueError, match="differ in length"):
        sink.insert_chunk(db, table, chunk, "x")


def test_dedup_memory_survives_closing_and_reopening_a_client(chdb_client: Client, db: str) -> None:
    # In this process the session client keeps the engine up; the test process below restarts it.
    url = f"chdb://{chdb_client.path}"
    with ClickHouseSink.connect(url) as first:
        first.ensure_table(db, "events", SCHEMA)
        first.insert_chunk(db, "events", rows("t", 0, 0, 10), token("t", 0, 0, 10))
    with ClickHouseSink.connect(url) as second:
        second.insert_chunk(db, "events", rows("t", 0, 0, 10), token("t", 0, 0, 10))
    assert offset_counts(chdb_client, db, "events") == {o: 1 for o in range(10)}


# ---- helpers for proofs -------------------------------------------------------------------------


def test_offsets_in_table_and_count_filter_by_topic_partition_and_range(
    sink: ClickHouseSink, db: str, table: str
) -> None:
    sink.insert_chunk(db, table, rows("a", 0, 0, 5), token("a", 0, 0, 5))
    sink.insert_chunk(db, table, rows("a", 1, 0, 3), token("a", 1, 0, 3))
    sink.insert_chunk(db, table, rows("b", 0, 0, 4), token("b", 0, 0, 4))
    sink.insert_chunk(db, table, rows("a", 0, 3, 5), "dup-on-purpose")
    assert sink.offsets_in_table(db, table, "a", 0) == [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2)]
    assert sink.offsets_in_table(db, table, "a", 0, within=OffsetRange(1, 4)) == [
        (1, 1),
        (2, 1),
        (3, 2),
    ]
    assert sink.offsets_in_table(db, table, "c", 0) == []
    assert sink.count(db, table) == 5 + 3 + 4 + 2
    assert sink.count(db, table, "a") == 5 + 3 + 2
    assert sink.count(db, table, "a", 1) == 3


def test_values_are_bound_not_spliced(sink: ClickHouseSink, db: str, table: str) -> None:
    sink.insert_chunk(db, table, rows("a", 0, 0, 5), token("a", 0, 0, 5))
    assert sink.offsets_in_table(db, table, "a' OR '1'='1", 0) == []
    assert sink.count(db, table, "a' OR 1=1 --") == 0


def test_custom_source_column_names(sink: ClickHouseSink, chdb_client: Client, db: str) -> None:
    src = SourceColumns(topic="k_topic", partition="k_part", offset="k_off", timestamp=None)
    schema = TableSchema.from_mapping({"v": "String"}, src)
    sink.ensure_table(db, "custom", schema)
    sorting_key = chdb_client.query(
        "SELECT sorting_key FROM system.tables WHERE database = {d:String} AND name = 'custom'",
        parameters={"d": db},
    ).result_rows[0][0]
    assert sorting_key == "k_topic, k_part, k_off"
    sink.insert_chunk(
        db, "custom", {"k_topic": ["x", "x"], "k_part": [0, 0], "k_off": [7, 8], "v": ["", ""]}, "c"
    )
    assert sink.offsets_in_table(db, "custom", "x", 0, source=src) == [(7, 1), (8, 1)]


# ---- names are validated before any SQL runs ---------------------------------------------------


class RecordingClient:
    """Passes every call to the real client and remembers the method names used."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if callable(attr):

            def call(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(name)
                return attr(*args, **kwargs)

            return call
        return attr


BAD_NAMES = [
    "events; DROP TABLE canary",
    "events`; DROP TABLE canary; --",
    "x.canary",
    "events--",
    "",
    "1events",
    "évents",
    "events ",
    "a" * 129,
]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_injection_through_names_is_rejected_before_sql(
    chdb_client: Client, db: str, bad: str
) -> None:
    real = ClickHouseSink(chdb_client)
    real.ensure_table(db, "canary", SCHEMA)
    recorder = RecordingClient(chdb_client)
    sink = JsonEachRowSink(recorder)  # type: ignore[arg-type]
    chunk = rows("t", 0, 0, 1)
    attempts = [
        lambda: sink.ensure_table(db, bad, SCHEMA),
        lambda: sink.ensure_table(bad, "events", SCHEMA),
        lambda: sink.ensure_table(db, "events", TableSchema.from_mapping({bad: "String"})),
        lambda: sink.ensure_table(db, "events", TableSchema.from_mapping({"v": bad or "x;"})),
        lambda: sink.insert_chunk(db, bad, chunk, "tok"),
        lambda: sink.insert_chunk(bad, "canary", chunk, "tok"),
        lambda: sink.insert_chunk(db, "canary", {**chunk, bad: ["x"]}, "tok"),
        lambda: sink.insert_chunk(db, "canary", pa.table({bad: ["x"]}), "tok"),
        lambda: sink.insert_json_each_row(db, bad, b'{"a":1}', "tok"),
        lambda: sink.insert_json_each_row(db, "canary", b'{"a":1}', "tok", column_names=[bad]),
        lambda: sink.offsets_in_table(db, bad, "t", 0),
        lambda: sink.count(bad, "canary"),
        lambda: sink.offsets_in_table(db, "canary", "t", 0, source=SourceColumns(offset=bad)),
    ]
    for attempt in attempts:
        with pytest.raises(SchemaError):
            attempt()
    assert [c for c in recorder.calls if c != "server_settings"] == []
    assert real.count(db, "canary") == 0  # still there


# ---- clear errors -------------------------------------------------------------------------------


def test_insert_into_missing_table_says_to_create_it(sink: JsonEachRowSink, db: str) -> None:
    sink.ensure_table(db, "events", SCHEMA)
    with pytest.raises(ClickHouseSinkError, match=r"does not exist.*ensure_table") as err:
        sink.insert_chunk(db, "evnets", rows("t", 0, 0, 1), "tok")
    assert f"{db}.evnets" in str(err.value)
    assert not err.value.retryable
    with pytest.raises(ClickHouseSinkError, match="database no_such_db does not exist"):
        sink.insert_json_each_row("no_such_db", "events", json_lines("t", 0, 0, 1), "tok")


def test_second_data_path_in_this_process_is_refused(chdb_client: Client, tmp_path: Path) -> None:
    with pytest.raises(ClickHouseSinkError, match="one data path per process") as err:
        ClickHouseSink.connect(f"chdb://{tmp_path / 'other'}")
    assert os.path.realpath(chdb_client.path) in str(err.value)
    assert chdb_client.query("SELECT 1").result_rows == [(1,)]  # the open engine is unharmed


def test_unusable_data_directory_is_reported(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(ClickHouseSinkError, match="cannot create chDB data directory"):
        ClickHouseSink.connect(f"chdb://{blocker / 'data'}")
    with pytest.raises(ClickHouseSinkError, match="is a file, not a directory"):
        ClickHouseSink.connect(f"chdb://{blocker}")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_server_error_names_target_but_never_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = _closed_port()
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ClickHouseSinkError) as err:
        ClickHouseSink.connect(f"http://bob:s3cr%40tPW@127.0.0.1:{port}/analytics")
    assert f"127.0.0.1:{port}" in str(err.value)
    assert err.value.retryable
    for secret in ("s3cr@tPW", "s3cr%40tPW"):
        assert secret not in str(err.value)
        assert secret not in caplog.text
    assert "bob:***@" in str(err.value)


# ---- URLs ---------------------------------------------------------------------------------------


def test_parse_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    real = os.path.realpath(tmp_path)
    assert parse_url(f"chdb://{tmp_path}/data").path == f"{real}/data"
    assert parse_url("chdb://rel/data").path == f"{real}/rel/data"
    assert parse_url("chdb:rel2").path == f"{real}/rel2"
    assert parse_url("chdb://rel/data").embedded

    server = parse_url("https://alice:p%3Ass@ch.example.com/analytics")
    assert (server.scheme, server.host, server.port) == ("https", "ch.example.com", 8443)
    assert (server.username, server.password, server.database) == ("alice", "p:ss", "analytics")
    assert "p%3Ass" not in repr(server) and "p:ss" not in repr(server)
    assert server.display == "https://alice:***@ch.example.com/analytics"
    plain = parse_url("http://localhost")
    assert (plain.port, plain.username, plain.database) == (8123, None, None)

    for bad, match in [
        ("chdb://", "names no data directory"),
        ("chdb://memory", "names no data directory"),
        ("postgres://h/db", "unsupported ClickHouse URL scheme"),
        ("localhost:8123", "unsupported ClickHouse URL scheme"),
        ("http://h:8123/db?secure=1", "query parameters"),
        ("http:///db", "names no host"),
        ("", "empty ClickHouse URL"),
    ]:
        with pytest.raises(ClickHouseSinkError, match=match):
            parse_url(bad)
    with pytest.raises(SchemaError, match="database in the ClickHouse URL"):
        parse_url("http://h/db;drop")


def test_redact_url() -> None:
    assert redact_url("http://u:pw@h:1/d") == "http://u:***@h:1/d"
    assert redact_url("http://h:1/d") == "http://h:1/d"


# ---- crash recovery across processes -----------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import json, sys
    from eos_pipeline.adapters.clickhouse import ClickHouseSink, ClickHouseSinkError
    from eos_pipeline.core.schema import TableSchema
    url, mode = sys.argv[1], sys.argv[2]
    schema = TableSchema.from_mapping({"user": "String", "amount": "Int64"})
    chunk = {"_topic": ["t"] * 10, "_partition": [0] * 10, "_offset": list(range(10)),
             "_timestamp": [0] * 10, "user": ["u"] * 10, "amount": list(range(10))}
    try:
        sink = ClickHouseSink.connect(url)
    except ClickHouseSinkError as ex:
        print(json.dumps({"error": str(ex), "retryable": ex.retryable}), flush=True)
        sys.exit(0)
    sink.ensure_table("crash", "events", schema)
    sink.insert_chunk("crash", "events", chunk, "test-pipeline/t/0/0-10")
    if mode == "hold":
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()
    print(json.dumps({"offsets": sink.offsets_in_table("crash", "events", "t", 0)}), flush=True)
    """
)


def _child(url: str, mode: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, url, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        **kwargs,
    )


def _last_json(proc: subprocess.Popen[str], stdin: str = "") -> dict[str, Any]:
    out, _ = proc.communicate(stdin, timeout=120)
    assert proc.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


def test_other_process_on_the_path_is_refused_and_dedup_survives_a_restart(
    tmp_path: Path,
) -> None:
    url = f"chdb://{tmp_path / 'engine'}"
    holder = _child(url, "hold")
    try:
        assert holder.stdout is not None
        assert json.loads(holder.stdout.readline()) == {"ready": True}
        contender = _last_json(_child(url, "once"))
        assert "in use by another process" in contender["error"]
        assert contender["retryable"] is True
    finally:
        first = _last_json(holder, "\n")
    assert first["offsets"] == [[o, 1] for o in range(10)]
    # A fresh process (a fresh engine) re-sends the same chunk with the same token.
    second = _last_json(_child(url, "once"))
    assert second["offsets"] == [[o, 1] for o in range(10)]


@pytest.fixture(autouse=True)
def _no_stray_engine_paths(chdb_client: Client) -> Iterator[None]:
    """Every test must leave the session engine usable for the next one."""
    yield
    assert chdb_client.query("SELECT 1").result_rows == [(1,)]
