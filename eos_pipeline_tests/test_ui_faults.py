"""What an on-call engineer sees in the Dagster UI under faults (issue 29), in a real headless
Chromium against ``dagster dev`` (webserver, daemon, sensors on) on a stack of the module's own.

One Dagster instance and one ZooKeeper + Kafka pair (free ports; the session's stack must stay
up, this one's broker is stopped) serve three scenarios, in order:

1. a following run is up: the asset shows its partition materialized (recorded when the run
   caught up) and the run carries ``eos_pipeline/following: since ...``, not "0 % filled";
2. that run is SIGKILLed after its insert: it stays failed in the run list, but within a few
   sensor ticks a heal run records the partition and evaluates ``exactly_once``: the check page
   shows "Passed", no "Execution failed", without a person;
3. the broker is stopped: the topic's page shows "unreachable since" with the endpoint, the
   table's ``source_reachable`` check fails as a warning naming it, and the sensors' ticks skip
   naming it (no failure, no traceback); restarted, the topic is observed reachable again, the
   check passes again by itself and no run went red.

What is asserted is read from the page (its text, and the GraphQL answers it received). With
``EOS_UI_SHOTS_DIR`` set, the screenshots docs/dagster.md shows are written there as well.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from eos_dev.demo import (
    _code_location_failed,
    prepare_dagster_home,
    start_dagster,
    stop_dagster,
)
from eos_dev.stack.services import free_port
from eos_pipeline.adapters.kafka import (
    KafkaSettings,
    create_topic,
    end_offsets,
    idempotent_producer,
    produce_all,
)
from eos_pipeline.adapters.keeper import KeeperSettings, KeeperStateStore
from eos_pipeline.components.assets import CLICKHOUSE_SINK
from eos_pipeline.components.following import FOLLOWING_TAG
from eos_pipeline.components.run_failures import HEAL_TAG
from eos_pipeline.components.topics import SOURCE_CHECK
from eos_pipeline.core.planning import FOLLOW_TAG, SINK_TAG
from eos_pipeline.core.positions import committed, sink_state
from eos_pipeline_tests.support import browser
from eos_pipeline_tests.support.defs_folder import write_defs
from eos_pipeline_tests.support.own_stack import OwnStack

pytestmark = [pytest.mark.integration]

PIPELINE = "uif"
TOPIC = "uif-events"
SINK = f"{PIPELINE}.{CLICKHOUSE_SINK}"
ASSET = "/assets/clickhouse/uif/events"
TOPIC_PAGE = f"/assets/kafka/{TOPIC}"
LOCATION = "eos_pipeline.definitions"
WAIT = 150.0
#: The screenshots docs/dagster.md shows (viewport only, to keep the PNGs small).
DOC_SHOTS = {
    "following": "ui-following-run.png",
    "healed_checks": "ui-healed-check.png",
    "topic_unreachable": "ui-topic-unreachable.png",
    "sensor_skips": "ui-sensor-skips.png",
    "topic_reachable": "ui-topic-reachable.png",
    "table_source_unreachable": "ui-table-source-unreachable.png",
}

TABLE_CHECKS = """
query Checks($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      assetChecksOrError { ... on AssetChecks { checks {
        name executionForLatestMaterialization { status evaluation { severity description } }
      } } }
    }
  }
}
"""

SENSOR_TICKS = """
query Ticks($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor {
      sensorState { ticks(limit: 5) { tickId status skipReason error { message } timestamp } }
    }
  }
}
"""


def _pipelines_yaml(bootstrap: str, zookeeper: str, chdb: Path) -> str:
    return f"""
keeper: {{hosts: '{zookeeper}', root: /eos_ui}}
clickhouse: {{url: 'chdb://{chdb}'}}
sensor_interval_seconds: 1
pipelines:
  - name: {PIPELINE}
    kafka: {{bootstrap_servers: '{bootstrap}', topics: [{TOPIC}]}}
    schema: {{id: Int64, name: String}}
    clickhouse:
      database: uif
      table: events
      # max 600 s: the first test reads three pages while the run follows (25 s a page on a
      # loaded two-core machine); at 120 s the run ended by its bound before the last read
      follow: {{idle_seconds: 6, max_seconds: 600}}
