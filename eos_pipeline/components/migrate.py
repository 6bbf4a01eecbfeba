"""``eos-pipeline migrate-config PIPELINES_YAML``: the old single file as a defs folder, once.

Each pipeline becomes ``<defs>/<name>/defs.yaml`` (``KafkaTablesComponent``), the top-level
``keeper``, ``clickhouse``, ``spark`` and ``sensor_interval_seconds`` become
``<defs>/shared/defs.yaml`` (``SharedResourcesComponent``). ``${NAME:-default}`` becomes Dagster's
``{{ env.NAME or 'default' }}`` (unset or empty: the default, as before) and ``${NAME}`` becomes
``{{ env('NAME') }}`` (unset: an error, as before); ``{env: NAME}`` secrets stay as they are.
The file is validated first (with this process's environment), so a bad file moves nothing.
Comments do not survive the move.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from eos_pipeline.components.component import PIPELINE_TYPE, SHARED_PATH, SHARED_TYPE
from eos_pipeline.components.config import ConfigError, parse_config

_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SHARED_KEYS = ("keeper", "clickhouse", "spark", "sensor_interval_seconds")


def to_template(value: Any) -> Any:
    """``${...}`` in every string of a parsed YAML tree as Dagster's ``{{ env... }}``."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if default is None:
                return "{{ env('" + name + "') }}"
            quoted = default.replace("\\", "\\\\").replace("'", "\\'")
            return "{{ env." + name + " or '" + quoted + "' }}"

        return _INTERPOLATION.sub(sub, value)
    if isinstance(value, list):
        return [to_template(v) for v in value]
    if isinstance(value, dict):
        return {k: to_template(v) for k, v in value.items()}
    return value


def _write(path: Path, type_name: str, attributes: dict[str, Any], source: str) -> None:
    path.mkdir(parents=True)
    header = f"# Moved from {source} by `eos-pipeline migrate-config`.\n"
    body = yaml.safe_dump(
        {"type": type_name, "attributes": attributes}, sort_keys=False, default_flow_style=False
    )
    (path / "defs.yaml").write_text(header + body)


def migrate(pipelines_file: Path, defs_dir: Path) -> list[Path]:
    """Write ``defs_dir``'s component folders from ``pipelines_file``; return the files written.

    Refuses (writing nothing) a file that does not validate or a folder that already exists.
    """
    return migrate_text(pipelines_file.read_text(), pipelines_file.name, defs_dir)


def migrate_text(text: str, source: str, defs_dir: Path) -> list[Path]:
    """:func:`migrate` for a pipelines file's text (``source`` names it in messages)."""
    parse_config(text, source)  # raises ConfigError, naming the field
    raw = yaml.safe_load(text)
    shared = {k: raw[k] for k in _SHARED_KEYS if k in raw}
    targets = [(defs_dir / SHARED_PATH, SHARED_TYPE, shared)]
    targets += [(defs_dir / p["name"], PIPELINE_TYPE, p) for p in raw["pipelines"]]
    taken = [str(path) for path, _, _ in targets if path.exists()]
    if taken:
        raise ConfigError(f"already there, not overwritten: {', '.join(taken)}")
    for path, type_name, attributes in targets:
        _write(path, type_name, to_template(attributes), source)
    return [path / "defs.yaml" for path, _, _ in targets]
