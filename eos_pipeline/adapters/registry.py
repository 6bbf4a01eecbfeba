"""The schema registry behind framed formats: writer schemas by id, kept for the process (an id's
schema never changes), through confluent-kafka's client (Confluent, Apicurio's ccompat,
Karapace; ``mock://`` in unit tests). What an answer means for a record:

* the schema: decode with it; a 404 with the registry's code 40403: ``UnknownSchemaId``;
* no answer, a timeout, a 5xx: :class:`RegistryUnavailableError`, never a dead letter (the run
  is retried);
* 401/403, or a 404 that is not the registry's (a wrong URL): an error for a person.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eos_pipeline.core.decode import (
    Decoded,
    RegistryUnavailableError,
    WriterSchema,
    decode_framed,
    decode_json,
)
from eos_pipeline.core.evolution import writer_columns
from eos_pipeline.core.schema import Column, RegistrySettings, SchemaError, Secret, TableSchema

if TYPE_CHECKING:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

#: The registry's error codes for "no schema with this id": 40403 (Confluent's API, Apicurio's
#: too) and 40400 (confluent-kafka's ``mock://`` registry).
SCHEMA_NOT_FOUND = frozenset({40403, 40400})
#: "Subject not found" (40401), "version not found" (40402); 40400 from the ``mock://`` one.
SUBJECT_NOT_FOUND = frozenset({40401, 40402, 40400})
#: Requests a client makes before an unreachable registry counts as unavailable (each one
#: already waits ``timeout_s``): the run fails soon and the sensor's backoff takes over.
_MAX_RETRIES = 1


class RegistryAccessError(SchemaError):
    """The registry refused the credentials, or the URL names no registry: needs a person."""


def _secret(secret: Secret | None, what: str) -> str | None:
    if secret is None:
        return None
    if secret.env is None:
        return secret.value
    value = os.environ.get(secret.env)
    if value is None:
        # "MissingSecretError" is read as needing a person by the run-failure diagnosis.
        raise RegistryAccessError(
            f"registry.{what}: environment variable {secret.env} is not set in this process"
        )
    return value


def client_config(settings: RegistrySettings) -> dict[str, Any]:
    """confluent-kafka's client settings for ``settings``, secrets read from the environment."""
    conf: dict[str, Any] = {
        "url": settings.url,
        "timeout": settings.timeout_s,
        "max.retries": _MAX_RETRIES,
        "retries.wait.ms": 200,
        "retries.max.wait.ms": 1000,
    }
    if settings.username is not None:
        password = _secret(settings.password, "password") or ""
        conf["basic.auth.user.info"] = f"{settings.username}:{password}"
    token = _secret(settings.token, "token")
    if token is not None:
        conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
        conf["bearer.auth.token"] = token
        conf["bearer.auth.logical.cluster"] = ""  # Confluent Cloud's; other registries ignore it
    return conf


