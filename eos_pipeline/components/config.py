"""Reading the configuration's old single-file shape (``pipelines.yaml``), for the one-shot move.

Pipelines now live as Dagster components, one ``defs.yaml`` each in the project's defs folder
(:mod:`eos_pipeline.components.component`, :mod:`eos_pipeline.components.project`). This module
keeps what reads the old file, used by ``eos-pipeline migrate-config``
(:mod:`eos_pipeline.components.migrate`) and by tests that hold a configuration in memory:

* ``${NAME}`` / ``${NAME:-default}`` inside any string is replaced when the file is read;
* ``{env: NAME}`` as a value marks a secret, read by the run's process only (also in
  ``defs.yaml``).

A bad file fails with the file, the field path and what is wrong, e.g.
``pipelines.yaml: pipelines[0].clickhouse.table: 'my-table' is not a valid identifier``
(:func:`explain`, also used for ``defs.yaml``). The fields and their rules are in
:mod:`eos_pipeline.components.config_schema` (re-exported here).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from eos_pipeline.components.config_schema import (
    IN_PROCESS,
    Batch,
    ClickHouseConfig,
    ClickHouseTable,
    EnvRef,
    Follow,
    HudiTarget,
    KafkaSource,
    KeeperConfig,
    Pipeline,
    PipelinesFile,
    Retry,
    Secret,
    Settings,
    SparkConfig,
)

__all__ = [
    "IN_PROCESS",
    "Batch",
    "ClickHouseConfig",
    "ClickHouseTable",
    "ConfigError",
    "EnvRef",
    "Follow",
    "HudiTarget",
    "KafkaSource",
    "KeeperConfig",
    "Pipeline",
    "PipelinesFile",
    "Retry",
    "Secret",
    "Settings",
    "SparkConfig",
    "explain",
    "interpolate",
    "parse_config",
]

_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the file and the field."""


# ----------------------------------------------------------------------------------- loading


def interpolate(value: Any, environ: Mapping[str, str]) -> Any:
    """Replace ``${NAME}`` / ``${NAME:-default}`` in every string of a parsed YAML tree."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in environ and environ[name] != "":
                return environ[name]
            if default is not None:
                return default
            raise ConfigError(f"environment variable {name} is not set and has no default")

        return _INTERPOLATION.sub(sub, value)
    if isinstance(value, list):
        return [interpolate(v, environ) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, environ) for k, v in value.items()}
    return value


_UNION_TAGS = frozenset({"str", "int", "bool", "EnvRef"})


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def explain(source: str, exc: ValidationError) -> ConfigError:
    """A validation error as one line per field: ``source: field.path: what is wrong``."""
    lines = []
    errors = exc.errors(include_url=False)
    scalar = {"string_type", "int_type", "int_parsing", "bool_type", "bool_parsing"}
    if len(errors) > 1:
        # A `{env: ...}` mapping with a typo also fails the plain-value branches of the union;
        # those complaints ("should be a valid string") say nothing useful, keep the others.
        errors = [e for e in errors if not (e["type"] in scalar and isinstance(e["input"], dict))]
    for err in errors:
        # Unions report every branch; the first is the informative one for our types.
        loc = tuple(p for p in err["loc"] if p not in _UNION_TAGS)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field (misspelt?)"
        elif err["type"] == "missing":
            message = "required field is missing"
        lines.append(f"{source}: {_loc(loc).replace('schema_', 'schema')}: {message}")
    unique = list(dict.fromkeys(lines))
    return ConfigError("\n".join(unique))


def parse_config(
    text: str, source: str = "<config>", environ: Mapping[str, str] | None = None
) -> PipelinesFile:
    """Parse and validate a pipelines file's text; raise :class:`ConfigError` on any problem."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping with a 'pipelines' list at the top")
    try:
        raw = interpolate(raw, os.environ if environ is None else environ)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    try:
        return PipelinesFile.model_validate({**raw, "source": source})
    except ValidationError as exc:
        raise explain(source, exc) from None
