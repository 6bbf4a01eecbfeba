"""The main job's path end to end: `dagster dev` with its daemon, sensors driving every run.

One demo run (module fixture) serves three tests:

* the data the demo prints, for its JSON topic and its Avro one (Confluent framing, the
  session's real registry, a few records with a bad magic byte or an unknown schema id): per
  partition, Kafka's end offset equals the distinct offsets in each table plus the dead
  letters, rows equal distinct offsets (no duplicate), and the demo's own check found both
  tables holding the same offsets; every run succeeded and every exactly-once check passed;
* a production-like instance: the demo runs on a Dagster instance kept in a real PostgreSQL
  server; once caught up, more records are produced and a backfill over every partition of
  both tables is launched (as the UI's button does) while the sensors keep running: afterwards
  both tables are again exact against Kafka;
* the Hudi runs are thin clients of a Spark Connect server, as in ``make demo``;
* the UI in a real browser (Debian's Chromium): the lineage shows the topic upstream of both
  tables and the dead-letter topic downstream, both checks passed, the columns and row counts
  are listed, the topic shows its per-partition lag.

Few records and 2 partitions keep it short.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
import traceback
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType

from eos_dev.demo import (
    AVRO_PIPELINE,
    PIPELINE,
    REGISTRY_ADDRESS_ENV,
    count_in_child,
    progress,
    run_demo,
)
from eos_dev.stack.services import StackConfig
from eos_pipeline.adapters.kafka import KafkaSettings, end_offsets, idempotent_producer, produce_all
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline_tests.support import browser, postgres

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BACKFILL_RECORDS = 40
_DONE = ("COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED")


@dataclass
class DemoRun:
    code: int = -1
    out: str = ""
    home: Path = Path()
    log: Path = Path()
    storage: str = ""
    ui_text: dict[str, str] = field(default_factory=dict)
    ui_error: str | None = None
    backfill: dict[str, Any] = field(default_factory=dict)
    backfill_error: str | None = None


def _walk_ui(ui: str, shots: Path) -> dict[str, str]:
    with browser.ui_walker(ui, shots) as walker:
        return {
            "lineage": walker.open(
                "/assets/kafka/demo-events?view=lineage&lineageScope=downstream&lineageDepth=3",
                "demo-events.dlq",
                "lineage",
                settle=("2 / 2 Passed", 2),
            ),
            "clickhouse": walker.open("/assets/clickhouse/demo/events", "Columns", "clickhouse"),
            "hudi": walker.open("/assets/hudi/demo_events", "Columns", "hudi"),
            "hudi_checks": walker.open(
                "/assets/hudi/demo_events?view=checks", "Evaluation result", "hudi_checks"
            ),
            "topic": walker.open("/assets/kafka/demo-events", "records_held", "topic"),
        }


def _backfill_then_settle(
    ui: str, instance: dg.DagsterInstance, stack: StackConfig, work: Path
) -> dict[str, Any]:
    """Produce more, backfill every partition of both tables, wait until all is caught up."""
    from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
    from eos_pipeline.components.project import load_project

    config = load_project(
        environ={
            "EOS_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
            "EOS_ZOOKEEPER_HOSTS": stack.zookeeper_hosts,
            "EOS_DEMO_DIR": str(work),
        }
    ).config
    pipeline = config.pipeline(PIPELINE)
    topic = pipeline.kafka.topics[0]
    kafka = KafkaSettings(stack.kafka_bootstrap)
    records = [
        (
            i % 2,
            None,
            json.dumps(
                {"event_id": 9_000_000 + i, "user": "u", "action": "view", "amount": 1.0}
            ).encode(),
        )
        for i in range(BACKFILL_RECORDS)
    ]
    records.append((0, None, b'{"event_id": 1, "user": 7}'))  # user is not a string: DLQ
    produce_all(idempotent_producer(kafka), topic, records)
    ends = end_offsets(kafka, topic)
    keys = instance.get_dynamic_partitions(f"{PIPELINE}_topic_partitions")
    backfill_id = browser.launch_backfill(
        ui, [["clickhouse", "demo", "events"], ["hudi", "demo_events"]], keys
    )
    store = KeeperStateStore(KeeperSettings(config.keeper.hosts, config.keeper.root))
    store.start()
    try:
        deadline = time.monotonic() + 600
        status, caught_up, line = "", False, ""
        while time.monotonic() < deadline:
            backfill = instance.get_backfill(backfill_id)
            status = backfill.status.value if backfill else "missing"
            caught_up, line = progress(instance, config, store, ends)
            if status in _DONE and caught_up:
                break
            time.sleep(2)
    finally:
        store.close()
    backfill_runs = instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    counts = count_in_child(
        {
            "topic": topic,
            "partitions": sorted(ends),
            "clickhouse_url": config.clickhouse.url,
            "database": pipeline.clickhouse.database,
            "table": pipeline.clickhouse.table,
            "hudi_path": pipeline.hudi.path,
        }
    )
    from eos_pipeline.adapters.dlq import dead_letter_offsets

    dead = dead_letter_offsets(kafka, pipeline.dead_letter_topic, pipeline.name)
    return {
        "status": status,
        "caught_up": caught_up,
        "progress": line,
        "ends": ends,
        "counts": counts,
        "dead": {p: len(dead.get(TopicPartition(topic, p), set())) for p in ends},
        "runs": [(r.status, sorted(r.asset_selection or [])) for r in backfill_runs],
    }


@pytest.fixture(scope="module")
def demo_run(
    local_stack: StackConfig,
    spark_connect: StackConfig,
    schema_registry: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[DemoRun]:
    """The demo as ``make demo`` runs it: Hudi runs are thin clients of a Connect server (here
    the session's, named by ``EOS_SPARK_REMOTE`` as the demo names the stack's), the Avro
    pipeline reads the session's registry (named by ``EOS_REGISTRY_ADDRESS``)."""
    root = tmp_path_factory.mktemp("demo")
    result = DemoRun(home=root / "home", log=root / "work" / "dagster.log")
    args = argparse.Namespace(
        work_dir=root / "work",
        dagster_home=root / "home",
        records=60,
        partitions=2,
        keep_ui=False,
        port=None,
        defs_dir=None,
        sensor_interval=1,
        timeout=600.0,
        down=False,
        verbose=False,
        postgres_url=None,
    )

    def on_ready(ui: str, instance: dg.DagsterInstance) -> None:
        result.storage = type(instance.run_storage).__name__
        if browser.missing_reason() is None:
            try:
                result.ui_text = _walk_ui(ui, root / "screenshots")
            except Exception:  # reported by the browser test, not here
                result.ui_error = traceback.format_exc()
        try:
            result.backfill = _backfill_then_settle(ui, instance, local_stack, root / "work")
        except Exception:
            result.backfill_error = traceback.format_exc()

    server = (
        postgres.postgres_server()
        if postgres.missing_reason() is None
        else contextlib.nullcontext()
    )
    with server as url, pytest.MonkeyPatch.context() as env:
        env.setenv("EOS_SPARK_REMOTE", spark_connect.spark_connect_url)
        env.setenv(REGISTRY_ADDRESS_ENV, urllib.parse.urlsplit(schema_registry).netloc)
        args.postgres_url = url
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            result.code = run_demo(local_stack, args, on_ready)
        result.out = buffer.getvalue()
        print(result.out)
        yield result


