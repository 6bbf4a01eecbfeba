"""Failed runs: a transient fault (ask again after a growing, capped wait) or one for a person.

The lag sensors (:mod:`eos_pipeline.core.planning`) ask for a run again after a failure; what
they do depends on the fault, told from facts the sensor reads from Dagster (run status, failure
events, the failed step's error chain):

* transient (a killed run process, an unreachable broker or keeper, a timeout): retry after
  :meth:`Backoff.delay`, without limit, saying so in the skip reason;
* needs a person (bad config or credentials, retention, a recreated topic, a fenced keeper
  writer, a record that does not fit): stop at once and name the cause; a re-run cannot fix
  it and going on could skip or mix data;
* a race (``HudiFencedError``) or unknown (a run canceled by hand): retry with the same backoff
  up to ``retry.max_attempts`` runs from the same state, then stop naming the cause. A fenced
  Hudi run wrote nothing; its usual rival is a zombie of an earlier run whose write went on
  on a Spark Connect server, whose commit moves the checkpoint, so the next run starts from a
  new state and succeeds. Only a writer that keeps committing without moving the checkpoint
  (another tool's table service, a second deployment) fences run after run and is given up on.

The fault is found (:func:`diagnose`) by the error's type: ours say it
(:mod:`eos_pipeline.core.errors`, looked up by class name, since errors reach the sensors from
another process), a library's by its class name, a ``KafkaException`` by its code. Words are
read only for an error whose class does not say its kind; each remaining word names the errors
it is kept for (:data:`_PERSON_WORDS`, :data:`_TRANSIENT_WORDS`). A run whose process died has
no error at all: Dagster's own run-failure messages say so (:data:`_DEAD_PROCESS_WORDS`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

# The core's typed errors, imported so that their names are known to fault_of_class here (the
# Kafka and keeper adapters' are known where failures are read: those processes import them).
from eos_pipeline.core import checkpoint, dedup, keeper, replay  # noqa: F401
from eos_pipeline.core.errors import Fault, fault_of_class, fault_of_kafka_code, first_line


@dataclass(frozen=True, slots=True)
class FailureFacts:
    """What Dagster recorded about one failed run."""

    #: ``(error class name, message)`` of the failed step's error and its causes, outer first.
    errors: tuple[tuple[str, str], ...] = ()
    #: Messages of the run's failure and engine events (a dead run process shows up only here).
    run_messages: tuple[str, ...] = ()
    #: Dagster's ``RunFailureReason`` value, if the run failure carried one.
    failure_reason: str | None = None
    canceled: bool = False


@dataclass(frozen=True, slots=True)
class Diagnosis:
    fault: Fault
    #: One line for a person: what went wrong, as the error said it.
    cause: str


#: Classes from outside the typed hierarchy whose name says their kind: libraries' (kazoo,
#: urllib3, httpx, clickhouse-connect, Dagster, pydantic, the standard library) and the few of ours
#: raised by modules that have not joined it yet (config, schema, registry access).
_OUTSIDE_CLASSES: dict[str, Fault] = {
    **dict.fromkeys(
        (
            "ConfigError",
            "MissingSecretError",
            "SchemaError",
            "RegistryAccessError",
            "ValidationError",
            "DagsterInvalidConfigError",
            "InvalidURL",
            "NoAuthError",
            "AuthFailedError",
        ),
        Fault.NEEDS_PERSON,
    ),
    **dict.fromkeys(
        (
            "ConnectionLoss",
            "SessionExpiredError",
            "ConnectionClosedError",
            "OperationTimeoutError",
            "KazooTimeoutError",
            "ConnectionError",
            "ConnectionRefusedError",
            "ConnectionResetError",
            "TimeoutError",
            "NewConnectionError",
            "MaxRetryError",
            "OperationalError",
        ),
        Fault.TRANSIENT,
    ),
}
#: A ``KafkaException``'s text is librdkafka's ``KafkaError{code=<name>,...}``: its class says
#: nothing, the code field does (``core.errors.fault_of_kafka_code``). Older runs' Kafka errors
#: quote it too.
_KAFKA_CODE = re.compile(r"\bcode=(\w+)")
#: Last resort, for an error whose class does not say its kind: each word is kept for the errors
#: that still need it. Words for a person are checked first (a read refused because its offsets
#: are gone is a Kafka error too).
_PERSON_WORDS = (
    # Runs of older versions, which raised these facts as KafkaReadError, HudiSinkError,
    # TransactionRefused or ReplayRefused in prose (now OffsetsDeleted and LogChanged):
    "no longer in the log",
    "recreated",
    # librdkafka's text (KafkaError.str()) of codes for a person, where a message quotes it
    # without the code: adapters.failover's MirrorReadError, adapters.dlq's failed send (a
    # RuntimeError), older runs' KafkaReadError; the last two are also the JVM Kafka client's
    # SaslAuthenticationException, met through Spark:
    "offset out of range",
    "authorization failed",
    "authentication failed",
    "sasl authentication",
    # The JVM Kafka client's AuthorizationException, met through Spark's Kafka source ("Not
    # authorized to access topics"):
    "not authorized",
    # Errors of ours not typed yet: ClickHouseSinkError (a missing table or database, a bad
    # URL), MirrorReadError (a missing partition), SparkConnectError (a bad URL):
    "does not exist",
    "names no host",
    "must not carry",
)
_TRANSIENT_WORDS = (
    # The text of a lost connection from outside our code, whose class does not say it: the
    # JVM's (Py4JJavaError, java.net.ConnectException, SocketTimeoutException), gRPC's (Spark
    # Connect), the OS's and HTTP clients' quoted by ClickHouseSinkError and SparkConnectError:
    "connection refused",
    "connection reset",
    "timed out",
    # librdkafka's text of a transient code quoted without the code (MirrorReadError, the
    # dead-letter send, older runs' KafkaReadError; "Local: Message timed out" above):
    "broker transport failure",
    # Runs of older versions, which raised KafkaReadError for these (now KafkaUnavailable,
    # ReadStalled):
    "unreachable",
    "stalled after",
)
_RACE_HINT = (
    "another writer keeps committing to this table: a zombie write (an earlier run's, still "
    "executing on the Spark Connect server) ends by itself and moves the checkpoint; a second "
    "deployment, HoodieStreamer or a table service writing the same table needs a person"
)
#: Dagster's reasons for a run that ended without its step failing: the process died.
_DEAD_PROCESS_REASONS = frozenset({"UNEXPECTED_TERMINATION", "RUN_WORKER_RESTART", "START_TIMEOUT"})
#: Dagster's own run-failure and engine messages for a run whose process died, which carry no
#: error and, from some launchers and older Dagster, no failure reason: the words are all there is.
_DEAD_PROCESS_WORDS = (
    "terminated by signal",  # "Run execution process for <id> was terminated by signal 9"
    "unexpectedly exited with code",  # the run worker's exit seen by the launcher
    "detected run worker status",  # the run monitor's verdict on a lost worker
    "marked as failed from outside the execution context",  # the code server's, after a kill
)


def _said(cls: str, message: str) -> str:
    """``<class>: <first line>``; Dagster's messages often start with the class already."""
    line = first_line(message, 300)
    return line if line.startswith(f"{cls}:") else f"{cls}: {line}"


