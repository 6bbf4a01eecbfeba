"""Connecting runs to a Spark Connect server: the messages of what goes wrong, and one real try.

The message builders are pure and tested without a server; one test connects to a port where
nothing listens, the way a run would with the stack down, and must fail at once, naming the URL
and the command that starts the server (PySpark's own client would retry for minutes).
"""

from __future__ import annotations

import time

import pytest

from eos_dev.stack.services import free_port
from eos_pipeline.adapters.spark_remote import (
    DEFAULT_RETRY_SECONDS,
    RETRY_SECONDS_ENV,
    STACK_COMMAND,
    SparkConnectError,
    SparkServerMissingJar,
    SparkServerUnreachable,
    classify,
    connect,
    host_port,
    missing_jar_message,
    missing_jars,
    redact,
    retry_policy,
    retry_seconds,
    stable_session_id,
    unreachable_message,
    version_mismatch_message,
    with_session_id,
    with_token,
)

HUDI = "/c/hudi/hudi-spark3.5-bundle_2.12-1.2.0.jar"
KAFKA = "/c/spark-kafka/spark-sql-kafka-0-10_2.12-3.5.7.jar"


def test_urls_carry_a_token_that_messages_never_show() -> None:
    assert with_token("sc://h:1", None) == "sc://h:1"
    assert with_token("sc://h:1", "s3cret") == "sc://h:1/;token=s3cret"
    assert with_token("sc://h:1/;use_ssl=true", "s3cret") == "sc://h:1/;use_ssl=true;token=s3cret"
    assert with_token("sc://h:1/;token=mine", "other") == "sc://h:1/;token=mine"
    assert redact("sc://h:1/;token=s3cret;user_id=a") == "sc://h:1/;token=***;user_id=a"
    assert "s3cret" not in unreachable_message("sc://h:1/;token=s3cret", "refused")
    assert host_port("sc://spark.example:443/;token=x") == ("spark.example", 443)
    assert host_port("sc://spark") == ("spark", 15002)
    with pytest.raises(SparkConnectError, match="not a Spark Connect URL"):
        host_port("http://spark:15002")


def test_a_stable_session_id_is_the_same_for_a_key_and_joins_the_url() -> None:
    from pyspark.sql.connect.client import ChannelBuilder

    table = "/data/hudi/orders"
    assert stable_session_id(table) == stable_session_id(table)
    assert stable_session_id(table) != stable_session_id("/data/hudi/payments")
    url = with_session_id(with_token("sc://h:1", "s3cret"), stable_session_id(table))
    builder = ChannelBuilder(url)  # PySpark's own parser accepts it
    assert builder.session_id == stable_session_id(table)
    assert builder.get("token") == "s3cret"
    assert with_session_id("sc://h:1", None) == "sc://h:1"
    assert with_session_id("sc://h:1", "x") == "sc://h:1/;session_id=x"


def test_unreachable_names_the_url_and_the_stack_command() -> None:
    message = unreachable_message("sc://127.0.0.1:15002", "Connection refused")
    assert "sc://127.0.0.1:15002" in message
    assert f"`{STACK_COMMAND}`" in message
    assert "Connection refused" in message


def test_missing_jars_are_named_with_their_coordinates() -> None:
    assert missing_jars(f"{HUDI},{KAFKA},/c/eos-hudi-fencing-1.jar") == []
    assert missing_jars(KAFKA) == ["hudi-spark"]
    assert missing_jars("") == ["hudi-spark", "spark-sql-kafka"]
    message = missing_jar_message("sc://s:1", ["hudi-spark"])
    assert "org.apache.hudi:hudi-spark3.5-bundle_2.12" in message
    assert "sc://s:1" in message and "spark-sql-kafka" not in message


