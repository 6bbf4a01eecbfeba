"""Pipelines from a YAML file: what to read, how to decode it, where to write it.

Adding a pipeline is editing this file, never code. Two ways to take values from the
environment, for two different purposes:

* ``${NAME}`` / ``${NAME:-default}`` inside any string is replaced when the file is loaded. Use
  it for deployment settings that may be shown in the UI (endpoints, data paths, ports).
* ``{env: NAME}`` as a value marks a secret. It is never read at load time: it becomes a Dagster
  ``EnvVar`` (or, inside Kafka client settings, a variable name resolved in the run's process),
  so the secret is neither stored in the instance nor shown in the UI.

A bad file fails at load with the file, the field path and what is wrong, e.g.
``pipelines.yaml: pipelines[0].clickhouse.table: 'my-table' is not a valid identifier``.
The fields and their rules are in :mod:`eos_pipeline.components.config_schema` (re-exported here).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
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
    SparkConfig,
)

__all__ = [
    "DEFAULT_PIPELINES_FILE",
    "IN_PROCESS",
    "PIPELINES_FILE_ENV",
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
    "SparkConfig",
    "config_path",
    "interpolate",
    "load_config",
    "parse_config",
]

PIPELINES_FILE_ENV = "EOS_PIPELINES_FILE"
#: The repository's own file, used when ``EOS_PIPELINES_FILE`` is not set.
DEFAULT_PIPELINES_FILE = Path(__file__).resolve().parents[2] / "pipelines.yaml"
_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(ValueError):
    """The pipelines file cannot be used; the message names the file and the field."""


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


def _explain(source: str, exc: ValidationError) -> ConfigError:
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
        raise _explain(source, exc) from None


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get(PIPELINES_FILE_ENV) or DEFAULT_PIPELINES_FILE)


def load_config(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> PipelinesFile:
    """Load ``EOS_PIPELINES_FILE``, else the repository's ``pipelines.yaml``."""
    file = Path(path) if path is not None else config_path(environ)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the pipelines file {file}: {exc.strerror or exc} (set "
            f"{PIPELINES_FILE_ENV} to its path)"
        ) from None
    return parse_config(text, source=str(file), environ=environ)
