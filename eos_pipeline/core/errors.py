"""What kind of failure an error is, said by its type where the fact is known (:class:`Transient`,
:class:`Race`, :class:`NeedsPerson`, each with a stable ``code``); the kind decides what follows
a failed run (:mod:`eos_pipeline.core.retries`). An adapter raises the kind where it learns the
cause. A failed Dagster step reaches the sensors as class name and message only, so
:func:`fault_of_class` maps names back through the classes themselves (every
:class:`PipelineError` subclass the process imported: the processes that read failures import
the Kafka and keeper adapters, as a test checks); no message is read.

A Kafka client error's class says nothing of its kind, its librdkafka code does:
:func:`fault_of_kafka_code` is the one table of codes (for the Kafka adapter and ``core.retries``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class Fault(StrEnum):
    TRANSIENT = "transient"
    NEEDS_PERSON = "needs a person"
    UNKNOWN = "unknown"
    #: Another writer committed first (a Hudi fence): retried a bounded number of times.
    RACE = "fenced by another writer"


class PipelineError(Exception):
    """Base of the product's typed errors: ``code`` names the fact, ``fault`` what to do."""

    code: ClassVar[str] = "error"
    fault: ClassVar[Fault] = Fault.UNKNOWN


class Transient(PipelineError):
    """A part of the stack did not answer in time: ask again later."""

    code = "transient"
    fault = Fault.TRANSIENT


class Race(PipelineError):
    """Another writer moved the state first; nothing of this attempt was kept."""

    code = "race"
    fault = Fault.RACE


class NeedsPerson(PipelineError):
    """No retry can fix this: configuration, a fenced writer, state that does not fit the log."""

    code = "needs-person"
    fault = Fault.NEEDS_PERSON


class LogChanged(NeedsPerson):
    """A stored position is not from the log Kafka holds now (see
    :func:`eos_pipeline.core.positions.check_same_log`); ``reason`` says which fact showed it:
    ``topic-recreated``, ``partition-gone``, ``log-behind`` or ``retention``."""

    code = "log-changed"

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class HudiCommitError(RuntimeError):
    """A Hudi transaction could not be committed, or not as asked (raised by the Hudi adapter)."""


class HudiFencedError(Race, HudiCommitError):
    """Another writer moved the table's checkpoint after this transaction started: fenced.
    Declared here, not in the adapter that raises it, so that every process knows its name."""

    code = "hudi-fenced"


def first_line(said: str | BaseException, limit: int = 400) -> str:
    """The first non-blank line of a message (an error without one: its class name), cut to
    ``limit``: what a UI line or a run's diagnosis shows of a long error (tracebacks and server
    dumps follow their first line)."""
    line = next((part.strip() for part in str(said).splitlines() if part.strip()), "")
    if not line and isinstance(said, BaseException):
        line = type(said).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def fault_of_class(name: str) -> Fault | None:
    """The fault of the typed error class called ``name`` (None: not one of ours)."""
    stack: list[type[PipelineError]] = [PipelineError]
    while stack:  # depth first, each class before its subclasses
        cls = stack.pop()
        if cls.__name__ == name:
            return cls.fault
        stack.extend(reversed(cls.__subclasses__()))
    return None


#: librdkafka's error codes of a known kind, by name (``KafkaError.name()``; a
#: ``KafkaException``'s text carries it as ``code=<name>``); every other code is of no known kind.
_KAFKA_CODES: dict[str, Fault] = {
    **dict.fromkeys(
        (
            "OFFSET_OUT_OF_RANGE",  # the range's start is no longer in the log
            "TOPIC_AUTHORIZATION_FAILED",
            "CLUSTER_AUTHORIZATION_FAILED",
            "GROUP_AUTHORIZATION_FAILED",
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
            "SASL_AUTHENTICATION_FAILED",
            "_AUTHENTICATION",
        ),
        Fault.NEEDS_PERSON,
    ),
    **dict.fromkeys(
        (
            "_TRANSPORT",
            "_ALL_BROKERS_DOWN",
            "_TIMED_OUT",
            "_TIMED_OUT_QUEUE",
            "_MSG_TIMED_OUT",
            "REQUEST_TIMED_OUT",
            "COORDINATOR_LOAD_IN_PROGRESS",
            "LEADER_NOT_AVAILABLE",
            "NOT_LEADER_FOR_PARTITION",
            "NOT_LEADER_OR_FOLLOWER",
        ),
        Fault.TRANSIENT,
    ),
}


def fault_of_kafka_code(name: str) -> Fault:
    """The fault of librdkafka's error code called ``name`` (``UNKNOWN``: none known)."""
    return _KAFKA_CODES.get(name.upper(), Fault.UNKNOWN)
