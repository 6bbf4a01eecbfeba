"""What the Dagster UI shows, without a stack: checks filed per partition in range runs, each
partition's own numbers, and the tables' identity and columns (issue 16)."""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import warnings
from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from eos_pipeline.components.assets import CHECK_NAME, clickhouse_key, hudi_key
from eos_pipeline.components.checks import check_events
from eos_pipeline.components.config import ConfigError, parse_config
from eos_pipeline.components.metadata import (
    ROW_COUNT_KEY,
    TABLE_MAX_ROWS,
    RunMetadata,
    _package_version,
    code_version,
    partitions_table,
    per_partition,
    record_run,
)
from eos_pipeline.core.offsets import OffsetRange
from eos_pipeline.core.planning import keys_for, parse_partition_key
from eos_pipeline.core.proof import compare
from eos_pipeline_tests.support.definitions import build_definitions

from .conftest import pipeline_yaml

TOPIC = "t"
KEYS = keys_for(TOPIC, 3)
PARTITIONS = dg.DynamicPartitionsDefinition(name="ui_parts")
#: Rows read per partition in the fake run; partition 1 has a duplicate offset in the table.
READ = {0: 4, 1: 3, 2: 0}
BAD = {1}


def _table(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    per_partition(
        context,
        {
            key: {"records_read": READ[parse_partition_key(key).partition], ROW_COUNT_KEY: 7}
            for key in context.partition_keys
        },
    )
    total = sum(READ[parse_partition_key(k).partition] for k in context.partition_keys)
    return dg.MaterializeResult(metadata={"records_read": total, "commit_records_read": total})


def _exact(context: dg.AssetCheckExecutionContext) -> Iterator[Any]:
    proofs = []
    for key in sorted(context.partition_keys):
        tp = parse_partition_key(key)
        n = READ[tp.partition]
        rows = {o: 2 if tp.partition in BAD and o == 0 else 1 for o in range(n)}
        proofs.append(compare(tp, OffsetRange(0, n), range(n), (), rows))
    yield from check_events(context, proofs, table.key)


with warnings.catch_warnings():
    # chosen as in the product: single-run backfills (beta), partitioned checks (preview)
    warnings.simplefilter("ignore", dg.BetaWarning)
    warnings.simplefilter("ignore", dg.PreviewWarning)
    table = dg.asset(
        name="table", partitions_def=PARTITIONS, backfill_policy=dg.BackfillPolicy.single_run()
    )(_table)
    exact = dg.asset_check(asset=table, name=CHECK_NAME, partitions_def=PARTITIONS, blocking=False)(
        _exact
    )


def _run(instance: dg.DagsterInstance, tags: dict[str, str]) -> dg.ExecuteInProcessResult:
    return dg.materialize([table, exact], instance=instance, tags=tags, raise_on_error=False)


def _statuses(instance: dg.DagsterInstance) -> dict[str | None, Any]:
    key = dg.AssetCheckKey(table.key, CHECK_NAME)
    infos = instance.event_log_storage.get_asset_check_partition_info([key])
    return {i.partition_key: i for i in infos}


def test_a_range_run_files_one_check_result_per_partition_none_skipped() -> None:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTITIONS.name, KEYS)
        result = _run(
            instance,
            {ASSET_PARTITION_RANGE_START_TAG: KEYS[0], ASSET_PARTITION_RANGE_END_TAG: KEYS[-1]},
        )
        assert result.success
        evaluations = result.get_asset_check_evaluations()
        assert [(e.partition, e.passed) for e in evaluations] == [
            (KEYS[0], True),
            (KEYS[1], False),
            (KEYS[2], True),
        ]
        assert evaluations[1].metadata["duplicates"].value == 1  # the partition's own proof
        # As the UI reads them: every partition has its own latest execution, none is left
        # planned (shown as "skipped"), none is filed without a partition, and each one targets
        # that partition's latest materialization (so it counts as the current result).
        statuses = _statuses(instance)
        assert set(statuses) == set(KEYS)
        assert {k: i.latest_execution_status for k, i in statuses.items()} == {
            KEYS[0]: AssetCheckExecutionRecordStatus.SUCCEEDED,
            KEYS[1]: AssetCheckExecutionRecordStatus.FAILED,
            KEYS[2]: AssetCheckExecutionRecordStatus.SUCCEEDED,
        }
        for info in statuses.values():
            assert info.latest_target_materialization_storage_id is not None
            assert (
                info.latest_target_materialization_storage_id
                == info.latest_materialization_storage_id
            )

        # A single-partition run: one result, filed under that partition, as before.
        single = _run(instance, {"dagster/partition": KEYS[2]})
        (evaluation,) = single.get_asset_check_evaluations()
        assert (evaluation.partition, evaluation.passed) == (KEYS[2], True)
        assert _statuses(instance)[KEYS[2]].latest_planned_run_id == single.run_id