def _matches(words: Iterable[str], text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in words)


def _fault(cls: str, message: str) -> Fault | None:
    """One error's fault: its type's (ours, else a library's), else its Kafka code's, else (a
    class that does not say) its words; None when nothing tells."""
    found = fault_of_class(cls) or _OUTSIDE_CLASSES.get(cls)
    if found is not None and found is not Fault.UNKNOWN:
        return found
    for code in _KAFKA_CODE.findall(message):
        if (by_code := fault_of_kafka_code(code)) is not Fault.UNKNOWN:
            return by_code
    if _matches(_PERSON_WORDS, message):
        return Fault.NEEDS_PERSON
    if _matches(_TRANSIENT_WORDS, message):
        return Fault.TRANSIENT
    return None


def diagnose(facts: FailureFacts) -> Diagnosis:
    """Why one run failed, and which kind of fault that is. Over the error chain, innermost cause
    first (it names the fault best): a race anywhere wins, then a person's fault, then transient.
    """
    faults = [(_fault(cls, message), cls, message) for cls, message in reversed(facts.errors)]
    for wanted in (Fault.RACE, Fault.NEEDS_PERSON, Fault.TRANSIENT):
        for fault, cls, message in faults:
            if fault is wanted:
                return Diagnosis(fault, _said(cls, message))
    if facts.errors:
        cls, message = facts.errors[-1]
        return Diagnosis(Fault.UNKNOWN, _said(cls, message))
    if facts.canceled:
        return Diagnosis(Fault.UNKNOWN, "the run was canceled")
    died = [m for m in facts.run_messages if _matches(_DEAD_PROCESS_WORDS, m)]
    if facts.failure_reason in _DEAD_PROCESS_REASONS or died:
        detail = first_line(died[0], 300) if died else str(facts.failure_reason)
        return Diagnosis(Fault.TRANSIENT, f"the run's process died ({detail})")
    if facts.run_messages:
        return Diagnosis(Fault.UNKNOWN, first_line(facts.run_messages[-1], 300))
    return Diagnosis(Fault.UNKNOWN, "no failure recorded")


