"""Retry rules on plain facts: which faults are transient, how long to wait, when to stop."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The adapters' typed errors, known by name as in the sensors' process (which imports them).
import eos_pipeline.adapters.kafka
import eos_pipeline.adapters.keeper  # noqa: F401
from eos_pipeline.core.dedup import Phase, SinkState
from eos_pipeline.core.offsets import OffsetRange, TopicPartition
from eos_pipeline.core.planning import (
    ANY_PARTITION,
    START_STATE_TAG,
    RunInfo,
    TopicState,
    failures_by_start,
    plan_clickhouse,
    plan_hudi,
)
from eos_pipeline.core.retries import (
    Backoff,
    Diagnosis,
    FailureFacts,
    Failures,
    Fault,
    decide_retry,
    diagnose,
    given_up_message,
)

KILLED = FailureFacts(
    run_messages=(
        "Run execution process for abc was terminated by signal 9 (SIGKILL).",
        "This run has been marked as failed from outside the execution context.",
    )
)


def step(*chain: tuple[str, str]) -> FailureFacts:
    return FailureFacts(errors=(("DagsterExecutionStepExecutionError", "Error in op"), *chain))


@pytest.mark.parametrize(
    ("facts", "fault", "words"),
    [
        (KILLED, Fault.TRANSIENT, "process died"),
        (FailureFacts(failure_reason="RUN_WORKER_RESTART"), Fault.TRANSIENT, "process died"),
        (
            step(("KeeperUnavailableError", "ZooKeeper at 127.0.0.1:2181 could not be reached")),
            Fault.TRANSIENT,
            "KeeperUnavailableError",
        ),
        (
            step(("KafkaException", "KafkaError{code=_TRANSPORT,val=-195,str=...}")),
            Fault.TRANSIENT,
            "_TRANSPORT",
        ),
        (
            step(("KafkaReadError", "events[0]: reading [4, 9) stalled after 30s with 0 read")),
            Fault.TRANSIENT,
            "stalled",
        ),
        (
            step(("OperationalError", "Error HTTPConnectionPool: Connection refused")),
            Fault.TRANSIENT,
            "Connection refused",
        ),
        (
            step(
                (
                    "KafkaReadError",
                    "events[0]: offset 4 is no longer in the log (deleted by retention, or the "
                    "topic was recreated); refusing to skip ahead. Details: Broker: Offset out of "
                    "range",
                )
            ),
            Fault.NEEDS_PERSON,
            "deleted by retention",
        ),
        (
            step(("KafkaReadError", "the topic was deleted and recreated. Nothing was read")),
            Fault.NEEDS_PERSON,
            "recreated",
        ),
        (step(("FencedError", "epoch 7 > 6")), Fault.NEEDS_PERSON, "FencedError"),
        (step(("ConfigError", "pipelines.yaml: bad")), Fault.NEEDS_PERSON, "ConfigError"),
        (step(("KeeperAuthError", "ACL refuses")), Fault.NEEDS_PERSON, "KeeperAuthError"),
        (step(("ValueError", "something odd\nsecond line")), Fault.UNKNOWN, "something odd"),
        (FailureFacts(canceled=True), Fault.UNKNOWN, "canceled"),
        (FailureFacts(), Fault.UNKNOWN, "no failure recorded"),
        (FailureFacts(run_messages=("Execution of run failed.",)), Fault.UNKNOWN, "Execution"),
    ],
)
def test_diagnose(facts: FailureFacts, fault: Fault, words: str) -> None:
    found = diagnose(facts)
    assert found.fault is fault
    assert words in found.cause and "\n" not in found.cause


def test_the_cause_names_the_class_once() -> None:
    found = diagnose(step(("RuntimeError", "RuntimeError: odd\n  File ...")))
    assert found.cause == "RuntimeError: odd"
    assert diagnose(step(("RuntimeError", "odd"))).cause == "RuntimeError: odd"


def test_a_person_fault_anywhere_in_the_chain_wins_over_a_transient_one() -> None:
    facts = step(("KafkaException", "_TRANSPORT"), ("FencedError", "a newer writer"))
    assert diagnose(facts).fault is Fault.NEEDS_PERSON
    # a step error decides, even if the process also died afterwards
    both = FailureFacts(errors=(("ValueError", "bad"),), run_messages=KILLED.run_messages)
    assert diagnose(both).fault is Fault.UNKNOWN


def test_backoff_doubles_and_is_capped() -> None:
    backoff = Backoff(2.0, 60.0)
    assert [backoff.delay(n) for n in range(8)] == [0, 2, 4, 8, 16, 32, 60, 60]
    assert backoff.delay(10_000) == 60


TRANSIENT = Diagnosis(Fault.TRANSIENT, "KeeperUnavailableError: no answer")
PERSON = Diagnosis(Fault.NEEDS_PERSON, "FencedError: a newer writer")
UNKNOWN = Diagnosis(Fault.UNKNOWN, "ValueError: odd")


def verdict(failed: Failures | None, now: float | None = 100.0, attempts: int = 3):  # type: ignore[no-untyped-def]
    return decide_retry(
        "p0 (s)", "AFTER:4", failed, max_attempts=attempts, backoff=Backoff(), now=now
    )


def test_decide_retry_transient_waits_out_the_backoff_then_runs_and_never_gives_up() -> None:
    assert verdict(None).run
    waiting = verdict(Failures(3, "r3", 95.0, TRANSIENT))  # 8 s after 3 failures: 3 s left
    assert not waiting.run and waiting.waiting
    assert waiting.message == (
        "p0 (s): retrying in 3s after 3 failures: KeeperUnavailableError: no answer"
    )
    assert verdict(Failures(3, "r3", 92.0, TRANSIENT)).run  # waited long enough
    assert verdict(Failures(1, "r1", 99.5, TRANSIENT)).message.endswith(
        "after 1 failure: " + TRANSIENT.cause
    )
    assert verdict(Failures(500, "r", 0.0, TRANSIENT)).run  # no limit for transient faults
    assert verdict(Failures(500, "r", 90.0, TRANSIENT)).waiting  # the cap: 60 s
    # no clock (or no end time): no waiting
    assert verdict(Failures(3, "r3", 95.0, TRANSIENT), now=None).run
    assert verdict(Failures(3, "r3", None, TRANSIENT)).run


def test_decide_retry_a_person_fault_stops_at_once_naming_the_cause() -> None:
    stop = verdict(Failures(1, "r1", 0.0, PERSON))
    assert not stop.run and not stop.waiting
    assert stop.message is not None
    assert "needs a person" in stop.message and PERSON.cause in stop.message
    assert "r1" in stop.message and "AFTER:4" in stop.message


def test_decide_retry_an_unknown_fault_is_retried_up_to_max_attempts() -> None:
    assert verdict(Failures(2, "r2", 0.0, UNKNOWN)).run
    assert verdict(Failures(2, "r2", 99.0, UNKNOWN)).waiting
    stop = verdict(Failures(3, "r3", 0.0, UNKNOWN))
    failed = Failures(3, "r3", 0.0, UNKNOWN)
    assert stop.message == given_up_message("p0 (s)", "AFTER:4", failed, 3)
    assert not stop.waiting and UNKNOWN.cause in str(stop.message)
    # without a diagnosis: unknown
    assert not verdict(Failures(3, "r3")).run


def test_failures_carry_the_newest_runs_end_time() -> None:
    runs = [
        RunInfo("r2", {START_STATE_TAG: "s"}, ended_at=20.0),
        RunInfo("r1", {START_STATE_TAG: "s"}, ended_at=10.0),
    ]
    assert failures_by_start(runs) == {(ANY_PARTITION, "s"): Failures(2, "r2", 20.0)}


# ------------------------------------------------------------------------------- in the planner

T, K0 = "events", "events__p0000"


def _ch(failed: Failures, now: float, chdb: bool) -> object:
    state = TopicState(T, {0: 8}, {0: SinkState(OffsetRange(0, 4), Phase.AFTER)})
    start = "AFTER:4"
    if chdb:
        first = plan_clickhouse(
            "s", [state], known={K0}, busy=set(), failures={}, max_attempts=3,
            reset="earliest", chdb_path="/c", ordered_keys=[K0],
        )  # fmt: skip
        start = first.runs[0].tags[START_STATE_TAG]
    key = ANY_PARTITION if chdb else K0
    return plan_clickhouse(
        "s", [state], known={K0}, busy=set(), failures={(key, start): failed}, max_attempts=3,
        reset="earliest", chdb_path="/c" if chdb else None, ordered_keys=[K0] if chdb else None,
        now=now,
    )  # fmt: skip


@pytest.mark.parametrize("chdb", [False, True])
def test_clickhouse_plans_back_off_visibly_and_keep_asking(chdb: bool) -> None:
    failed = Failures(2, "r2", 100.0, TRANSIENT)
    waiting = _ch(failed, 101.0, chdb)
    assert waiting.runs == () and waiting.given_up == ()  # type: ignore[attr-defined]
    assert "retrying in 3s after 2 failures: KeeperUnavailableError" in waiting.skip_reason  # type: ignore[attr-defined]
    (run,) = _ch(failed, 104.0, chdb).runs  # type: ignore[attr-defined]
    assert run.run_key.endswith(":retry2")
    # a person's fault: stopped, named, logged as given up
    stopped = _ch(Failures(1, "r1", 100.0, PERSON), 1000.0, chdb)
    assert stopped.runs == () and stopped.given_up == (stopped.skip_reason,)  # type: ignore[attr-defined]
    assert "needs a person: FencedError" in stopped.skip_reason  # type: ignore[attr-defined]


def test_hudi_plan_backs_off_then_retries_a_killed_run() -> None:
    def plan(failures: dict, now: float):  # type: ignore[no-untyped-def,type-arg]
        return plan_hudi(
            "h", "/t", T, ends={0: 5}, ordered_keys=[K0],
            checkpoint={TopicPartition(T, 0): 1}, busy=set(), failures=failures,
            max_attempts=3, reset="earliest", now=now,
        )  # fmt: skip

    start = plan({}, 0.0).runs[0].tags[START_STATE_TAG]
    killed = Failures(5, "r5", 100.0, diagnose(KILLED))
    waiting = plan({(ANY_PARTITION, start): killed}, 110.0)
    assert waiting.runs == () and waiting.given_up == ()
    assert "retrying in 22s after 5 failures: the run's process died" in waiting.skip_reason
    (run,) = plan({(ANY_PARTITION, start): killed}, 132.0).runs
    assert run.run_key.endswith(":retry5")


# ------------------------------------------------------------- a Hudi writer fenced by another

FENCED = step(
    (
        "HudiFencedError",
        "/t: fenced: a commit completed after 20261123 (eos-fenced). Nothing was committed; "
        "the table's checkpoint is the other writer's, and the next run plans from it",
    )
)


def test_a_fenced_hudi_writer_lost_a_race_it_is_not_a_person_fault() -> None:
    found = diagnose(FENCED)
    assert found.fault is Fault.RACE  # although its message says "fenced"
    assert found.cause.startswith("HudiFencedError: /t: fenced")
    # the keeper's fence (ClickHouse) still stops at once
    assert diagnose(step(("FencedError", "fenced: epoch 7 > 6"))).fault is Fault.NEEDS_PERSON


def test_decide_retry_a_race_backs_off_growing_then_gives_up_naming_the_cause() -> None:
    race = diagnose(FENCED)
    # the backoff grows with the failures from one state, capped like every other
    assert verdict(Failures(1, "r1", 99.0, race)).message == (
        f"p0 (s): retrying in 1s after 1 failure: {race.cause}"
    )
    assert "retrying in 4s after 2 failures" in str(verdict(Failures(2, "r2", 100.0, race)).message)
    assert verdict(Failures(2, "r2", 96.0, race)).run
    assert verdict(Failures(5, "r5", 100.0, race), attempts=9).waiting
    # max_attempts runs fenced from one state: stop, name the fence and what to look at
    stop = verdict(Failures(3, "r3", 0.0, race))
    assert not stop.run and not stop.waiting
    assert stop.message == given_up_message("p0 (s)", "AFTER:4", Failures(3, "r3", 0.0, race), 3)
    assert race.cause in str(stop.message)
    assert "fenced at their commit" in str(stop.message) and "zombie write" in str(stop.message)


def test_hudi_plan_after_a_zombie_commit_runs_at_once_else_retries_then_stops() -> None:
    """A run fenced by a zombie's commit: the table moved, the next plan starts from the new
    checkpoint and runs at once. Fenced again and again from one checkpoint: bounded retries."""

    def plan(checkpoint: int, failures: dict, now: float):  # type: ignore[no-untyped-def,type-arg]
        return plan_hudi(
            "h", "/t", T, ends={0: 9}, ordered_keys=[K0],
            checkpoint={TopicPartition(T, 0): checkpoint}, busy=set(), failures=failures,
            max_attempts=3, reset="earliest", now=now,
        )  # fmt: skip

    start = plan(1, {}, 0.0).runs[0].tags[START_STATE_TAG]
    fenced = {(ANY_PARTITION, start): Failures(1, "r1", 100.0, diagnose(FENCED))}
    # the zombie committed 1 -> 5: a new start state, no failure counted against it, no wait
    (run,) = plan(5, fenced, 100.5).runs
    assert run.tags[START_STATE_TAG] != start and not run.run_key.endswith(":retry1")
    # the table did not move: the same backoff as any retry, then a run
    waiting = plan(1, fenced, 100.5)
    assert waiting.runs == () and waiting.given_up == ()
    assert "retrying in 2s after 1 failure: HudiFencedError" in str(waiting.skip_reason)
    (retry,) = plan(1, fenced, 102.5).runs
    assert retry.run_key.endswith(":retry1")
    # fenced max_attempts times from that one checkpoint: given up, the cause named
    thrice = {(ANY_PARTITION, start): Failures(3, "r3", 100.0, diagnose(FENCED))}
    stopped = plan(1, thrice, 1000.0)
    assert stopped.runs == () and stopped.given_up == (stopped.skip_reason,)
    assert "HudiFencedError" in str(stopped.skip_reason) and "zombie" in str(stopped.skip_reason)


@pytest.mark.parametrize(
    ("cls", "fault"),
    [
        ("LogChanged", Fault.NEEDS_PERSON),
        ("PlanLogChanged", Fault.NEEDS_PERSON),
        ("ReplayLogChanged", Fault.NEEDS_PERSON),
        ("OffsetRegressionError", Fault.NEEDS_PERSON),
        ("HudiFencedError", Fault.RACE),
    ],
)
def test_a_typed_error_is_told_by_its_class_not_its_words(cls: str, fault: Fault) -> None:
    found = diagnose(step((cls, "a message with no telling word")))
    assert found.fault is fault


def test_a_kafka_error_is_told_by_its_code() -> None:
    facts = step(("KafkaException", "KafkaError{code=NOT_LEADER_OR_FOLLOWER,val=6}"))
    assert diagnose(facts).fault is Fault.TRANSIENT


@pytest.mark.parametrize(
    ("cls", "fault"),
    [
        ("KafkaUnavailable", Fault.TRANSIENT),
        ("ReadStalled", Fault.TRANSIENT),
        ("KafkaRefused", Fault.NEEDS_PERSON),
        ("TopicMissingError", Fault.NEEDS_PERSON),
        ("OffsetsDeleted", Fault.NEEDS_PERSON),
        ("KeeperUnavailableError", Fault.TRANSIENT),
        ("KeeperAuthError", Fault.NEEDS_PERSON),
        ("KafkaReadError", Fault.UNKNOWN),
    ],
)
def test_the_adapters_errors_are_told_by_their_class_not_their_words(
    cls: str, fault: Fault
) -> None:
    assert diagnose(step((cls, "a message with no telling word"))).fault is fault


def test_a_librarys_error_is_told_by_its_class_name() -> None:
    assert diagnose(step(("InvalidURL", "Invalid URL component 'path'"))).fault is (
        Fault.NEEDS_PERSON
    )
    assert diagnose(step(("SessionExpiredError", ""))).fault is Fault.TRANSIENT


def test_an_old_runs_kafka_error_quoting_a_code_is_told_by_the_code() -> None:
    message = "could not list offsets on k:9092: KafkaError{code=TOPIC_AUTHORIZATION_FAILED,val=29}"
    assert diagnose(step(("KafkaReadError", message))).fault is Fault.NEEDS_PERSON


def test_the_processes_that_read_failures_know_the_adapters_errors_by_name() -> None:
    """The sensors (run_failures, health) and the range runs (assets) look errors up by class
    name: the adapters that raise typed errors must be imported there."""
    code = (
        "import eos_pipeline.components.run_failures, eos_pipeline.components.health, "
        "eos_pipeline.components.assets\n"
        "from eos_pipeline.core.errors import fault_of_class\n"
        "for name in ('KafkaUnavailable', 'ReadStalled', 'KafkaRefused', 'TopicMissingError',\n"
        "             'OffsetsDeleted', 'KeeperUnavailableError', 'KeeperAuthError'):\n"
        "    print(name, fault_of_class(name))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    known = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert known == {
        "KafkaUnavailable": "transient",
        "ReadStalled": "transient",
        "KafkaRefused": "needs a person",
        "TopicMissingError": "needs a person",
        "OffsetsDeleted": "needs a person",
        "KeeperUnavailableError": "transient",
        "KeeperAuthError": "needs a person",
    }