def test_each_partition_of_a_range_run_shows_its_own_numbers() -> None:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTITIONS.name, KEYS)
        result = _run(
            instance,
            {ASSET_PARTITION_RANGE_START_TAG: KEYS[0], ASSET_PARTITION_RANGE_END_TAG: KEYS[-1]},
        )
        events = {
            e.materialization.partition: e.materialization.metadata
            for e in result.get_asset_materialization_events()
        }
        assert {k: m["records_read"].value for k, m in events.items()} == {
            KEYS[0]: 4,
            KEYS[1]: 3,
            KEYS[2]: 0,
        }
        # the run-wide numbers stay, under their own names, and the shares add up to them
        assert {m["commit_records_read"].value for m in events.values()} == {7}
        assert sum(m["records_read"].value for m in events.values()) == 7
        assert {m[ROW_COUNT_KEY].value for m in events.values()} == {7}


def _listed(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    keys = context.partition_keys
    run = RunMetadata(
        {"records_read": 7, "lag_after": 0},
        {k: {"records_read": READ[parse_partition_key(k).partition]} for k in keys},
        {"partitions": partitions_table(["partition"], [[k] for k in keys])},
    )
    return dg.MaterializeResult(metadata=record_run(context, run))


listed = dg.asset(name="listed", partitions_def=PARTITIONS)(_listed)


def test_a_range_run_lists_its_partitions_once_on_its_last_materialization() -> None:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTITIONS.name, KEYS)
        tags = {ASSET_PARTITION_RANGE_START_TAG: KEYS[0], ASSET_PARTITION_RANGE_END_TAG: KEYS[-1]}
        result = dg.materialize([listed], instance=instance, tags=tags)
        found = {e.partition: e.materialization for e in result.get_asset_materialization_events()}
        events = [found[k] for k in KEYS]
        # the table of the run's partitions is stored once, on its last partition's event
        assert ["partitions" in e.metadata for e in events] == [False, False, True]
        assert KEYS[0] in events[-1].metadata["partitions"].value
        # each partition keeps its own numbers and the run's others
        assert [e.metadata["records_read"].value for e in events] == [4, 3, 0]
        assert {e.metadata["lag_after"].value for e in events} == {0}
        # the instance reads its partition keys from storage again after the run
        assert not {"get_dynamic_partitions", "has_dynamic_partition"} & set(vars(instance))
        single = dg.materialize([listed], instance=instance, partition_key=KEYS[1])
        (event,) = single.get_asset_materialization_events()
        assert "| partition |" in event.materialization.metadata["partitions"].value


def test_a_run_table_lists_its_first_partitions_and_counts_the_others() -> None:
    text = partitions_table(["p"], [[i] for i in range(TABLE_MAX_ROWS + 5)]).value
    assert text.count("\n| ") == TABLE_MAX_ROWS  # one line per row shown
    assert f"| {TABLE_MAX_ROWS - 1} |" in text and f"| {TABLE_MAX_ROWS} |" not in text
    assert "5 more partitions" in text


