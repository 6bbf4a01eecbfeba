"""The replay job and the ``eos-pipeline replay`` command on the real stack (ClickHouse sink).

A dry run shows the plan and changes nothing; a real one repairs the table; the exactly-once
check passes afterwards; a refusal names its reason, from the job and from the command.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
from clickhouse_connect.driver.client import Client

from eos_pipeline import cli
from eos_pipeline.adapters.clickhouse import ClickHouseSink
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.components.assets import CHECK_NAME, clickhouse_key, clickhouse_spec
from eos_pipeline.components.metadata import partitions_name
from eos_pipeline.components.replay import DRY_RUN_TAG, replay_job_name
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import keys_for
from eos_pipeline.sinks.clickhouse import ClickHouseReplay
from eos_pipeline_tests.support.definitions import build_definitions
from eos_pipeline_tests.support.defs_folder import write_defs

from .conftest import Rig, pipeline_yaml

pytestmark = pytest.mark.integration


def _counts(client: Client, rig: Rig) -> dict[int, int]:
    rows = client.query(
        f"SELECT _offset, count() FROM `{rig.database}`.events GROUP BY _offset"
    ).result_rows
    return {int(o): int(n) for o, n in rows}


def _replay(defs: dg.Definitions, instance: dg.DagsterInstance, rig: Rig, **config: object):
    job = defs.get_job_def(replay_job_name(rig.pipeline, "clickhouse"))
    op = f"{rig.pipeline}_replay_clickhouse_range"
    return job.execute_in_process(
        run_config={"ops": {op: {"config": {"partition": 0, **config}}}},
        instance=instance,
        raise_on_error=False,
    )


def test_replay_job_dry_run_then_replay_repairs_the_table_and_the_check_passes(
    make_rig: Callable[..., Rig], chdb_client: Client, tmp_path: Path, capsys
) -> None:
    rig = make_rig(partitions=1)
    rig.produce({0: 40}, bad_every=9)
    defs = build_definitions(rig.config)
    asset = clickhouse_key(rig.config.pipelines[0])
    key = keys_for(rig.topic, 1)[0]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(rig.pipeline), [key])

        def materialize() -> dg.ExecuteInProcessResult:
            return dg.materialize(
                [*defs.assets, *defs.asset_checks],
                selection=dg.AssetSelection.assets(asset),
                partition_key=key,
                instance=instance,
                resources=defs.resources,
            )

        materialize()
        expected = _counts(chdb_client, rig)
        assert len(expected) == 36 and set(expected.values()) == {1}
        # Rows lost by hand: the check fails.
        ClickHouseSink(chdb_client).delete_offsets(
            rig.database, "events", rig.topic, 0, OffsetRange(10, 20)
        )
        damaged = _counts(chdb_client, rig)
        check = materialize().get_asset_check_evaluations()[0]
        assert check.check_name == CHECK_NAME and not check.passed

        dry = _replay(defs, instance, rig, start=5, end=25)
        assert dry.success
        plan = dry.output_for_node(f"{rig.pipeline}_replay_clickhouse_range")["plan"]
        assert any("delete the table's rows" in line for line in plan)
        assert _counts(chdb_client, rig) == damaged  # a dry run writes nothing
        # the Runs list tells a dry run from a replay by its tag (run config is not shown)
        assert instance.get_run_by_id(dry.run_id).tags[DRY_RUN_TAG] == "true"

        done = _replay(defs, instance, rig, start=5, end=25, dry_run=False)
        assert done.success
        assert _counts(chdb_client, rig) == expected
        assert instance.get_run_by_id(done.run_id).tags[DRY_RUN_TAG] == "false"
        observed = instance.fetch_observations(dg.AssetKey(asset.path), limit=1).records
        assert observed and observed[0].partition_key == key
        check = materialize().get_asset_check_evaluations()[0]
        assert check.passed, check.metadata

        # The command line: the same job, refusing a range past the position with its reason.
        path = write_defs(
            pipeline_yaml(
                rig.pipeline,
                rig.topic,
                rig.kafka.bootstrap_servers,
                rig.config.keeper.hosts,
                chdb_client.path,
                rig.database,
                None,
            ),
            tmp_path / "defs",
        )
        base = ["replay", "--defs", str(path), "--pipeline", rig.pipeline, "--sink"]
        base += ["clickhouse", "--partition", "0"]
        assert cli.main([*base, "--from", "0", "--to", "41"]) == 1
        assert "refused:" in capsys.readouterr().err
        assert cli.main([*base, "--from", "30"]) == 0
        out = capsys.readouterr().out
        assert "replay " in out and "[30, 40)" in out and "add --yes" in out
        assert cli.main([*base, "--from", "30", "--yes"]) == 0
        assert "rows written: 9" in capsys.readouterr().out  # 10 records, 1 dead letter
        assert _counts(chdb_client, rig) == expected

        # A replay killed after its delete: the check fails, says why and what to run.
        def crash(step: str) -> None:
            if step == "replay_after_delete":
                raise RuntimeError("killed")

        settings = KeeperSettings(rig.config.keeper.hosts, rig.config.keeper.root)
        with KeeperStateStore(settings) as store, pytest.raises(RuntimeError, match="killed"):
            pipeline = rig.config.pipelines[0]
            killed = ClickHouseReplay(
                clickhouse_spec(pipeline),
                rig.kafka,
                store,
                ClickHouseSink(chdb_client),
                pipeline.dead_letter_topic,
                fault=crash,
            )
            killed.run(killed.plan(TopicPartition(rig.topic, 0), 0, 12))
        check = materialize().get_asset_check_evaluations()[0]
        assert not check.passed
        note = check.metadata["replay_in_flight"].value
        assert "--from 0 --to 12 --yes" in note
        assert _replay(defs, instance, rig, start=0, end=12, dry_run=False).success
        assert _counts(chdb_client, rig) == expected
        check = materialize().get_asset_check_evaluations()[0]
        assert check.passed and "replay_in_flight" not in check.metadata