"""


@dataclass
class Rig:
    """The module's stack, ``dagster dev`` on it, and a browser on its UI."""

    own: OwnStack
    ui: str
    instance: dg.DagsterInstance
    process: Any
    log: Path
    store: KeeperStateStore
    walker: browser.UiWalker
    produced: int = 0
    began: float = field(default_factory=time.monotonic)

    @property
    def kafka(self) -> KafkaSettings:
        return KafkaSettings(self.own.config.kafka_bootstrap)

    def say(self, line: str) -> None:
        print(f"[ui {time.monotonic() - self.began:6.1f}s] {line}", flush=True)

    def produce(self, count: int) -> None:
        records = [
            (0, None, json.dumps({"id": self.produced + i, "name": "n"}).encode())
            for i in range(count)
        ]
        produce_all(idempotent_producer(self.kafka), TOPIC, records)
        self.produced += count

    def wait(self, what: str, done: Callable[[], Any], timeout: float = WAIT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = done()
            if result:
                self.say(f"{what}: yes")
                return result
            if self.process.poll() is not None or _code_location_failed(self.log):
                raise AssertionError(f"dagster dev failed while waiting for {what}; {self.log}")
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace").splitlines()[-20:]
                raise AssertionError(f"timed out waiting for {what}\n" + "\n".join(tail))
            time.sleep(0.5)

    def position(self) -> int | None:
        records = self.store.read_many(PIPELINE, CLICKHOUSE_SINK, TOPIC)
        return committed(sink_state(records[0].record)) if 0 in records else None

    def caught_up(self) -> bool:
        return self.position() == end_offsets(self.kafka, TOPIC)[0]

    def runs(self, *statuses: dg.DagsterRunStatus, **tags: str) -> list[dg.DagsterRun]:
        return list(
            self.instance.get_runs(
                filters=dg.RunsFilter(statuses=list(statuses), tags={SINK_TAG: SINK, **tags})
            )
        )

    def in_flight(self) -> list[dg.DagsterRun]:
        return self.runs(
            dg.DagsterRunStatus.QUEUED,
            dg.DagsterRunStatus.NOT_STARTED,
            dg.DagsterRunStatus.STARTING,
            dg.DagsterRunStatus.STARTED,
        )

    def following_run(self) -> dg.DagsterRun | None:
        """A started run that has caught up and follows (its tag says since when)."""
        for run in self.runs(dg.DagsterRunStatus.STARTED, **{FOLLOW_TAG: "true"}):
            fresh = self.instance.get_run_by_id(run.run_id)
            if fresh and fresh.tags.get(FOLLOWING_TAG, "").startswith("since"):
                return fresh
        return None

    def ticks(self, sensor: str) -> list[dict[str, Any]]:
        selector = {
            "repositoryLocationName": LOCATION,
            "repositoryName": "__repository__",
            "sensorName": sensor,
        }
        answer = browser.graphql(self.ui, SENSOR_TICKS, {"selector": selector})
        found = answer["data"]["sensorOrError"]
        assert found["__typename"] == "Sensor", answer
        return list(found["sensorState"]["ticks"])

    def source_check(self) -> dict[str, Any]:
        """The table's ``source_reachable`` as the asset page loads it: its execution for the
        latest materialization (status, severity, description), or {} when none."""
        key = {"path": ["clickhouse", "uif", "events"]}
        answer = browser.graphql(self.ui, TABLE_CHECKS, {"key": key})
        checks = answer["data"]["assetNodeOrError"]["assetChecksOrError"]["checks"]
        found = next(c for c in checks if c["name"] == SOURCE_CHECK)
        return found["executionForLatestMaterialization"] or {}

    def topic_metadata(self) -> dict[str, Any]:
        records = self.instance.fetch_observations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["kafka", TOPIC])), limit=1
        ).records
        if not records:
            return {}
        observation = records[0].event_log_entry.asset_observation
        return {k: v.value for k, v in observation.metadata.items()} if observation else {}

    def open(self, path: str, wait_for: str, name: str, scroll_to: str = "") -> str:
        text = self.walker.open(
            path, wait_for, name, full_page=name not in DOC_SHOTS, scroll_to=scroll_to
        )
        self._keep(name, text)
        return text

    def _keep(self, name: str, text: str) -> None:
        """Beside the screenshot, what the page said and was given (for a failure's reader);
        a doc screenshot also where ``EOS_UI_SHOTS_DIR`` says."""
        (self.walker.shots / f"{name}.txt").write_text(text)
        (self.walker.shots / f"{name}.graphql.txt").write_text(self.page_data())
        target = os.environ.get("EOS_UI_SHOTS_DIR")
        if target and name in DOC_SHOTS:
            shutil.copy(self.walker.shots / f"{name}.png", Path(target) / DOC_SHOTS[name])

    def page_data(self) -> str:
        """The GraphQL answers the last page received, as one text."""
        return "\n".join(self.walker.graphql)

    def page_values(self, path: str) -> list[Any]:
        """Every value the last page received under a field path ending in ``path`` (e.g.
        ``executionForLatestMaterialization.status``), in the order received."""
        found: list[Any] = []

        def walk(node: Any, at: str) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    if f"{at}.{key}".endswith("." + path):
                        found.append(value)
                    walk(value, f"{at}.{key}")
            elif isinstance(node, list):
                for item in node:
                    walk(item, at)

        for body in self.walker.graphql:
            try:
                walk(json.loads(body), "")
            except ValueError:
                continue  # not JSON (an error page)
        return found


