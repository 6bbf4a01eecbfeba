"""How to reach Kafka (secrets kept out of logs), and the batch a range read returns."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eos_pipeline.core.failover.identity import record_fingerprint
from eos_pipeline.core.offsets import OffsetRange, TopicPartition


class KafkaReadError(RuntimeError):
    """An offset range could not be read exactly as asked."""


@dataclass(frozen=True)
class KafkaSettings:
    """Connection settings shared by admin, consumer and producer clients.

    ``client_config`` is passed through to librdkafka as-is (``security.protocol``,
    ``sasl.mechanisms``, ``sasl.username``, ``ssl.ca.location``...), which is how a real cluster
    with SASL/SSL is reached.
    """

    bootstrap_servers: str
    client_config: Mapping[str, Any] = field(default_factory=dict)

    def config(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.client_config, **extra}

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
