"""The component types, loading a defs folder, and the Definitions they build.

A component's attributes are the pydantic models of :mod:`eos_pipeline.components.config`
themselves, so ``dg check yaml`` validates with the code's schema. ``{{ env.NAME }}`` templates
render at load (shown in the UI); ``{env: NAME}`` secrets are read by the run's process only.

Dagster refuses two different resources under one key, so what every pipeline uses comes from
one ``SharedResourcesComponent``; likewise a topic two pipelines read is one asset
(:func:`location_definitions`). ``registry.subject``'s columns are asked of the registry at load
(:func:`resolve_subject`): a pipeline quietly left out would look like a healthy location.
The code location, the CLI and the demo all load through :func:`load_project`.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
import importlib
import os
import sys
import types
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
from pydantic import BaseModel, ValidationError

from eos_pipeline.adapters.registry import RegistryUnavailableError, subject_schema
from eos_pipeline.components.assets import (
    CLICKHOUSE_SINK,
    HooksFor,
    clickhouse_asset,
    clickhouse_key,
    hudi_asset,
    hudi_key,
    hudi_pool,
    topic_key,
)
from eos_pipeline.components.checks import clickhouse_check, hudi_check
from eos_pipeline.components.config import (
    SHARED_PATH,
    ConfigError,
    Pipeline,
    PipelinesFile,
    Settings,
    explain,
)
from eos_pipeline.components.metadata import source_roles
from eos_pipeline.components.replay import clickhouse_replay_job, hudi_replay_job
from eos_pipeline.components.resources import (
    chdb_path,
    kafka_resource_key,
    pipeline_resources,
    shared_resources,
)
from eos_pipeline.components.sensors import (
    clickhouse_lag_sensor,
    hudi_lag_sensor,
    partitions_sensor,
)
from eos_pipeline.components.source import failover_jobs
from eos_pipeline.components.topics import source_check, topic_specs, topics_sensor
from eos_pipeline.core.errors import first_line
from eos_pipeline.core.schema import SchemaError
from eos_pipeline.sinks.hooks import NO_HOOKS


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
            f"{where}: the registry could not be reached ({first_line(exc)}). Start it or fix "
            "registry.url, then reload the code location"
        ) from None
    except (SchemaError, ValueError) as exc:  # RegistryAccessError is a SchemaError
        raise ConfigError(f"{where}: {first_line(exc)}") from None


# ------------------------------------------------------------------------ tables in the catalog


#: The fields of a Kafka record that source columns copy, by the role the column plays.
KAFKA_FIELDS = {
    "topic": ("string", "the record's topic"),
    "partition": ("int32", "the record's partition"),
    "offset": ("int64", "the record's offset in its partition"),
    "timestamp": ("int64", "the record's timestamp (milliseconds since the epoch)"),
}


def freshness_policy(pipeline: Pipeline) -> dg.FreshnessPolicy | None:
    if pipeline.lag_target_seconds is None:
        return None
    fail = timedelta(seconds=pipeline.lag_target_seconds)
    warn = fail / 2 if fail >= timedelta(minutes=2) else None  # Dagster's floor: one minute
    return dg.FreshnessPolicy.time_window(fail_window=fail, warn_window=warn)


def topic_columns(pipeline: Pipeline) -> dg.TableSchema:
    """A topic's records as the pipeline reads them: Kafka's own fields, then the payload's."""
    kafka = [
        dg.TableColumn(name=name, type=type_, description=what)
        for name, (type_, what) in KAFKA_FIELDS.items()
    ]
    types = pipeline.schema_ or {c.name: c.sql_type for c in pipeline.table_schema.columns}
    payload = [
        dg.TableColumn(name=name, type=ch_type, description="field of the record's payload")
        for name, ch_type in types.items()
    ]
    return dg.TableSchema(columns=[*kafka, *payload])


def column_lineage(pipeline: Pipeline) -> dg.TableColumnLineage:
    """Each table column from its field of the topic's records (one topic per Hudi table; a
    ClickHouse table reading several topics has each column from all of them)."""
    schema = pipeline.table_schema
    from_kafka = source_roles(schema.source)
    topics = [topic_key(t) for t in pipeline.kafka.topics]
    return dg.TableColumnLineage(
        deps_by_column={
            column: [
                dg.TableColumnDep(asset_key=key, column_name=from_kafka.get(column, column))
                for key in topics
            ]
            for column in schema.column_names
        }
    )