@pytest.fixture
def defs() -> dg.Definitions:
    text = pipeline_yaml(
        "ui", "ui-events", "127.0.0.1:1", "127.0.0.1:2", "/tmp/nowhere", "ui_db", "/tmp/ui/hudi"
    )
    return build_definitions(parse_config(text, "ui.yaml"))


def test_both_assets_carry_table_name_columns_and_code_references(defs: dg.Definitions) -> None:
    pipeline = parse_config(
        pipeline_yaml("ui", "ui-events", "h:1", "h:2", "/tmp/x", "ui_db", "/tmp/ui/hudi"), "ui"
    ).pipelines[0]
    repo = defs.get_repository_def()
    ch = repo.assets_defs_by_key[clickhouse_key(pipeline)].specs_by_key[clickhouse_key(pipeline)]
    hudi = repo.assets_defs_by_key[hudi_key(pipeline)].specs_by_key[hudi_key(pipeline)]
    names = ["_topic", "_partition", "_offset", "_timestamp", "id", "name"]
    columns = {
        "clickhouse": [(c.name, c.type) for c in ch.metadata["dagster/column_schema"].columns],
        "hudi": [(c.name, c.type) for c in hudi.metadata["dagster/column_schema"].columns],
    }
    assert [n for n, _ in columns["clickhouse"]] == [n for n, _ in columns["hudi"]] == names
    assert columns["clickhouse"][:3] == [
        ("_topic", "LowCardinality(String)"),
        ("_partition", "Int32"),
        ("_offset", "Int64"),
    ]
    assert dict(columns["hudi"]) == {
        "_topic": "string",
        "_partition": "int",
        "_offset": "bigint",
        "_timestamp": "timestamp",
        "id": "bigint",
        "name": "string",
    }
    offset = ch.metadata["dagster/column_schema"].columns[2]
    assert "Kafka offset" in (offset.description or "")
    assert ch.metadata["dagster/table_name"] == "ui_db.events"
    assert hudi.metadata["dagster/table_name"] == "ui_events"
    assert hudi.metadata["dagster/uri"] == "file:///tmp/ui/hudi"
    for spec in (ch, hudi):
        (reference,) = spec.metadata["dagster/code_references"].code_references
        assert reference.file_path.endswith("eos_pipeline/components/assets.py")


def test_owners_come_from_the_pipelines_file_and_the_code_version_from_what_is_written() -> None:
    text = pipeline_yaml("ui", "ui-events", "h:1", "h:2", "/tmp/x", "ui_db", "/tmp/ui/hudi")
    owned = text + "    owners: [team:data-platform, ana@example.com]\n"
    defs = build_definitions(parse_config(owned, "ui.yaml"))
    pipeline = parse_config(owned, "ui.yaml").pipelines[0]
    specs = {k: a.specs_by_key[k] for k, a in defs.get_repository_def().assets_defs_by_key.items()}
    assert {tuple(s.owners) for s in specs.values()} == {("team:data-platform", "ana@example.com")}
    # the sinks' code versions (the Kafka topics are external: not written by this code)
    versions = {k: s.code_version for k, s in specs.items() if k.path[0] != "kafka"}
    assert len(versions) == 2
    assert all(v and v.startswith(f"{_package_version()}+") for v in versions.values())
    # another schema is other data: another code version; another endpoint is not
    other = parse_config(owned.replace("name: String", "name: String, extra: Int64"), "ui.yaml")
    moved = parse_config(owned.replace("h:1", "elsewhere:9092"), "ui.yaml")
    key = clickhouse_key(pipeline)
    assert code_version(other.pipelines[0], "clickhouse") != versions[key]
    assert code_version(moved.pipelines[0], "clickhouse") == versions[key]
    with pytest.raises(ConfigError, match="neither an e-mail address nor 'team:<name>'"):
        parse_config(text + "    owners: [nobody]\n", "ui.yaml")
