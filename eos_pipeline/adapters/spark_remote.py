"""A run's Spark as a thin client of a Spark Connect server, with errors that say what to do.

What can fail before any work (nothing answers, a required jar missing on the server, another
Spark feature release) is checked once at connect time and named, where PySpark's own client
would retry for minutes in silence. A server lost later is retried for a bounded time
(:func:`retry_policy`), then named by :func:`classify`. Connect mode is process-wide in PySpark
3.5, so a process is a thin client or holds a local JVM, never both (:class:`SparkModeConflict`).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: How the stack's own server is started (named in the "unreachable" message).
STACK_COMMAND = "eos-pipeline stack up"
#: How long a connected client retries a server that stopped answering, in seconds.
RETRY_SECONDS_ENV = "EOS_SPARK_CONNECT_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 60.0
#: PySpark's backoff shape (first wait 50 ms, times 4), each wait capped at 10 s, and the
#: random extra PySpark adds to waits of 2 s or more.
_FIRST_WAIT_MS, _GROWTH, _WAIT_CAP_MS = 50, 4.0, 10_000
_JITTER_MS, _JITTER_FROM_MS = 500, 2_000
#: Jars the product needs on the server: file-name marker -> what it is (Maven coordinates).
REQUIRED_JARS: Mapping[str, str] = {
    "hudi-spark": "the Hudi Spark bundle (org.apache.hudi:hudi-spark3.5-bundle_2.12)",
    "spark-sql-kafka": "Spark's Kafka connector (org.apache.spark:spark-sql-kafka-0-10_2.12)",
}
#: Data sources of the required jars, as Spark names them when one is missing at run time.
_SOURCE_JARS: Mapping[str, str] = {"hudi": "hudi-spark", "kafka": "spark-sql-kafka"}
_TOKEN = re.compile(r"(;\s*token=)[^;]*", re.IGNORECASE)


class SparkConnectError(RuntimeError):
    """The run cannot use the Spark Connect server it was configured with."""


class SparkServerUnreachable(SparkConnectError):
    """Nothing answers Spark Connect at the configured URL."""


class SparkServerMissingJar(SparkConnectError):
    """The server's classpath lacks a jar the product needs."""


class SparkVersionMismatch(SparkConnectError):
    """The client's PySpark and the server's Spark are different feature releases."""


class SparkModeConflict(SparkConnectError):
    """A classic and a Connect session were asked for in one process."""


def with_token(url: str, token: str | None) -> str:
    """``url`` with ``;token=...`` appended (Connect's syntax); a token in ``url`` wins."""
    return url if not token or _TOKEN.search(url) else _with_param(url, f"token={token}")


#: Namespace of :func:`stable_session_id` (a fixed random UUID: ids differ from other tools').
_SESSION_NAMESPACE = uuid.UUID("6f1f6a3e-93a4-4c55-a3f1-0d9e1c2b7a41")


def stable_session_id(key: str) -> str:
    """The same Connect session id for the same ``key`` (a run's Spark settings), every run.

    A Connect 3.5 server keeps a Python worker daemon per session until it stops: a new session
    per run pays its start (1-3.5 s) and leaves one more idle daemon. Runs with different runtime
    settings need different keys: a session's settings are shared.
    """
    return str(uuid.uuid5(_SESSION_NAMESPACE, key))


def with_session_id(url: str, session_id: str | None) -> str:
    """``url`` with ``;session_id=...`` appended (Connect's syntax); None leaves it as is."""
    return _with_param(url, f"session_id={session_id}") if session_id else url


def _with_param(url: str, param: str) -> str:
    return f"{url if '/;' in url else url.rstrip('/') + '/'};{param}"


def redact(url: str) -> str:
    """The URL as messages show it: a token is replaced by ``***``."""
    return _TOKEN.sub(r"\1***", url)


def host_port(url: str) -> tuple[str, int]:
    """Host and port of an ``sc://host[:port][/;params]`` URL (Connect's default port 15002)."""
    if not url.startswith("sc://"):
        raise SparkConnectError(f"{redact(url)!r} is not a Spark Connect URL (sc://host:port)")
    parsed = urlparse("http://" + url.removeprefix("sc://").split("/;")[0].split(";")[0])
    if not parsed.hostname:
        raise SparkConnectError(f"{redact(url)!r} names no host")
    return parsed.hostname, parsed.port or 15002


def unreachable_message(url: str, reason: str) -> str:
    return (
        f"Spark Connect server not reachable at {redact(url)} ({reason}). Start the stack's "
        f"server with `{STACK_COMMAND}` (see `eos-pipeline stack status`), or point "
        "`spark.remote` in the pipelines file at a running server; set `spark.remote: null` "
        "to run Spark inside the run's process instead"
    )


def missing_jars(spark_jars: str) -> list[str]:
    """Which :data:`REQUIRED_JARS` markers are absent from a ``spark.jars`` value."""
    names = [os.path.basename(j) for j in spark_jars.split(",") if j.strip()]
    return [m for m in REQUIRED_JARS if not any(m in name for name in names)]


def missing_jar_message(url: str, missing: list[str]) -> str:
    what = "; ".join(f"{REQUIRED_JARS[m]} ({m}*.jar)" for m in missing)
    return (
        f"the Spark Connect server at {redact(url)} lacks {what} on its classpath. Start it "
        "with those jars in --jars / spark.jars (the stack's server has them: "
        f"`{STACK_COMMAND}`)"
    )


def _feature_release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2])


def version_mismatch_message(url: str, client: str, server: str) -> str | None:
    """A message if client and server differ in major.minor, else None (patches may differ)."""
    if _feature_release(client) == _feature_release(server):
        return None
    return (
        f"Spark version mismatch: this client has PySpark {client}, the Spark Connect server at "
        f"{redact(url)} runs Spark {server}. Spark Connect needs the same major.minor release "
        f"on both sides: install pyspark=={'.'.join(map(str, _feature_release(server)))}.* "
        "here, or use a server of your PySpark's release"
    )