def _ui_up(ui: str) -> bool:
    try:
        with urllib.request.urlopen(f"{ui}/server_info", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    reason = browser.missing_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("ui-faults")
    own = OwnStack(root / "stack")
    own.stack.up()
    process = None
    store = KeeperStateStore(KeeperSettings(own.config.zookeeper_hosts, "/eos_ui"))
    instance = None
    try:
        kafka = KafkaSettings(own.config.kafka_bootstrap)
        create_topic(kafka, TOPIC, 1)
        defs = write_defs(
            _pipelines_yaml(kafka.bootstrap_servers, own.config.zookeeper_hosts, root / "chdb"),
            root / "defs",
        )
        home = prepare_dagster_home(root / "home")  # the project's dagster.yaml: sensors in threads
        assert "use_threads: true" in (home / "dagster.yaml").read_text()
        instance = dg.DagsterInstance.from_config(str(home))
        instance.upgrade(print_fn=lambda _msg: None)  # before dagster dev's processes race on it
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("EOS_FAULT")},
            "DAGSTER_HOME": str(home),
            "EOS_DEFS_DIR": str(defs),
            "EOS_SENSOR_INTERVAL_SECONDS": "1",
        }
        port = free_port()
        log = root / "dagster.log"
        process = start_dagster(env, port, log)
        ui = f"http://127.0.0.1:{port}"
        store.start()
        with browser.ui_walker(ui, root / "screenshots") as walker:
            rig = Rig(own, ui, instance, process, log, store, walker)
            rig.wait("the UI answers", lambda: _ui_up(ui), timeout=180)
            yield rig
    finally:
        store.close()
        if process is not None:
            stop_dagster(process)
        if instance is not None:
            instance.dispose()
        own.stack.down()


def _producing(rig: Rig, every: float) -> Callable[[], None]:
    """Produce one record every ``every`` seconds until the returned function is called (a
    following run stays up while records arrive)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            rig.produce(1)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return lambda: (stop.set(), thread.join())


def _up_and_following(rig: Rig) -> dg.DagsterRun:
    """Records produced and a sensor's run caught up and following them."""
    rig.produce(20)
    return rig.wait(
        "a sensor run caught up and following",
        lambda: rig.caught_up() and rig.following_run(),
    )