def with_table_facts(
    pipeline: Pipeline, assets: Iterable[dg.AssetsDefinition]
) -> list[dg.AssetsDefinition]:
    """The pipeline's table assets with their freshness policy and column lineage."""
    policy = freshness_policy(pipeline)
    lineage = column_lineage(pipeline)

    def apply(spec: dg.AssetSpec) -> dg.AssetSpec:
        spec = spec.merge_attributes(metadata={"dagster/column_lineage": lineage})
        return spec.replace_attributes(freshness_policy=policy) if policy else spec

    return list(dg.map_asset_specs(apply, assets))


# ---------------------------------------------------------------------------------- definitions


SENSOR_INTERVAL_ENV = "EOS_SENSOR_INTERVAL_SECONDS"
#: Pool of every ClickHouse step on an embedded chDB path (one process per data path):
#: ``dagster.yaml`` gives every pool one slot, so runs from sensors, backfills and the UI wait.
CHDB_POOL = "chdb"


@contextmanager
def _quiet() -> Iterator[None]:
    """Dagster's beta/preview notes: said on every load of a component (code references, module
    loaders) or of a feature the project chose."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        yield


def shared_definitions(settings: Settings) -> dg.Definitions:
    """The resources every pipeline uses, and the executor."""
    return dg.Definitions(
        resources=shared_resources(settings),
        # One process per run: chDB allows one process per data path, and the Hudi asset and
        # its check share one Spark session instead of starting a JVM each.
        executor=dg.in_process_executor,
    )


def pipeline_definitions(
    pipeline: Pipeline, settings: Settings, hooks: HooksFor | None = None
) -> dg.Definitions:
    """One pipeline: each sink's asset, its exactly-once check and its source check (evaluated
    by the topics sensor), its lag sensor and replay job; the pipeline's sensors and Kafka
    resource."""
    interval = int(os.environ.get(SENSOR_INTERVAL_ENV) or settings.sensor_interval_seconds)
    url = settings.clickhouse.url
    # the embedded chDB path, if any; a URL from a secret is only known at run time: serialize
    path = chdb_path(url) if isinstance(url, str) else "(from environment)"
    pool = CHDB_POOL if path else None
    assets: list[dg.AssetsDefinition] = []
    checks: list[dg.AssetChecksDefinition] = []
    sensors = [partitions_sensor(pipeline, interval), topics_sensor(pipeline, interval)]
    jobs: list[dg.JobDefinition] = []
    # Chosen on purpose and covered by tests: partitioned asset checks (preview), the single-run
    # backfill policy and code references (beta). Said once here, not on every load.
    with _quiet():
        if pipeline.clickhouse is not None:
            key = clickhouse_key(pipeline)
            hooked = hooks(pipeline, CLICKHOUSE_SINK) if hooks else NO_HOOKS
            assets.append(clickhouse_asset(pipeline, pool, hooked))
            checks += [clickhouse_check(pipeline, pool), source_check(pipeline, key)]
            sensors.append(clickhouse_lag_sensor(pipeline, interval, path))
            jobs.append(clickhouse_replay_job(pipeline, pool))
        if pipeline.hudi is not None:
            hudi_one = hudi_pool(pipeline)
            hooked = hooks(pipeline, "hudi") if hooks else NO_HOOKS
            assets.append(hudi_asset(pipeline, hudi_one, hooked))
            checks += [hudi_check(pipeline, hudi_one), source_check(pipeline, hudi_key(pipeline))]
            sensors.append(hudi_lag_sensor(pipeline, interval))
            jobs.append(hudi_replay_job(pipeline))
        # "Code references" on each asset page: the file and line of the function that writes it
        referenced = list(dg.with_source_code_references(with_table_facts(pipeline, assets)))
    return dg.Definitions(
        assets=referenced,
        asset_checks=checks,
        sensors=sensors,
        jobs=jobs,
        resources={kafka_resource_key(pipeline.name): pipeline_resources(pipeline)},
    )


def location_definitions(config: PipelinesFile) -> dg.Definitions:
    """What spans the pipelines: the Kafka topics as external assets, one per topic (the first
    pipeline's spec), and the failover job (one job, the pipeline is its run config)."""
    topics: dict[dg.AssetKey, dg.AssetSpec] = {}
    for pipeline in config.pipelines:
        # a source topic's records carry the columns; the dead-letter topic's, whatever failed
        sources = {topic_key(t) for t in pipeline.kafka.topics}
        columns = {"dagster/column_schema": topic_columns(pipeline)}
        for spec in topic_specs(pipeline):
            topics.setdefault(
                spec.key, spec.merge_attributes(metadata=columns) if spec.key in sources else spec
            )
    return dg.Definitions(assets=list(topics.values()), jobs=failover_jobs(config))


# ----------------------------------------------------------------------------------- components


M = TypeVar("M", bound=BaseModel)


def _render(value: Any, context: Any) -> Any:
    """Render ``{{ ... }}`` in every string; a rendered string stays a string (``"2181"``)."""
    if isinstance(value, str):
        return str(context.resolve_value(value)) if "{{" in value else value
    if isinstance(value, list):
        return [_render(v, context) for v in value]
    if isinstance(value, Mapping):
        return {k: _render(v, context) for k, v in value.items()}
    return value


def render_attributes(
    model_cls: type[M], attributes: BaseModel, context: dg.ComponentLoadContext
) -> M:
    """Validate ``attributes`` again once their templates are rendered."""
    raw = attributes.model_dump(mode="json", by_alias=True, exclude_unset=True)
    rendered = _render(raw, context.resolution_context.at_path("attributes"))
    source = str(Path(context.path) / "defs.yaml")
    try:
        return model_cls.model_validate(rendered)
    except ValidationError as exc:
        raise explain(source, exc) from None


class PipelineScaffolder(dg.Scaffolder):
    """``dg scaffold defs eos_pipeline.KafkaTablesComponent NAME``: a pipeline to fill in."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        name = request.target_path.name.replace("-", "_")
        dg.scaffold_component(
            request,
            {
                "name": name,
                "owners": [],
                "kafka": {
                    "bootstrap_servers": "{{ env.EOS_KAFKA_BOOTSTRAP or '127.0.0.1:9092' }}",
                    "topics": [f"{name}-events"],
                },
                "format": "json",
                "schema": {"event_id": "Int64", "payload": "String"},
                "clickhouse": {"database": name, "table": "events"},
            },
        )


@dg.scaffold_with(PipelineScaffolder)
@dataclass(frozen=True)
class KafkaTablesComponent(dg.Component):
    """A Kafka topic written exactly once into a ClickHouse table and/or a Hudi table; its
    attributes are one pipeline (:class:`eos_pipeline.components.config.Pipeline`)."""

    pipeline: Pipeline

    @classmethod
    def get_model_cls(cls) -> type[BaseModel]:
        return Pipeline

    @classmethod
    def load(
        cls, attributes: BaseModel | None, context: dg.ComponentLoadContext
    ) -> "KafkaTablesComponent":
        if attributes is None:
            raise ConfigError(f"{context.path}/defs.yaml: a pipeline needs attributes")
        pipeline = render_attributes(Pipeline, attributes, context)
        # The subject's columns, asked of the registry once, now (:func:`resolve_subject`).
        return cls(resolve_subject(pipeline, str(Path(context.path) / "defs.yaml")))

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        shared = context.load_component(SHARED_PATH, SharedResourcesComponent)
        return pipeline_definitions(self.pipeline, shared.settings)


@dataclass(frozen=True)
class SharedResourcesComponent(dg.Component):
    """What every pipeline of the code location shares: the keeper (positions, fencing), the
    ClickHouse server (or embedded chDB path), Spark (a Connect server or in-process), and how
    often the sensors look at Kafka. Lives at ``<defs>/shared/defs.yaml``."""

    settings: Settings

    @classmethod
    def get_model_cls(cls) -> type[BaseModel]:
        return Settings

    @classmethod
    def load(
        cls, attributes: BaseModel | None, context: dg.ComponentLoadContext
    ) -> "SharedResourcesComponent":
        if attributes is None:
            return cls(Settings())
        return cls(render_attributes(Settings, attributes, context))

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return shared_definitions(self.settings)


# ------------------------------------------------------------------------ loading a defs folder


DEFS_DIR_ENV = "EOS_DEFS_DIR"
#: The project's defs folder (``[tool.dg.project] defs_module``).
PACKAGE_DEFS_MODULE = "eos_pipeline.defs"


def package_defs_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "defs"


def defs_dir() -> Path:
    """``EOS_DEFS_DIR`` if set, else the project's ``eos_pipeline/defs``."""
    named = os.environ.get(DEFS_DIR_ENV)
    return Path(named).resolve() if named else package_defs_dir()


def _defs_module(folder: Path) -> types.ModuleType:
    """The folder as the Python package the component tree wants: ``eos_pipeline.defs``, or a
    module named after the folder's path (two folders never share one)."""
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
        path = Path(folder).resolve() if folder is not None else defs_dir()
        if not path.is_dir():
            raise ConfigError(
                f"no defs folder at {path} (set {DEFS_DIR_ENV} to a folder of pipeline defs.yaml "
                "files, or move a pipelines.yaml with `eos-pipeline migrate-config`)"
            )
        module = _defs_module(path)
        tree = dg.ComponentTree.from_module(defs_module=module, project_root=path.parent)
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
