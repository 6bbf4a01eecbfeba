"""The Hudi asset: a run over all partitions is ONE commit; its sensor asks for one such run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)
from hudi import HudiTableBuilder
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from eos_dev.stack.services import StackConfig
from eos_pipeline.adapters.dlq import dead_letter_offsets
from eos_pipeline.adapters.hudi_timeline import checkpoint_history, latest_checkpoint
from eos_pipeline.adapters.kafka import end_offsets
from eos_pipeline.components.assets import CHECK_NAME, hudi_key
from eos_pipeline.components.metadata import ACTIVITY_KEYS, IDLE_CASE, partitions_name
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.planning import HUDI_TABLE_TAG, keys_for
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.defs_folder import write_defs
from eos_pipeline_tests.support.sensor_tick import tick

from .conftest import Rig, pipeline_yaml

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_one_run_over_all_partitions_is_one_commit_and_a_rerun_writes_nothing(
    make_rig: Callable[..., Rig], spark: SparkSession
) -> None:
    rig = make_rig(partitions=2, clickhouse=False, hudi=True)
    rig.produce({0: 12, 1: 9}, bad_every=5)
    defs = build_definitions(rig.config)
    pipeline = rig.config.pipelines[0]
    keys = keys_for(rig.topic, 2)
    sensor = f"{rig.pipeline}_hudi_lag"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), keys)
        # The sensor asks for ONE run covering both lagging partitions, as a key range.
        (request,) = tick(defs, sensor, instance).run_requests
        assert request.tags[ASSET_PARTITION_RANGE_START_TAG] == keys[0]
        assert request.tags[ASSET_PARTITION_RANGE_END_TAG] == keys[1]
        assert request.tags[HUDI_TABLE_TAG] == rig.hudi_path

        def run() -> dg.ExecuteInProcessResult:
            return dg.materialize(
                [*defs.assets, *defs.asset_checks],
                selection=dg.AssetSelection.assets(hudi_key(pipeline)),
                tags=request.tags,
                instance=instance,
                resources=defs.resources,
            )

        first = run()
        events = first.get_asset_materialization_events()
        # one materialization per partition of the range, all from the same single commit
        assert sorted(e.materialization.partition for e in events) == keys
        # each partition shows its own share of the commit (issue 16); the shares add up
        meta = {e.materialization.partition: e.materialization.metadata for e in events}
        assert [meta[k]["records_read"].value for k in keys] == [12, 9]
        assert {m["commit_records_read"].value for m in meta.values()} == {21}
        assert {m["lag_after"].value for m in meta.values()} == {0}
        assert {m["operation"].value for m in meta.values()} == {"upsert"}  # 21 records: small
        assert (
            sum(m["inserted"].value for m in meta.values())
            == meta[keys[0]]["commit_inserted"].value
        )
        assert sum(m["dead_letters"].value for m in meta.values()) == 4
        for m in meta.values():  # the partition's rows in the table after the commit
            assert m["dagster/row_count"].value == m["inserted"].value
        assert len(checkpoint_history(rig.hudi_path)) == 1
        # the check is filed per partition (issue 16: not once without a partition)
        assert [(c.partition, c.passed) for c in first.get_asset_check_evaluations()] == [
            (keys[0], True),
            (keys[1], True),
        ]
        statuses = instance.event_log_storage.get_asset_check_partition_info(
            [dg.AssetCheckKey(hudi_key(pipeline), CHECK_NAME)]
        )
        assert {i.partition_key: i.latest_execution_status.value for i in statuses} == {
            k: "SUCCEEDED" for k in keys
        }

        # Nothing new: the sensor is quiet, and a forced re-run (a backfill) commits nothing.
        assert not tick(defs, sensor, instance).run_requests
        again = run()
        meta = again.get_asset_materialization_events()[0].materialization.metadata
        # ... and says so, with no activity numbers to plot as zeros
        assert meta["case"].value == IDLE_CASE and not set(ACTIVITY_KEYS) & set(meta)
        assert len(checkpoint_history(rig.hudi_path)) == 1

        # On the data: every Kafka offset once, except the dead letters.
        dead = dead_letter_offsets(rig.kafka, pipeline.dead_letter_topic, rig.pipeline)
        rows = (
            spark.read.format("hudi")
            .load(rig.hudi_path)
            .groupBy("_partition", "_offset")
            .count()
            .collect()
        )
        counts = {(r[0], r[1]): r[2] for r in rows}
        ends = end_offsets(rig.kafka, rig.topic)
        expected = {
            (p, o): 1
            for p in ends
            for o in range(ends[p])
            if o not in dead.get(TopicPartition(rig.topic, p), set())
        }
        assert counts == expected and len(dead) == 2

        # A duplicate written by hand (same key, plain insert): the check fails and says so.
        dup = spark.read.format("hudi").load(rig.hudi_path).where(F.col("_partition") == 0)
        dup = dup.select(*[c for c in dup.columns if not c.startswith("_hoodie")]).limit(1)
        dup.write.format("hudi").option("hoodie.table.name", pipeline.hudi.table).option(
            "hoodie.datasource.write.operation", "bulk_insert"
        ).option("hoodie.datasource.write.recordkey.field", "_topic,_partition,_offset").option(
            "hoodie.metadata.enable", "false"
        ).mode("append").save(rig.hudi_path)
        result = dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=dg.AssetSelection.checks_for_assets(hudi_key(pipeline)),
            tags={"dagster/partition": keys[0]},
            instance=instance,
            resources=defs.resources,
            raise_on_error=False,
        )
        (evaluation,) = result.get_asset_check_evaluations()
        assert not evaluation.passed and evaluation.metadata["duplicates"].value == 1


def _remote_pipelines_file(
    rig: Rig, spark_connect: StackConfig, tmp_path: Path, hudi_extra: str = ""
) -> Path:
    """The rig's pipelines (a defs folder) with ``spark.remote`` naming the session's Connect
    server; ``hudi_extra``: more fields of the Hudi target (``follow: {...}``)."""
    text = pipeline_yaml(
        rig.pipeline,
        rig.topic,
        rig.kafka.bootstrap_servers,
        rig.config.keeper.hosts,
        str(tmp_path / "chdb"),
        None,
        rig.hudi_path,
    )
    remote = f"spark: {{remote: '{spark_connect.spark_connect_url}'}}"
    text = text.replace("spark: {quick_start: true}", remote)
    assert "remote:" in text
    if hudi_extra:
        table = f"table: {rig.pipeline}_events}}"
        assert table in text
        text = text.replace(table, f"table: {rig.pipeline}_events, {hudi_extra}}}")
    return write_defs(text, tmp_path / "defs")


@pytest.mark.spark_cluster
def test_a_run_is_a_thin_client_of_the_spark_connect_server(
    make_rig: Callable[..., Rig], spark_connect: StackConfig, tmp_path: Path
) -> None:
    """The pipelines file names the server (``spark.remote``); a run in a fresh process, as
    Dagster starts one, does its Spark work there and holds no JVM itself. Exact on the data,
    read back with hudi-rs."""
    rig = make_rig(partitions=2, clickhouse=False, hudi=True)
    rig.produce({0: 8, 1: 6}, bad_every=7)
    config_file = _remote_pipelines_file(rig, spark_connect, tmp_path)
    keys = keys_for(rig.topic, 2)
    keys_arg = [",".join(keys)]
    done = subprocess.run(
        [sys.executable, "-m", f"{__package__}.hudi_remote_child", str(config_file), *keys_arg],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["jvm"] is False, "the run started a JVM of its own"
    assert result["checks"] == [True, True]
    meta = result["meta"]
    assert [meta[k]["records_read"] for k in keys] == [8, 6]
    assert sum(meta[k]["dead_letters"] for k in keys) == 2

    pipeline = rig.config.pipelines[0]
    dead = dead_letter_offsets(rig.kafka, pipeline.dead_letter_topic, rig.pipeline)
    ends = end_offsets(rig.kafka, rig.topic)
    assert latest_checkpoint(rig.hudi_path) == {
        TopicPartition(rig.topic, p): e for p, e in ends.items()
    }
    expected = {
        (p, o)
        for p in ends
        for o in range(ends[p])
        if o not in dead.get(TopicPartition(rig.topic, p), set())
    }
    table = pa.Table.from_batches(HudiTableBuilder.from_base_uri(rig.hudi_path).build().read())
    pairs = list(zip(table["_partition"].to_pylist(), table["_offset"].to_pylist(), strict=True))
    assert len(pairs) == len(set(pairs)) and set(pairs) == expected


def _child(config_file: Path, keys: list[str], *extra: str) -> subprocess.Popen[str]:
    """A run of the asset in a fresh process; its output goes to files (a pipe it fills while
    the test waits would stall it)."""
    out = config_file.with_suffix(f".{len(extra)}.out")
    module = f"{__package__}.hudi_remote_child"
    with out.open("w") as stdout, out.with_suffix(".err").open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", module, str(config_file), ",".join(keys), *extra],
            stdout=stdout,
            stderr=stderr,
            text=True,
        )


def _result(child: subprocess.Popen[str], config_file: Path, *extra: str) -> dict:
    child.wait(timeout=300)
    out = config_file.with_suffix(f".{len(extra)}.out")
    text, err = out.read_text(), out.with_suffix(".err").read_text()
    assert child.returncode == 0, text[-3000:] + err[-3000:]
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.spark_cluster
def test_a_following_run_commits_each_burst_that_arrives_then_ends_when_idle(
    make_rig: Callable[..., Rig], spark_connect: StackConfig, tmp_path: Path
) -> None:
    """A run the sensor tags to follow goes on committing new records after its first commit,
    one Hudi commit (with its checkpoint) per burst, and ends once the stream has been quiet for
    ``idle_seconds``; a run launched by hand ends once caught up. Exact on the data (hudi-rs)."""
    import time

    from eos_pipeline.adapters.hudi_timeline import checkpoint_history as commits_of

    from ..support.hudi_rows import hudi_offsets

    rig = make_rig(partitions=2, clickhouse=False, hudi=True)
    rig.produce({0: 8, 1: 6}, bad_every=7)
    config_file = _remote_pipelines_file(rig, spark_connect, tmp_path, "follow: {idle_seconds: 4}")
    keys = keys_for(rig.topic, 2)
    tp0, tp1 = TopicPartition(rig.topic, 0), TopicPartition(rig.topic, 1)

    def wait_for(positions: dict[TopicPartition, int], child: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            got = latest_checkpoint(rig.hudi_path) or {}
            if all(got.get(tp) == end for tp, end in positions.items()):
                return
            assert child.poll() is None, "the run ended before it committed " + str(positions)
            time.sleep(0.1)
        raise AssertionError(f"no commit reached {positions}")

    following = _child(config_file, keys, "follow")
    wait_for({tp0: 8, tp1: 6}, following)  # the run's own first commit
    rig.produce({0: 5})  # burst 1, while it follows
    wait_for({tp0: 13, tp1: 6}, following)
    rig.produce({1: 4}, bad_every=2)  # burst 2
    wait_for({tp0: 13, tp1: 10}, following)
    result = following_result = _result(following, config_file, "follow")
    assert result["jvm"] is False and result["checks"] == [True, True]
    meta = result["meta"]
    # one materialization per partition covering every commit of the run
    assert [meta[k]["records_read"] for k in keys] == [13, 10]
    assert [meta[k]["lag_after"] for k in keys] == [0, 0]
    assert {meta[k]["commit_count"] for k in keys} == {3}
    assert {meta[k]["following_ended"] for k in keys} == {"no new records for 4 s"}
    history = commits_of(rig.hudi_path)  # newest first: each burst is a commit of its own
    assert [c.checkpoint for c in reversed(history)] == [
        {tp0: 8, tp1: 6},
        {tp0: 13, tp1: 6},
        {tp0: 13, tp1: 10},
    ]
    assert meta[keys[0]]["commits"] == ", ".join(c.instant_time for c in reversed(history))

    # a run launched by hand (no follow tag) ends as soon as it has caught up
    rig.produce({0: 3})
    by_hand = _result(_child(config_file, keys), config_file)
    assert "following_ended" not in by_hand["meta"][keys[0]]
    assert by_hand["meta"][keys[0]]["records_read"] == 3
    assert len(commits_of(rig.hudi_path)) == 4

    # every offset in the table exactly once, except the dead letters
    pipeline = rig.config.pipelines[0]
    dead = dead_letter_offsets(rig.kafka, pipeline.dead_letter_topic, rig.pipeline)
    ends = end_offsets(rig.kafka, rig.topic)
    assert ends == {0: 16, 1: 10}
    expected = {
        p: {o: 1 for o in range(ends[p]) if o not in dead.get(TopicPartition(rig.topic, p), set())}
        for p in ends
    }
    assert hudi_offsets(rig.hudi_path) == expected
    assert sum(len(v) for v in dead.values()) > 0
    # as it went, the following run recorded each partition: caught up (8, 6) before it
    # followed, then each burst's commit (13 on p0, 10 on p1), with the rows in the table then

    def rows(p: int, position: int) -> int:
        return sum(1 for o in expected[p] if o < position)

    assert [tuple(r) for r in following_result["recorded"]] == [
        (keys[0], 8, rows(0, 8)),
        (keys[1], 6, rows(1, 6)),
        (keys[0], 13, rows(0, 13)),
        (keys[1], 10, rows(1, 10)),
    ]