def test_a_following_run_is_shown_in_progress_not_failed(rig: Rig) -> None:
    run = _up_and_following(rig)
    stop = _producing(rig, 1.5)  # keep it following while the pages are read
    try:
        asset = rig.open(ASSET, "Latest materialization", "following")
        asset_data = rig.page_data()
        assert "FAILED" not in asset_data, asset_data[:3000]
        partitions = rig.open(f"{ASSET}?view=partitions", "Materialized (", "following_partitions")
        rig.open(f"/runs/{run.run_id}", "Started", "following_run")
        run_data = rig.page_data()
        still = rig.instance.get_run_by_id(run.run_id)
    finally:
        stop()
    assert still is not None and still.status == dg.DagsterRunStatus.STARTED, "it ended early"
    # the partition shows materialized by the run in progress (recorded when it caught up and
    # as it follows), with its rows; not "0% filled", not failed
    assert "Never materialized" not in asset and "0% filled" not in asset, asset
    assert re.search(r"Latest materialization\n\d+ seconds? ago", asset), asset
    assert "Row count" in asset, asset
    assert "Materialized (1)" in partitions and "Failed (0)" in partitions, partitions
    # the run says it follows, since when (its tags, as the run page loads them)
    assert re.search(rf'"key":\s*"{FOLLOWING_TAG}",\s*"value":\s*"since ', run_data), run_data


def test_a_run_killed_after_its_insert_is_healed_by_itself(rig: Rig) -> None:
    run = rig.following_run() or _up_and_following(rig)
    rig.wait("everything produced is in the table", rig.caught_up)
    pid = next(
        int(message.split("(pid: ")[1].split(")")[0])
        for event in rig.instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
        if "Started process for run (pid: " in (message := _message(event))
    )
    os.kill(pid, signal.SIGKILL)
    rig.say(f"SIGKILLed run {run.run_id[:8]} (pid {pid}) while it followed")
    rig.wait(
        "Dagster marks the killed run failed",
        lambda: (r := rig.instance.get_run_by_id(run.run_id)) and r.status.value == "FAILURE",
    )
    heal = rig.wait(
        "a heal run succeeded",
        lambda: rig.runs(dg.DagsterRunStatus.SUCCESS, **{HEAL_TAG: run.run_id}),
    )
    assert heal and all(r.tags.get(HEAL_TAG) == run.run_id for r in heal)
    checks = rig.open(f"{ASSET}?view=checks", "Evaluation result", "healed_checks")
    # the latest execution passed (the killed run's "execution failed" is history below it)
    assert set(rig.page_values("executionForLatestMaterialization.status")) == {"SUCCEEDED"}
    executions = rig.page_values("assetCheckExecutions")[0]
    assert executions[0]["status"] == "SUCCEEDED", executions
    assert "Evaluation result\nPassed" in checks and "Succeeded" in checks, checks
    asset = rig.open(ASSET, "Latest materialization", "healed_asset")
    # the row count: every record produced, each once
    assert f"Row count\n{rig.produced}" in asset, asset
    assert set(rig.page_values("latestRun.status")) <= {"SUCCESS"}, rig.page_data()[:3000]


def _done(ticks: list[dict[str, Any]]) -> dict[str, Any]:
    """The newest tick that has ended (a tick waiting on a stopped broker is STARTED)."""
    return next((t for t in ticks if t["status"] != "STARTED"), {"skipReason": None})


