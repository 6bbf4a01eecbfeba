"""How to reach Kafka (secrets kept out of logs), and the batch a range read returns."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError

from eos_pipeline.core.failover.identity import record_fingerprint
from eos_pipeline.core.offsets import OffsetRange, TopicPartition


class KafkaReadError(RuntimeError):
    """An offset range could not be read exactly as asked."""


class TopicMissingError(KafkaReadError):
    """The cluster answered: this topic does not exist there (or may not be described). Kept
    apart from a cluster that did not answer, which callers must never read as "no topic"."""


@dataclass(frozen=True)
class KafkaSettings:
    """Connection settings shared by admin, consumer and producer clients.

    ``client_config`` is passed through to librdkafka as-is (``security.protocol``,
    ``sasl.mechanisms``, ``sasl.username``, ``ssl.ca.location``...), which is how a real cluster
    with SASL/SSL is reached.
    """

    bootstrap_servers: str
    client_config: Mapping[str, Any] = field(default_factory=dict)
    #: Seconds a metadata or offsets request waits for an answer before the cluster counts as
    #: unreachable: what a sensor tick or a run waits out while a broker is down.
    request_timeout_s: float = 10.0

    def timeout(self, given: float | None = None) -> float:
        """``given`` if a caller chose a timeout, else :attr:`request_timeout_s`."""
        return self.request_timeout_s if given is None else given

    def config(self, **extra: Any) -> dict[str, Any]:
        # The client's refusals (a wrong password, a TLS mismatch) reach only its error
        # callback, while requests just time out: remember them so a timeout can name them.
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "error_cb": self._remember_refusal,
            **self.client_config,
            **extra,
        }

    def _key(self) -> tuple[str, str]:
        return self.bootstrap_servers, str(self.client_config.get("sasl.username", ""))

    def _remember_refusal(self, error: KafkaError) -> None:
        if error.code() in _REFUSALS:
            _LAST_REFUSAL[self._key()] = error.str()

    def no_answer(self, what: str, timeout: float, client: Any = None) -> KafkaReadError:
        """The error for a request that got no answer: the cluster's refusal of this client's
        credentials if it refused them (what to fix), else an unreachable cluster.

        ``client`` (whose request went unanswered) is polled once first: librdkafka hands its
        errors to the callback only from a poll.
        """
        refused = self.refused(what, client)
        if refused is not None:
            return refused
        return KafkaReadError(
            f"{what}: no answer from Kafka at {self.bootstrap_servers} (timed out after "
            f"{timeout:g} s); is the cluster up and reachable from here?"
        )

    def refused(self, what: str, client: Any = None) -> KafkaReadError | None:
        """The cluster's refusal of this client's credentials, if it refused them (what to
        fix); None when it did not (``client``, whose request went unanswered, is polled once
        first: librdkafka hands its errors to the callback only from a poll)."""
        if client is not None:
            client.poll(0)
        refusal = _LAST_REFUSAL.get(self._key())
        if not refusal:
            return None
        return KafkaReadError(
            f"{what}: Kafka at {self.bootstrap_servers} refused this client: {refusal}. "
            "Fix the pipeline's kafka.client settings (sasl.username / sasl.password, "
            "security.protocol, ssl.ca.location); the run read and wrote nothing."
        )

    def redacted_config(self) -> dict[str, Any]:
        """The client settings safe to show: secret values (passwords, JAAS, keys) masked."""
        return {k: "***" if is_secret_setting(k) else v for k, v in self.client_config.items()}

    def __repr__(self) -> str:
        # The dataclass repr would print sasl.password & co. into logs, tracebacks and metadata.
        return (
            f"KafkaSettings(bootstrap_servers={self.bootstrap_servers!r}, "
            f"client_config={self.redacted_config()!r})"
        )


#: How long a consumer of known offsets lets the broker hold a fetch (ms), librdkafka's
#: ``fetch.wait.max.ms`` and the Java client's ``fetch.max.wait.ms``. The default, 500 ms, is
#: paid whenever the broker has nothing to return at once: at a range's end when that is a
#: transaction's commit marker, or on a reused consumer's metadata lookups. Readers of ranges
#: that are in the log lose nothing by asking for an early answer.
RANGE_FETCH_WAIT_MS = 10

#: librdkafka errors that mean "the cluster will not talk to this client as configured".
_REFUSALS = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})
#: The newest such error per (bootstrap servers, SASL user), for :meth:`KafkaSettings.no_answer`.
_LAST_REFUSAL: dict[tuple[str, str], str] = {}

_SECRET_SETTING = re.compile(r"password|secret|jaas|token|\.pem$|key$|credentials", re.IGNORECASE)


def is_secret_setting(name: str) -> bool:
    """True for client settings whose value is a secret (``sasl.password``, ``ssl.key.pem``...)."""
    return bool(_SECRET_SETTING.search(name)) and not name.endswith(".location")


@dataclass
class KafkaBatch:
    """The records of one topic-partition in ``range``, column by column.

    ``range`` is the positions covered, which can be wider than the offsets present: transaction
    markers, aborted records and compaction leave holes, and a range may hold no record at all.
    """

    tp: TopicPartition
    range: OffsetRange
    offsets: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    #: Headers by position in the batch, only for records that have any (most have none).
    headers: dict[int, tuple[tuple[str, bytes | None], ...]] = field(default_factory=dict)
    value_bytes: int = 0

    def fingerprint(self, index: int) -> str:
        """The record identity MirrorMaker 2 preserves (``core.failover.record_fingerprint``)."""
        return record_fingerprint(
            self.keys[index],
            self.values[index],
            self.timestamps_ms[index],
            self.headers.get(index, ()),
        )

    def __len__(self) -> int:
        return len(self.offsets)
