"""Exactly-once Kafka -> ClickHouse / Hudi pipelines, run by Dagster.

The component types (``type: eos_pipeline.KafkaTablesComponent`` in a ``defs.yaml``) are named
here; they are imported on first use, so the core can be used without loading Dagster.
"""

from typing import Any

__all__ = ["KafkaTablesComponent", "SharedResourcesComponent"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from eos_pipeline.components import project

        return getattr(project, name)
    raise AttributeError(f"module 'eos_pipeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
