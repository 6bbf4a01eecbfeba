"""A pipeline's columns from its registry subject, resolved once when the definitions load.

``registry.subject`` replaces a written ``schema:``: the subject's latest writer schema is asked
of the registry (``adapters.registry.subject_schema``, once per process) and mapped to columns
(``core.evolution``); the assets show them like written ones.

A registry that cannot be reached at load, or a subject it does not know, fails the load with
one line naming the pipeline, the subject, the registry and what to do, not a chain of
tracebacks. Failing is what a user expects here: without the columns no table can be created or
checked, and a pipeline quietly left out of the definitions would look like a healthy location
with one pipeline missing. The error keeps its kind: an unreachable registry is
:class:`SubjectUnavailableError` (transient: reload, or let the run be retried, once it is up),
an unknown subject or a schema no column can hold is a :class:`ConfigError` (a person fixes it).
"""

from __future__ import annotations

from eos_pipeline.adapters.registry import RegistryUnavailableError, subject_schema
from eos_pipeline.components.config import ConfigError, Pipeline
from eos_pipeline.core.schema import SchemaError


class SubjectUnavailableError(RegistryUnavailableError):
    """The registry could not be asked for a subject's columns while the definitions loaded."""

    code = "subject-unavailable"


def resolve_subject(pipeline: Pipeline, source: str = "<config>") -> Pipeline:
    """``pipeline`` with its subject's columns; a pipeline with a written schema as it is."""
    if pipeline.subject is None or pipeline.registry is None:
        return pipeline
    registry = pipeline.registry
    where = (
        f"{source}: pipeline {pipeline.name!r}: columns from registry subject "
        f"{pipeline.subject!r} at {registry.url}"
    )
    try:
        found = subject_schema(registry.settings(), pipeline.subject, registry.message)
        return pipeline.with_subject_columns(found.schema_id, found.columns)
    except RegistryUnavailableError as exc:
        raise SubjectUnavailableError(
            f"{where}: the registry could not be reached ({_first_line(exc)}). Start it or fix "
            "registry.url, then reload the code location"
        ) from None
    except (SchemaError, ValueError) as exc:  # RegistryAccessError is a SchemaError
        raise ConfigError(f"{where}: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
