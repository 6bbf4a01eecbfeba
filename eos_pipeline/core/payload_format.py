"""How a pipeline's record values are written: the format, and the schema registry behind it.

Plain data, carried by :class:`~eos_pipeline.core.schema.TableSchema` so that every place that
already judges records by the schema (both sinks, in the run's process and in Spark's Python
workers) also knows how to read the bytes. Secrets are kept as the name of the environment
variable that holds them, read by the process that talks to the registry. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Format(StrEnum):
    """The wire format of record values (the pipelines file's ``format:``)."""

    JSON = "json"  #: a JSON object per value, no framing
    AVRO = "avro"  #: Confluent framing + Avro binary
    PROTOBUF = "protobuf"  #: Confluent framing + message indexes + Protobuf binary
    JSON_SCHEMA = "json_schema"  #: Confluent framing + a JSON object

    @property
    def framed(self) -> bool:
        """True when values carry the Confluent header and need the registry."""
        return self is not Format.JSON

    @property
    def schema_type(self) -> str:
        """The registry's ``schemaType`` this format's writer schemas must have."""
        return {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}.get(self, "")


@dataclass(frozen=True, slots=True)
class Secret:
    """A literal value, or the name of the environment variable that holds it."""

    value: str | None = None
    env: str | None = None

    def __repr__(self) -> str:  # never print a literal secret in a log or an error
        return f"Secret(env={self.env!r})" if self.env else "Secret(***)"


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    """Where the schema registry is (its Confluent-compatible API) and how to log in."""

    url: str
    username: str | None = None
    password: Secret | None = None
    token: Secret | None = None
    #: Seconds per registry request before it counts as unreachable.
    timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class PayloadFormat:
    kind: Format = Format.JSON
    registry: RegistrySettings | None = None

    def __post_init__(self) -> None:
        if self.kind.framed and self.registry is None:
            raise ValueError(f"format {self.kind.value} needs a schema registry (registry.url)")


JSON_FORMAT = PayloadFormat()