def retry_policy(seconds: float) -> dict[str, float]:
    """PySpark's Connect retries, as many as fit in ``seconds`` of waits (0: fail at once)."""
    budget_ms = max(0.0, seconds) * 1000
    retries, spent_ms, wait = 0, 0.0, float(_FIRST_WAIT_MS)
    while True:
        spent_ms += wait + (_JITTER_MS if wait >= _JITTER_FROM_MS else 0)  # the longest wait
        if spent_ms > budget_ms:
            break
        retries += 1
        wait = min(_WAIT_CAP_MS, wait * _GROWTH)
    return {
        "max_retries": retries,
        "initial_backoff": _FIRST_WAIT_MS,
        "backoff_multiplier": _GROWTH,
        "max_backoff": _WAIT_CAP_MS,
        "jitter": _JITTER_MS,
        "min_jitter_threshold": _JITTER_FROM_MS,
    }


def retry_seconds(environ: Mapping[str, str] | None = None) -> float:
    """The retry budget: ``EOS_SPARK_CONNECT_RETRY_SECONDS``, else the default."""
    raw = (os.environ if environ is None else environ).get(RETRY_SECONDS_ENV, "").strip()
    if not raw:
        return DEFAULT_RETRY_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise SparkConnectError(f"{RETRY_SECONDS_ENV}={raw!r} is not a number of seconds") from None
    if value < 0:
        raise SparkConnectError(f"{RETRY_SECONDS_ENV}={raw!r} must not be negative")
    return value


def classify(exc: BaseException, url: str) -> SparkConnectError | None:
    """The clear error behind a Spark failure over Connect (the server went away, a data source
    whose jar it lacks), or None if it is none of ours."""
    text = str(exc)
    unavailable = (
        "StatusCode.UNAVAILABLE",
        "failed to connect to all addresses",
        "Connection refused",
    )
    if any(marker in text for marker in unavailable):
        # gRPC's details line says what happened
        details = re.search(r'details = "([^"]+)"', text)
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return SparkServerUnreachable(
            unreachable_message(url, (details.group(1) if details else first)[:200])
        )
    found = re.search(r"Failed to find (?:the )?data source:\s*[`\"]?(\w+)", text, re.I)
    if found and found.group(1).lower() in _SOURCE_JARS:
        return SparkServerMissingJar(
            missing_jar_message(url, [_SOURCE_JARS[found.group(1).lower()]])
        )
    return None


def _server_version(url: str) -> str:
    """The server's Spark version in one call, without Connect's minutes of retries."""
    from pyspark.sql.connect.client import SparkConnectClient

    client = SparkConnectClient(url, retry_policy={"max_retries": 0})
    try:
        return str(client._analyze(method="spark_version").spark_version)
    finally:
        client.close()


def _bound_retries(session: SparkSession, seconds: float) -> None:
    """Apply :func:`retry_policy` to the session's client (PySpark 3.5's builder takes none)."""
    policy = getattr(getattr(session, "client", None), "_retry_policy", None)
    if isinstance(policy, dict):
        policy.update(retry_policy(seconds))  # read at every call: takes effect at once
    else:
        log.warning("cannot bound Spark Connect retries: this PySpark has no client retry policy")


def connect(
    url: str,
    token: str | None = None,
    *,
    timeout: float = 5.0,
    retry_for: float | None = None,
    session_id: str | None = None,
) -> SparkSession:
    """A Spark Connect session on ``url``, checked: reachable, same release, required jars.

    ``session_id`` joins that server session (:func:`stable_session_id`); a server lost later is
    retried for ``retry_for`` seconds (default :func:`retry_seconds`).
    """
    import pyspark
    from pyspark.sql import SparkSession

    budget = retry_seconds() if retry_for is None else retry_for
    full = with_token(url, token)
    try:  # a TCP connection first: PySpark's client would retry for minutes in silence
        socket.create_connection(host_port(full), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise SparkServerUnreachable(unreachable_message(full, reason)) from None
    try:
        server = _server_version(full)
    except Exception as exc:
        raise classify(exc, full) or SparkConnectError(
            f"Spark Connect server at {redact(full)} did not answer: {exc}"
        ) from exc
    mismatch = version_mismatch_message(full, pyspark.__version__, server)
    if mismatch:
        raise SparkVersionMismatch(mismatch)
    try:
        session = SparkSession.builder.remote(with_session_id(full, session_id)).getOrCreate()
    except RuntimeError as exc:
        if "regular Spark session already running" not in str(exc):
            raise
        raise SparkModeConflict(
            f"cannot connect to {redact(full)}: this process already runs an in-process Spark "
            "session, and PySpark allows one mode per process (classic or Connect)"
        ) from exc
    _bound_retries(session, budget)
    missing = missing_jars(session.conf.get("spark.jars", "") or "")
    if missing:
        raise SparkServerMissingJar(missing_jar_message(full, missing))
    return session


def connect_error(spark: object, exc: BaseException) -> SparkConnectError | None:
    """For a Connect session, :func:`classify` with its URL (``sc://host:port``, no token); None
    for an in-process session."""
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        return None
    endpoint = getattr(getattr(getattr(spark, "client", None), "_builder", None), "endpoint", None)
    return classify(exc, f"sc://{endpoint}" if endpoint else "sc://?")


def in_connect_mode() -> bool:
    """This process was put in Connect mode (it can no longer build an in-process session)."""
    return os.environ.get("SPARK_CONNECT_MODE_ENABLED") == "1"