class RegistrySchemas:
    """:class:`core.decode.WriterSchemas` over one registry, every answer kept (ids included
    that the registry does not know: a record's verdict must not change within a process)."""

    def __init__(self, settings: RegistrySettings, client: Any | None = None) -> None:
        self.settings = settings
        if client is None:
            # imported here: the package loads an HTTP client stack (~0.25 CPU-s) that only a
            # pipeline with a registry needs, not every process that loads the code location
            from confluent_kafka.schema_registry import SchemaRegistryClient

            client = SchemaRegistryClient.new_client(client_config(settings))
        self.client = client
        self._known: dict[int, WriterSchema | None] = {}
        self._lock = threading.Lock()
        #: Requests made and answers served from the cache, for the run's metadata.
        self.lookups = 0
        self.hits = 0

    def get(self, schema_id: int) -> WriterSchema | None:
        with self._lock:
            if schema_id in self._known:
                self.hits += 1
                return self._known[schema_id]
        found = self._fetch(schema_id)
        with self._lock:
            self.lookups += 1
            self._known[schema_id] = found
        return found

    def _fetch(self, schema_id: int) -> WriterSchema | None:
        what = f"schema id {schema_id}"
        schema = self._ask(what, lambda: self.client.get_schema(schema_id, fmt="serialized"))
        if schema is None:
            return None
        dependencies = self._references(schema, set()) if schema.references else ()
        return WriterSchema(schema.schema_type or "AVRO", schema.schema_str, dependencies)

    def latest(self, subject: str) -> int:
        """The id of ``subject``'s latest version. Raises :class:`RegistryAccessError` for a
        subject the registry does not know, :class:`RegistryUnavailableError` without an answer.
        """
        what = f"the latest schema of subject {subject!r}"
        found = self._ask(what, lambda: self.client.get_latest_version(subject), SUBJECT_NOT_FOUND)
        if found is None:
            raise RegistryAccessError(
                f"schema registry at {self.settings.url} has no subject {subject!r}: check "
                "registry.subject (a value schema's subject is usually '<topic>-value')"
            )
        return int(found.schema_id)

    def _references(self, schema: Any, seen: set[str]) -> tuple[str, ...]:
        """Protobuf imports, each after its own, fetched as the registry names them."""
        out: list[str] = []
        for ref in schema.references or ():
            if ref.name in seen:
                continue
            seen.add(ref.name)
            registered = self._ask(
                f"reference {ref.subject} v{ref.version}",
                lambda r=ref: self.client.get_version(r.subject, r.version, True, "serialized"),
                missing=frozenset(),
            )
            out.extend(self._references(registered.schema, seen))
            out.append(registered.schema.schema_str)
        return tuple(out)

    def _ask(
        self, what: str, call: Callable[[], Any], missing: frozenset[int] = SCHEMA_NOT_FOUND
    ) -> Any:
        """``call``'s answer; None for a 404 with one of the ``missing`` codes."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return call()
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404 and exc.error_code in missing:
                return None
            raise self._error(exc) from exc
        except Exception as exc:  # httpx2's connection errors, timeouts, a closed socket
            raise RegistryUnavailableError(
                f"schema registry at {self.settings.url} could not be reached while looking up "
                f"{what}: {type(exc).__name__}: {exc}"
            ) from exc

    def _error(self, exc: SchemaRegistryError) -> Exception:
        status = exc.http_status_code
        if status in (401, 403):
            return RegistryAccessError(
                f"schema registry at {self.settings.url}: not authorized (HTTP {status}): check "
                "registry.username/password or registry.token"
            )
        if status == 404:
            return RegistryAccessError(
                f"schema registry at {self.settings.url} answered 404 without its 'schema not "
                f"found' code: invalid url? It must be the Confluent-compatible API "
                f"(Apicurio: .../apis/ccompat/v7). Answer: {exc}"
            )
        return RegistryUnavailableError(
            f"schema registry at {self.settings.url} could not be reached (HTTP {status}): {exc}"
        )


_PROCESS_SCHEMAS: dict[RegistrySettings, RegistrySchemas] = {}
_PROCESS_LOCK = threading.Lock()


def schemas_for(settings: RegistrySettings) -> RegistrySchemas:
    """This process's one :class:`RegistrySchemas` per registry (its cache lives as long)."""
    with _PROCESS_LOCK:
        found = _PROCESS_SCHEMAS.get(settings)
        if found is None:
            found = _PROCESS_SCHEMAS[settings] = RegistrySchemas(settings)
        return found


@dataclass(frozen=True, slots=True)
class SubjectSchema:
    """A subject's latest writer schema as table columns."""

    subject: str
    schema_id: int
    columns: tuple[Column, ...]


_SUBJECTS: dict[tuple[RegistrySettings, str, str | None], SubjectSchema] = {}


def subject_schema(
    settings: RegistrySettings, subject: str, message: str | None = None
) -> SubjectSchema:
    """The columns of ``subject``'s latest schema (Protobuf: of ``message``, default the file's
    first), asked of the registry once per process: definitions load once, and the table then
    follows newer schemas record by record (:mod:`core.evolution`)."""
    key = (settings, subject, message)
    with _PROCESS_LOCK:
        found = _SUBJECTS.get(key)
    if found is not None:
        return found
    schemas = schemas_for(settings)
    schema_id = schemas.latest(subject)
    writer = schemas.get(schema_id)
    if writer is None:  # deleted between the two requests
        raise RegistryAccessError(f"subject {subject!r}: schema id {schema_id} is gone")
    try:
        columns = writer_columns(writer, message=message)
    except SchemaError as exc:
        raise SchemaError(f"registry subject {subject!r} (schema id {schema_id}): {exc}") from None
    found = SubjectSchema(subject, schema_id, columns)
    with _PROCESS_LOCK:
        _SUBJECTS[key] = found
    return found


def decode_values(values: Sequence[bytes | None], schema: TableSchema) -> Decoded:
    """Judge each value by the contract in the pipeline's format (the per-record path of both
    sinks). Raises :class:`RegistryUnavailableError` rather than judge without the registry."""
    if not schema.format.kind.framed:
        return decode_json(values, schema)
    assert schema.format.registry is not None
    return decode_framed(values, schema, schemas_for(schema.format.registry))
