"""The pipelines as Dagster Components: one ``defs.yaml`` per pipeline in the project's defs folder.

::

    eos_pipeline/defs/
      shared/defs.yaml     type: eos_pipeline.SharedResourcesComponent   (keeper, ClickHouse, Spark)
      demo/defs.yaml       type: eos_pipeline.KafkaTablesComponent       (one pipeline)

A component's attributes are the pydantic models of :mod:`eos_pipeline.components.config_schema`
themselves (``get_model_cls``), not a copy of them in Dagster's ``Resolvable`` types: the schema
``dg check yaml`` and editors use is the one the code validates with, field for field, and its
rules (identifiers, decoder contract, Hudi columns) run on load with messages naming the field.

Values from the environment, two kinds as before:

* ``{{ env.NAME }}`` / ``{{ env('NAME', 'default') }}`` in a string (Dagster's templating) is
  rendered when the code location loads: endpoints, ports, data paths, shown in the UI;
* ``{env: NAME}`` as a value is a secret: never rendered at load, it becomes a Dagster ``EnvVar``
  (or, in Kafka client settings, a variable name) read by the run's own process, so it is neither
  stored in the instance nor shown in the UI.

Why two components: Dagster merges the definitions of components and refuses two different
resources under one key, so the resources every pipeline uses (``keeper``, ``clickhouse``,
``spark``) come from one ``SharedResourcesComponent``; each ``KafkaTablesComponent`` loads it
(``context.load_component``, a dependency Dagster tracks) for the sensor interval and the chDB
path that decides the pipelines' pool.
"""

# No `from __future__ import annotations`: Dagster reads the real annotation types.
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg
from pydantic import BaseModel, ValidationError

from eos_pipeline.components.builder import pipeline_definitions, shared_definitions
from eos_pipeline.components.config import ConfigError, Pipeline, Settings, explain
from eos_pipeline.components.subject import resolve_subject

#: Where, under the defs folder, the shared resources' ``defs.yaml`` lives.
SHARED_PATH = "shared"
#: Component type names as written in ``defs.yaml``.
PIPELINE_TYPE = "eos_pipeline.KafkaTablesComponent"
SHARED_TYPE = "eos_pipeline.SharedResourcesComponent"

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
    """A Kafka topic written exactly once into a ClickHouse table and/or a Hudi table.

    Its attributes are one pipeline (:class:`eos_pipeline.components.config_schema.Pipeline`):
    ``name``, ``kafka``, ``format``, ``schema``, ``batch``, ``retry``, ``clickhouse``, ``hudi``,
    ``owners``. It builds the topic assets, the table assets with their exactly-once checks, the
    sensors that drive runs, the replay jobs and the pipeline's Kafka resource.
    """

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
        # The subject's columns, asked of the registry once, now (components.subject).
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
