"""An Avro subject that evolves: writer schemas v1, a compatible v2 and an incompatible v3, and
records of each written by confluent-kafka's own serializer (registered as the serializer does,
under ``<topic>-value``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from eos_pipeline.adapters.registry import SubjectSchema
from eos_pipeline.core.evolution import avro_columns
from eos_pipeline.core.schema import Format, PayloadFormat, RegistrySettings, TableSchema


def _record(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "Sale", "namespace": "eos.evo", "fields": fields})


_ID = {"name": "id", "type": "long"}
_CUSTOMER = {"name": "customer", "type": "string"}
_NOTE = {"name": "note", "type": ["null", "string"], "default": None}
V1 = _record(_ID, _CUSTOMER, {"name": "qty", "type": "int"}, {"name": "amount", "type": "float"},
             _NOTE)  # fmt: skip
#: Compatible: int -> long, float -> double, a field with a default and an optional one added.
V2 = _record(
    _ID,
    _CUSTOMER,
    {"name": "qty", "type": "long"},
    {"name": "amount", "type": "double"},
    _NOTE,
    {"name": "channel", "type": "string", "default": "web"},
    {"name": "coupon", "type": ["null", "string"], "default": None},
)
#: Incompatible with the tables: ``customer`` becomes a number.
V3 = _record({"name": "id", "type": "long"}, {"name": "customer", "type": "long"})
#: The columns every version's rows are read back by.
COLUMNS = ("id", "customer", "qty", "amount", "note", "channel", "coupon")


def v1(i: int) -> dict[str, Any]:
    return {"id": i, "customer": f"c{i}", "qty": i, "amount": i * 1.25,
            "note": None if i % 2 else f"n{i}"}  # fmt: skip


def v2(i: int) -> dict[str, Any]:
    return {**v1(i), "qty": (1 << 33) + i, "amount": i + 0.1, "channel": f"ch{i}",
            "coupon": None if i % 3 else f"k{i}"}  # fmt: skip


def writer(url: str, topic: str, schema: str) -> Callable[[dict[str, Any]], bytes]:
    """Values framed by confluent-kafka's serializer (it registers ``schema`` if new)."""
    avro = AvroSerializer(SchemaRegistryClient({"url": url}), schema)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return lambda record: avro(record, ctx)


def table_schema(url: str, subject: SubjectSchema) -> TableSchema:
    """A subject's columns as the definitions resolve them at load (``project.resolve_subject``)."""
    fmt = PayloadFormat(Format.AVRO, RegistrySettings(url))
    return TableSchema(subject.columns, format=fmt, schema_id=subject.schema_id)


def pinned_schema(url: str, text: str, schema_id: int) -> TableSchema:
    """The columns of writer schema ``text`` (id ``schema_id``): a table built from it."""
    return table_schema(url, SubjectSchema("", schema_id, avro_columns(text)))


def expected_row(i: int, version: int, *, before_evolution: bool, hudi: bool) -> dict[str, Any]:
    """What the tables hold for record ``i`` of ``version``: a v1 row written before the
    evolution reads ClickHouse's column default ('web') but NULL in Hudi; a v1 row written
    after it carries the default the decoder filled in, in both."""
    if version == 2:
        return v2(i)
    channel = None if (before_evolution and hudi) else "web"
    return {**v1(i), "channel": channel, "coupon": None}