def test_demo_sensors_drive_both_tables_to_the_kafka_end(demo_run: DemoRun) -> None:
    assert demo_run.code == 0, demo_run.out
    out = demo_run.out
    assert "Dagster UI: http://127.0.0.1:" in out
    # issue 29: `dagster dev` ends by itself on SIGTERM (the demo kills it only after 20 s)
    [stopped] = [line for line in out.splitlines() if "dagster stopped in" in line]
    assert "killed" not in stopped, stopped
    lines = out.splitlines()
    headers = [i for i, line in enumerate(lines) if line.split()[:2] == ["partition", "kafka"]]
    # one table per pipeline, named on the line above it: the JSON topic, then the Avro one
    assert [lines[i - 1].split()[1] for i in headers] == [f"{PIPELINE}:", f"{AVRO_PIPELINE}:"]
    dead_by_topic = []
    for header in headers:
        rows = [line.split() for line in lines[header + 1 : header + 3]]
        assert [int(r[0]) for r in rows] == [0, 1]
        dead = 0
        for _, end, ch_rows, ch_distinct, hudi_rows, hudi_distinct, dlq in (
            map(int, r) for r in rows
        ):
            assert end > 0
            assert ch_rows == ch_distinct == end - dlq
            assert hudi_rows == hudi_distinct == end - dlq
            dead += dlq
        dead_by_topic.append(dead)
    # the framed kinds of bad record were dead-lettered from the Avro topic, each class once
    # per source record whichever sink wrote it
    assert dead_by_topic[1] >= 2
    (classes,) = [line for line in lines if line.startswith("dead-letter topic demo-avro.dlq")]
    assert "BadFraming" in classes and "UnknownSchemaId" in classes, classes
    # the demo's own check: both tables hold the same offsets, with the dead letters all of them
    for topic in ("demo-events", "demo-avro"):
        assert any(line.startswith(f"{topic}: exact") for line in lines), out

    # the instance configuration used is the project's, and dagster dev says nothing else
    assert "will not be used to configure Dagster" not in demo_run.log.read_text(errors="replace")

    instance = dg.DagsterInstance.from_config(str(demo_run.home))
    try:
        runs = instance.get_runs()
        assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        # ClickHouse on chDB and Hudi: each caught up by runs covering both partitions
        jobs = sorted(r.job_name for r in runs)
        assert any("clickhouse_lag" in j for j in jobs) and any("hudi_lag" in j for j in jobs)
        checks = [
            e.dagster_event.event_specific_data
            for r in runs
            for e in instance.all_logs(r.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
        ]
        assert checks and all(c.passed for c in checks)
    finally:
        instance.dispose()


def test_on_a_postgres_instance_a_backfill_of_every_partition_stays_exact(
    demo_run: DemoRun,
) -> None:
    reason = postgres.missing_reason()
    if reason:
        pytest.skip(reason)
    assert demo_run.storage == "PostgresRunStorage"
    assert demo_run.backfill_error is None, demo_run.backfill_error
    done = demo_run.backfill
    assert done["status"] in _DONE and done["caught_up"], done
    # the backfill ran both tables' partitions and every one of its runs succeeded
    assert done["runs"] and all(s == dg.DagsterRunStatus.SUCCESS for s, _ in done["runs"])
    for p, end in done["ends"].items():
        expected = end - done["dead"][p]
        assert done["counts"]["clickhouse"][p] == [expected, expected], (p, done)
        assert done["counts"]["hudi"][p] == [expected, expected], (p, done)
    assert sum(done["dead"].values()) >= 1  # the bad record produced before the backfill


def test_the_ui_in_a_browser_shows_lineage_checks_columns_and_lag(demo_run: DemoRun) -> None:
    reason = browser.missing_reason()
    if reason:
        pytest.skip(reason)
    assert demo_run.ui_error is None, demo_run.ui_error
    ui = demo_run.ui_text
    lineage = ui["lineage"]
    for name in ("demo-events", "demo-events.dlq", "events", "demo_events"):
        assert name in lineage
    # both tables' checks passed, exactly_once and source_reachable (none skipped or failed)
    assert lineage.count("2 / 2 Passed") == 2, lineage
    for page in ("clickhouse", "hudi"):
        text = ui[page]
        assert "Columns" in text and "event_id" in text and "_offset" in text
        assert "Row count" in text
        assert "kafka / demo-events" in text  # the topic listed upstream
    checks = ui["hudi_checks"]
    assert "Passed" in checks and "Skipped" not in checks
    topic = ui["topic"]
    assert "clickhouse_lag" in topic and "hudi_lag" in topic and "records_held" in topic
