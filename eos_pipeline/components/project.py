"""A defs folder of pipeline components, loaded the way ``dg`` and ``dagster dev`` load it.

The project's own folder is ``eos_pipeline/defs`` (``[tool.dg]`` in pyproject.toml);
``EOS_DEFS_DIR`` names another one (a deployment's, a test's), laid out the same way. The code
location (:mod:`eos_pipeline.definitions`), the CLI (``failover``, ``replay``: a pipeline by
name) and the demo all go through :func:`load_project`, so there is one way in.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from pydantic import ValidationError

from eos_pipeline.components.builder import location_definitions
from eos_pipeline.components.component import KafkaTablesComponent, SharedResourcesComponent
from eos_pipeline.components.config import ConfigError, PipelinesFile, Settings, explain

DEFS_DIR_ENV = "EOS_DEFS_DIR"
#: The project's defs folder (``[tool.dg.project] defs_module``).
PACKAGE_DEFS_MODULE = "eos_pipeline.defs"


def package_defs_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "defs"


def defs_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``EOS_DEFS_DIR`` if set, else the project's ``eos_pipeline/defs``."""
    env = os.environ if environ is None else environ
    named = env.get(DEFS_DIR_ENV)
    return Path(named).resolve() if named else package_defs_dir()


def _defs_module(folder: Path) -> types.ModuleType:
    """The folder as a Python package, as the component tree wants one.

    The project's own folder is ``eos_pipeline.defs``; any other gets a module of its own whose
    name follows from its path, so two folders never share one.
    """
    if folder == package_defs_dir():
        return importlib.import_module(PACKAGE_DEFS_MODULE)
    name = "eos_defs_" + "".join(c if c.isalnum() else "_" for c in str(folder))
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        module.__path__ = [str(folder)]
        module.__file__ = str(folder / "__init__.py")
        sys.modules[name] = module
    return module


@contextmanager
def _quiet() -> Iterator[None]:
    """Dagster's own beta/preview notes about how it loads components (code references, module
    loaders), not about anything the project chose: said on every load, so kept out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        yield


@dataclass(frozen=True)
class Project:
    """A loaded defs folder: its component tree and the configuration it holds."""

    folder: Path
    tree: dg.ComponentTree
    config: PipelinesFile

    def definitions(self) -> dg.Definitions:
        """Every component's definitions, plus what spans pipelines (the failover job).

        Built from the folder, not the whole tree: the whole tree also loads the catalogue of
        every installed package's components (0.16-0.26 s of each run process's start)."""
        with _quiet():
            built = self.tree.build_defs(self.folder)
        return dg.Definitions.merge(built, location_definitions(self.config))


@contextmanager
def _environment(environ: Mapping[str, str] | None) -> Iterator[None]:
    """``environ`` as the process environment while templates render (``{{ env.X }}`` reads
    ``os.environ``), restored afterwards; None: the process's own."""
    if environ is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def load_project(
    folder: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Project:
    """Load ``folder`` (default: :func:`defs_dir` of ``environ``) with ``environ``'s variables
    (default: this process's); a missing or empty folder is a ConfigError."""
    with _environment(environ):
        return _load(Path(folder).resolve() if folder is not None else defs_dir())


def _load(path: Path) -> Project:
    if not path.is_dir():
        raise ConfigError(
            f"no defs folder at {path} (set {DEFS_DIR_ENV} to a folder of pipeline defs.yaml "
            "files, or move a pipelines.yaml with `eos-pipeline migrate-config`)"
        )
    tree = dg.ComponentTree.from_module(defs_module=_defs_module(path), project_root=path.parent)
    with _quiet():
        pipelines = [c.pipeline for c in tree.get_all_components(of_type=KafkaTablesComponent)]
        shared = tree.get_all_components(of_type=SharedResourcesComponent)
    if not pipelines:
        raise ConfigError(f"{path}: no pipeline (no defs.yaml of type KafkaTablesComponent)")
    if len(shared) != 1:
        raise ConfigError(
            f"{path}: expected one SharedResourcesComponent (shared/defs.yaml), found {len(shared)}"
        )
    settings: Settings = shared[0].settings
    try:
        # The rules across pipelines (names and tables used once) are PipelinesFile's.
        config = PipelinesFile.model_validate(
            {**settings.model_dump(), "pipelines": pipelines, "source": str(path)}
        )
    except ValidationError as exc:
        raise explain(str(path), exc) from None
    return Project(path, tree, config)
