"""What a Kafka request that got no answer says, and how the sensors' retry rule reads it."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from eos_pipeline.adapters.kafka import (
    KafkaReadError,
    KafkaRefused,
    KafkaSettings,
    KafkaUnavailable,
    kafka_error,
    unreachable,
)
from eos_pipeline.core.retries import FailureFacts, Fault, diagnose
from eos_pipeline_tests.support.kafka import no_answer

_SECRET = "s3cr3t-pw"


def _diagnose(message: str) -> Fault:
    return diagnose(FailureFacts(errors=(("KafkaReadError", message),))).fault


def test_an_unanswered_request_is_transient_and_names_no_secret() -> None:
    settings = KafkaSettings("h1:9093", {"sasl.username": "fresh-user", "sasl.password": _SECRET})
    message = str(no_answer(settings, "cannot describe topic 't'", 10))
    assert "no answer from Kafka at h1:9093" in message and _SECRET not in message
    assert _diagnose(message) is Fault.TRANSIENT


def test_a_refused_login_is_named_with_what_to_fix_and_needs_a_person() -> None:
    settings = KafkaSettings("h2:9093", {"sasl.username": "u2", "sasl.password": _SECRET})
    refusal = KafkaError(
        KafkaError._AUTHENTICATION,
        "SASL authentication error: Authentication failed during authentication due to invalid "
        "credentials with SASL mechanism SCRAM-SHA-512",
    )
    settings.config()["error_cb"](refusal)  # what librdkafka calls from a poll
    message = str(no_answer(settings, "cannot describe topic 't'", 10))
    assert "refused this client" in message and "sasl.password" in message
    assert _SECRET not in message
    assert _diagnose(message) is Fault.NEEDS_PERSON
    # Another user of the same cluster is not blamed for it.
    other = KafkaSettings("h2:9093", {"sasl.username": "u3"})
    assert "refused" not in str(no_answer(other, "x", 10))


def test_the_adapters_errors_say_their_kind_by_type() -> None:
    """What the product raises for an unanswered request, a refused login, a Kafka error code."""
    settings = KafkaSettings("h4:9093", {"sasl.username": "u4", "sasl.password": _SECRET})
    down = unreachable(settings, "describe topic 't'", 10, "")
    assert isinstance(down, KafkaUnavailable) and down.fault is Fault.TRANSIENT
    refusal = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error")
    settings.config()["error_cb"](refusal)
    refused = unreachable(settings, "describe topic 't'", 10, "")
    assert isinstance(refused, KafkaRefused) and refused.fault is Fault.NEEDS_PERSON
    assert _SECRET not in str(refused)
    denied = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert isinstance(unreachable(settings, "read", 10, denied), KafkaRefused)
    for code, kind in (
        (KafkaError._TRANSPORT, KafkaUnavailable),
        (KafkaError.OFFSET_OUT_OF_RANGE, KafkaRefused),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaReadError),
    ):
        assert type(kafka_error("reading", KafkaError(code))) is kind
    # a code for a person wins over a transient one (as in core.retries)
    both = kafka_error("producing", KafkaError(KafkaError._MSG_TIMED_OUT), KafkaError(29))
    assert isinstance(both, KafkaRefused)
    for error in (down, refused, both):
        name = type(error).__name__
        assert diagnose(FailureFacts(errors=((name, "no telling word"),))).fault is error.fault