def test_version_mismatch_is_about_the_feature_release() -> None:
    assert version_mismatch_message("sc://s:1", "3.5.7", "3.5.1") is None
    message = version_mismatch_message("sc://s:1", "3.5.7", "4.0.1")
    assert message is not None
    assert "PySpark 3.5.7" in message and "Spark 4.0.1" in message
    assert "pyspark==4.0.*" in message


def test_failures_after_connecting_are_classified() -> None:
    gone = classify(
        RuntimeError("<_MultiThreadedRendezvous StatusCode.UNAVAILABLE ...>"), "sc://s:1"
    )
    assert isinstance(gone, SparkServerUnreachable) and STACK_COMMAND in str(gone)
    dead = classify(
        RuntimeError(
            "<_InactiveRpcError of RPC that terminated with:\n"
            "\tstatus = StatusCode.UNAVAILABLE\n"
            '\tdetails = "failed to connect to all addresses; last error: Connection refused"\n'
            '\tdebug_error_string = "UNKNOWN:Error received from peer"\n>'
        ),
        "sc://s:1",
    )
    assert isinstance(dead, SparkServerUnreachable)
    assert "(failed to connect to all addresses; last error: Connection refused)" in str(dead)
    missing = classify(
        RuntimeError("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: `hudi`."), "sc://s:1"
    )
    assert isinstance(missing, SparkServerMissingJar) and "hudi-spark3.5-bundle" in str(missing)
    kafka = classify(
        RuntimeError(
            "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: kafka. Please find packages"
        ),
        "sc://s:1",
    )
    assert isinstance(kafka, SparkServerMissingJar) and "spark-sql-kafka" in str(kafka)
    assert classify(RuntimeError("Job aborted due to stage failure"), "sc://s:1") is None


@pytest.mark.integration
def test_connecting_where_no_server_listens_fails_at_once_and_says_what_to_do() -> None:
    url = f"sc://127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(SparkServerUnreachable) as err:
        connect(url)
    assert time.monotonic() - began < 10
    assert url in str(err.value) and STACK_COMMAND in str(err.value)


def _retry_dead_server(policy: dict[str, float]) -> tuple[int, float]:
    """PySpark's own retry loop over calls that all fail as on a dead server: (calls, seconds
    slept), with a fake clock."""
    from pyspark.sql.connect.client.core import Retrying

    slept: list[float] = []
    calls = 0
    with pytest.raises(ConnectionRefusedError):
        for attempt in Retrying(can_retry=lambda _: True, sleep=slept.append, **policy):  # type: ignore[arg-type]
            with attempt:
                calls += 1
                raise ConnectionRefusedError("StatusCode.UNAVAILABLE")
    return calls, sum(slept)


@pytest.mark.parametrize("budget", [0.0, 5.0, DEFAULT_RETRY_SECONDS, 300.0])
def test_the_clients_retries_of_a_dead_server_fit_the_budget(budget: float) -> None:
    """PySpark's default policy retries for about ten minutes; ours gives up within the budget
    and uses most of it (a server restarted meanwhile is found again)."""
    for _ in range(20):  # the jitter is random: its largest value still fits
        calls, slept = _retry_dead_server(retry_policy(budget))
        assert calls == retry_policy(budget)["max_retries"] + 1
        # all of it at most, most of it at least (a server restarted meanwhile is found again;
        # the random jitter of each wait is between 0 and 0.5 s)
        assert 0.8 * budget <= slept <= budget, (budget, slept)
    assert retry_policy(DEFAULT_RETRY_SECONDS)["max_retries"] >= 5


def test_the_retry_budget_comes_from_the_environment() -> None:
    assert DEFAULT_RETRY_SECONDS == 60
    assert retry_seconds({}) == DEFAULT_RETRY_SECONDS
    assert retry_seconds({RETRY_SECONDS_ENV: " 12.5 "}) == 12.5
    for bad in ("soon", "-1"):
        with pytest.raises(SparkConnectError, match=RETRY_SECONDS_ENV):
            retry_seconds({RETRY_SECONDS_ENV: bad})
