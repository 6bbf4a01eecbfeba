"""The Spark resource names its Connect session after the table, so runs of a table share one.

Only the choice of session id is tested here, with ``connect`` replaced; that a shared session
works on a real server (its Python workers reused, runs apart) is shown by
``adapters/test_spark_remote.py`` and the Hudi suites, which run through the resource.
"""

from __future__ import annotations

from typing import Any

import pytest

from eos_pipeline.adapters import spark_remote
from eos_pipeline.components.resources import SparkResource
from eos_pipeline_tests.support.definitions import is_remote


class _Conf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Session:
    def __init__(self, session_id: str | None) -> None:
        self.session_id = session_id
        self.conf = _Conf()


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def fake_connect(url: str, token: str | None = None, **kwargs: Any) -> _Session:
        calls.append({"url": url, "token": token, **kwargs})
        return _Session(kwargs.get("session_id"))

    monkeypatch.setattr(spark_remote, "connect", fake_connect)
    return calls


def test_runs_with_the_same_settings_join_one_session_whatever_their_table(
    connects: list[dict[str, Any]],
) -> None:
    settings = {"spark.sql.shuffle.partitions": "2"}
    first = SparkResource(remote="sc://spark:15002", spark_config=settings).spark_session
    again = SparkResource(remote="sc://spark:15002", spark_config=settings).spark_session
    other_settings = SparkResource(
        remote="sc://spark:15002", spark_config={"spark.sql.shuffle.partitions": "8"}
    ).spark_session
    no_settings = SparkResource(remote="sc://spark:15002").spark_session

    assert first.session_id == again.session_id
    assert first.session_id is not None
    assert len({first.session_id, other_settings.session_id, no_settings.session_id}) == 3
    assert first.conf.values == settings  # the settings still reach the session


def test_a_run_makes_one_session_and_keeps_it(connects: list[dict[str, Any]]) -> None:
    resource = SparkResource(remote="sc://spark:15002")
    assert resource.spark_session is resource.spark_session  # one session per run
    assert len(connects) == 1


@pytest.mark.spark
def test_in_process_spark_comes_from_dagster_pyspark_and_joins_the_running_session(
    spark: Any,
) -> None:
    """Without ``remote`` the session is dagster-pyspark's (builder + getOrCreate): in a process
    that already runs Spark, the run gets that session, no second JVM."""
    resource = SparkResource(master="local[2]", quick_start=True)
    assert not is_remote(resource)
    session = resource.spark_session
    assert session is spark or session.sparkContext is spark.sparkContext
    assert session.range(3).count() == 3
