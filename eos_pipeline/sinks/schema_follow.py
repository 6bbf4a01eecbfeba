"""Following a registry subject's newer writer schemas: the part both sinks share.

A table whose columns come from a registry subject (``TableSchema.schema_id`` set) follows the
writer schemas its records name: before the rows of a range are written, the sink asks this
follower which evolutions the range's writer ids need (:func:`core.evolution.plan_evolution`,
in id order, each against the schema the previous one left), applies each to its table, and
then adopts it. The writer schemas come from the process's registry cache (an id's schema never
changes), so a retried range plans the same evolutions; the DDL that applies them is idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from eos_pipeline.adapters.registry import schemas_for
from eos_pipeline.core.evolution import (
    Evolution,
    IncompatibleSchemaChange,
    plan_evolution,
    writer_columns,
)
from eos_pipeline.core.schema import SchemaError, TableSchema


class SchemaFollower:
    """The table schema a sink writes with, as it follows newer writer schemas."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        #: Writer ids already settled against ``schema`` (their records need no change).
        self._settled: set[int] = set() if schema.schema_id is None else {schema.schema_id}
        #: What was applied in this process, for the materialization's metadata.
        self.applied: list[dict[str, object]] = []

    @property
    def follows(self) -> bool:
        """Only a subject's columns evolve; a written ``schema:`` stays as written."""
        return self.schema.schema_id is not None and self.schema.format.kind.framed

    def plan(self, writer_ids: Mapping[int, tuple[int, ...]]) -> list[Evolution]:
        """The evolutions the ids ask for, in id order (none when every id is settled).

        Raises :class:`IncompatibleSchemaChange` for a writer schema the tables cannot follow,
        ``RegistryUnavailableError`` when the registry cannot answer (transient). Ids the
        registry does not know, or of another format, are left to the decoder's verdicts.
        """
        if not self.follows:
            return []
        registry = self.schema.format.registry
        assert registry is not None
        schemas = schemas_for(registry)
        kind = self.schema.format.kind
        schema, out = self.schema, []
        for schema_id in sorted(set(writer_ids) - self._settled):
            writer = schemas.get(schema_id)
            if writer is None or writer.schema_type != kind.schema_type:
                continue
            try:
                columns = writer_columns(writer, writer_ids[schema_id])
            except SchemaError as exc:
                raise IncompatibleSchemaChange(
                    f"writer schema id {schema_id} has no columns both tables can hold "
                    f"(the table's are from schema id {schema.schema_id}): {exc}",
                    table_id=schema.schema_id,
                    writer_id=schema_id,
                ) from None
            evolution = plan_evolution(schema, columns, writer_id=schema_id)
            if not evolution.empty:
                out.append(evolution)
                schema = evolution.apply(schema)
        return out

    def adopt(self, evolution: Evolution) -> None:
        """``evolution`` is applied to the table: write with the evolved schema from now on."""
        self.schema = evolution.apply(self.schema)
        self._settled.add(evolution.writer_id)
        self.applied.append(
            {**evolution.describe(), "at": datetime.now(UTC).isoformat(timespec="seconds")}
        )

    def settle(self, writer_ids: Mapping[int, tuple[int, ...]]) -> None:
        """Every id of a range whose evolutions were adopted needs nothing more."""
        if self.follows:
            self._settled.update(writer_ids)