def test_a_stopped_broker_is_shown_and_healed_without_a_person(rig: Rig) -> None:
    rig.wait("no run in flight", lambda: not rig.in_flight() and rig.caught_up())
    failed_before = {r.run_id for r in rig.runs(dg.DagsterRunStatus.FAILURE)}
    bootstrap = rig.kafka.bootstrap_servers
    sensors = [f"{PIPELINE}_{s}" for s in ("clickhouse_lag", "partitions", "topics")]
    rig.own.stop("kafka")
    stopped = time.monotonic()
    try:
        rig.wait(
            "every sensor skips naming the broker, the topic and the table show it",
            lambda: (
                rig.topic_metadata().get("reachable") is False
                and rig.source_check().get("status") == "FAILED"
                and all(
                    f"Kafka broker {bootstrap} unreachable since"
                    in (_done(rig.ticks(name))["skipReason"] or "")
                    for name in sensors
                )
            ),
        )
        rig.say(f"the outage shown in {time.monotonic() - stopped:.1f} s")
        topic = rig.open(TOPIC_PAGE, "unreachable_since", "topic_unreachable", "Metadata")
        # the latest observation: reachable false, where, since when, why, what to do
        assert f"Kafka broker {bootstrap}" in topic, topic
        for key in ("reachable", "unreachable_since", "cause", "fix", "failed_ticks"):
            assert f"\n{key}\n" in topic, (key, topic)
        # one cluster: the page says why there is no failover job, and what to add
        assert "Failover: not configured (one cluster)" in topic, topic
        # the sensor's page lists each tick as "0 runs requested"; a tick's details (the
        # dialog its result opens, here by its URL) say why, naming the broker
        tick = _done(rig.ticks(f"{PIPELINE}_clickhouse_lag"))
        details = rig.open(
            f"/locations/{LOCATION}/sensors/{PIPELINE}_clickhouse_lag?tickId={tick['tickId']}",
            "Skip reason",
            "sensor_skips",
        )
        assert re.search(
            rf"Skip reason: Kafka broker {re.escape(bootstrap)} unreachable since "
            r"\d\d:\d\d:\d\d UTC \(\d+ failed ticks?\)",
            details,
        ), details
        assert "next try at" in details and "Fix: start the broker" in details, details
        assert "0 runs requested" in details and "Failure" not in details, details
        data = rig.page_data()
        reasons = [r for r in rig.page_values("skipReason") if r]
        assert any(f"Kafka broker {bootstrap} unreachable since" in r for r in reasons), data
        assert "SensorExecutionError" not in data and "Traceback" not in data, data[:3000]
        assert "FAILURE" not in rig.page_values("ticks.status"), data[:3000]
        for name in sensors:
            for tick in rig.ticks(name):
                assert tick["status"] != "FAILURE" and not tick["error"], (name, tick)
        # the table shows it too: its source_reachable check failed as a warning (Asset
        # Health yellow, not red), naming the broker, since when and the fix
        evaluation = rig.source_check()["evaluation"]
        assert evaluation["severity"] == "WARN", evaluation
        said = evaluation["description"]
        assert re.search(
            rf"Kafka broker {re.escape(bootstrap)} unreachable since \S+: .*Fix: start the broker",
            said,
        ), said
        table = rig.open(
            f"{ASSET}?view=checks&checkDetail={SOURCE_CHECK}",
            "unreachable since",
            "table_source_unreachable",
        )
        assert SOURCE_CHECK in table and f"Kafka broker {bootstrap} unreachable since" in table, (
            table
        )
    finally:
        rig.own.start("kafka")
    restarted = time.monotonic()
    rig.wait(
        "the topic observed reachable and the table's source check passed again",
        lambda: (
            rig.topic_metadata().get("reachable") is True
            and rig.source_check().get("status") == "SUCCEEDED"
        ),
    )
    rig.say(f"reachable again {time.monotonic() - restarted:.1f} s after the restart")
    topic = rig.open(TOPIC_PAGE, "records_held", "topic_reachable", "Metadata")
    assert "unreachable_since" not in topic and "records_held" in topic, topic
    rig.produce(5)
    rig.wait("the new records in the table", rig.caught_up)
    # no run went red for the outage
    assert {r.run_id for r in rig.runs(dg.DagsterRunStatus.FAILURE)} == failed_before


def _message(event: Any) -> str:
    return (event.dagster_event.message if event.dagster_event else None) or event.user_message