@dataclass(frozen=True, slots=True)
class Backoff:
    """The wait before asking again after ``n`` failures: ``base * 2**(n-1)``, at most ``cap``."""

    base_s: float = 2.0
    cap_s: float = 60.0

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return min(self.cap_s, self.base_s * 2 ** min(failures - 1, 62))


#: The lag sensors' default: 2, 4, 8, ... seconds, at most a minute.
DEFAULT_BACKOFF = Backoff()


@dataclass(slots=True)
class Failures:
    """Failed runs that started from one state of one partition (or table): how many, the
    newest one's id, when it ended (epoch seconds) and why it failed."""

    count: int
    last_run_id: str
    last_failed_at: float | None = None
    diagnosis: Diagnosis | None = None


def given_up_message(what: str, state: str, failed: Failures, attempts: int) -> str:
    cause = f" Last failure: {failed.diagnosis.cause}." if failed.diagnosis else ""
    if failed.diagnosis and failed.diagnosis.fault is Fault.RACE:
        cause += f" The runs were fenced at their commit: {_RACE_HINT}."
    return (
        f"{what}: {failed.count} runs started from {state} failed (last: run "
        f"{failed.last_run_id}); retry.max_attempts is {attempts}, so no more runs are "
        "requested for it. Fix the cause (see that run's logs), then launch a run from the UI "
        f"or a backfill.{cause}"
    )


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """Whether to ask for a run now; if not, why (``waiting``: asked again later; else: stop)."""

    run: bool
    message: str | None = None
    waiting: bool = False


RUN = RetryDecision(run=True)


def decide_retry(
    what: str,
    start: str,
    failed: Failures | None,
    *,
    max_attempts: int,
    backoff: Backoff,
    now: float | None,
    shown_start: str | None = None,
) -> RetryDecision:
    """What to do about ``what`` (a partition, a table) after the ``failed`` runs from ``start``
    (``shown_start``: as a person reads it); ``now`` None applies no backoff.
    """
    if failed is None or failed.count <= 0:
        return RUN
    found = failed.diagnosis or Diagnosis(Fault.UNKNOWN, "no failure recorded")
    state = shown_start or start
    if found.fault is Fault.NEEDS_PERSON:
        return RetryDecision(
            run=False,
            message=(
                f"{what}: stopped, this needs a person: {found.cause} (run "
                f"{failed.last_run_id}, started from {state}). Fix the cause, then launch a "
                "run from the UI or a backfill."
            ),
        )
    if found.fault in (Fault.UNKNOWN, Fault.RACE) and failed.count >= max_attempts:
        return RetryDecision(run=False, message=given_up_message(what, state, failed, max_attempts))
    if now is not None and failed.last_failed_at is not None:
        remaining = failed.last_failed_at + backoff.delay(failed.count) - now
        if remaining > 0:
            n = failed.count
            return RetryDecision(
                run=False,
                waiting=True,
                message=(
                    f"{what}: retrying in {math.ceil(remaining)}s after {n} "
                    f"failure{'s' if n > 1 else ''}: {found.cause}"
                ),
            )
    return RUN
