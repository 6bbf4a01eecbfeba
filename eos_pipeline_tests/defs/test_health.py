"""Naming expected faults (pure: errors built by hand, as the clients raise them)."""

from __future__ import annotations

from eos_pipeline.adapters.failover import MirrorReadError
from eos_pipeline.adapters.kafka import KafkaReadError
from eos_pipeline.adapters.keeper import KeeperUnavailableError
from eos_pipeline.components.health import KAFKA, KEEPER, Streak, name_fault, skip_reason

WHERE = {KAFKA: "a1:9092", KEEPER: "z1:2181"}


def test_a_fault_is_named_by_its_innermost_known_cause() -> None:
    try:
        try:
            raise KeeperUnavailableError("cannot read /x: ZooKeeper at z1:2181 did not answer")
        except KeeperUnavailableError as exc:
            raise RuntimeError("while planning") from exc
    except RuntimeError as outer:
        fault = name_fault(outer, WHERE)
    assert fault is not None and fault.resource == KEEPER and fault.endpoint == "z1:2181"
    assert fault.transient and "unreachable" in fault.message()


def test_a_subclass_of_a_known_error_is_named_and_a_refusal_is_not_called_unreachable() -> None:
    fault = name_fault(MirrorReadError("could not read ... (unreachable or timed out)"), WHERE)
    assert fault is not None and fault.resource == KAFKA and fault.transient
    refused = name_fault(KafkaReadError("topic 'x' does not exist on a1:9092"), WHERE)
    assert refused is not None and not refused.transient
    assert "refused the request" in refused.message() and "unreachable" not in refused.message()


def test_a_bug_is_not_an_expected_fault() -> None:
    assert name_fault(ValueError("bad"), WHERE) is None


def test_the_streak_counts_failed_ticks_and_keeps_the_sensors_own_cursor() -> None:
    assert Streak.parse("abc") == Streak(inner="abc")  # a cursor from before the streak
    first = Streak(inner="abc").failed(100.0)
    second = Streak.parse(first.encode()).failed(130.0)
    assert (second.inner, second.failures, second.since) == ("abc", 2, 100.0)
    fault = name_fault(KafkaReadError("could not ... (unreachable or timed out)"), WHERE)
    assert fault is not None
    reason = skip_reason(fault, second, 30, 130.0)
    assert reason.startswith("Kafka broker a1:9092 unreachable since 00:01:40 UTC (2 failed ticks)")
    assert "next try at 00:02:40 UTC (every 30 s)" in reason and "Fix: start the broker" in reason


def test_a_sensor_that_records_its_outage_forgets_its_last_digest_and_records_again_at_once() -> (
    None
):
    """The topics sensor's cursor is the digest of what it last observed; the outage's own
    observations replace that, so once the broker answers the body must observe at once (with
    the old digest it would see "no change" for up to a minute and the page would go on saying
    unreachable)."""
    import dagster as dg

    from eos_pipeline.components.health import guarded

    seen: list[str | None] = []
    down = {"now": True}

    def body(context: dg.SensorEvaluationContext, inner: str | None) -> dg.SkipReason:
        seen.append(inner)
        if down["now"]:
            raise KafkaReadError("could not ... (unreachable or timed out)")
        return dg.SkipReason("observed")

    def where(_: dg.SensorEvaluationContext) -> dict[str, str]:
        return WHERE

    with_events = guarded(body, where, 1, on_fault=lambda fault, streak: [])
    without = guarded(body, where, 1)
    before = Streak(inner="digest").encode()
    for evaluate, kept in ((with_events, None), (without, "digest")):
        down["now"] = True
        failed = evaluate(dg.build_sensor_context(cursor=before))
        assert failed.skip_reason is not None and failed.cursor is not None
        assert Streak.parse(failed.cursor).inner == kept
        down["now"] = False
        evaluate(dg.build_sensor_context(cursor=failed.cursor))
        assert seen[-1] == kept
