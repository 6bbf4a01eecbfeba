"""Decode Kafka rows in Spark with the core's decoder contract, so both sinks judge alike.

Spark's JSON reader is lenient where the contract is strict (numbers read as text, ``"12"`` as
an integer, no range checks), so each task runs the core decoder (:mod:`core.decode`) on its
Arrow batches instead (``mapInArrow``). The executors' Python must import ``eos_pipeline``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from eos_pipeline.adapters.registry import decode_values
from eos_pipeline.core import decode as core_decode
from eos_pipeline.core.contract import ErrorClass, compile_contract, oversized, unwrap
from eos_pipeline.core.schema import SchemaError, TableSchema

#: Columns of a Kafka read as Spark's Kafka source names them (see ``adapters.spark``).
KAFKA_FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value")
#: Source coordinates as carried into sink tables; ``(_topic, _partition, _offset)`` is the
#: default Hudi record key.
SOURCE_COLUMNS = {"topic": "_topic", "partition": "_partition", "offset": "_offset"}
TIMESTAMP_COLUMN = "_kafka_timestamp"
#: Bad rows only: the contract's error class and message.
ERROR_COLUMN = "error"
ERROR_CLASS_COLUMN = "error_class"
PARSED_COLUMN = "_eos_parsed"

_SCALARS: dict[str, T.DataType] = {
    "Bool": T.BooleanType(),
    "Int8": T.ByteType(),
    "Int16": T.ShortType(),
    "Int32": T.IntegerType(),
    "Int64": T.LongType(),
    "UInt8": T.ShortType(),
    "UInt16": T.IntegerType(),
    "UInt32": T.LongType(),
    "UInt64": T.DecimalType(20, 0),
    "Float32": T.FloatType(),
    "Float64": T.DoubleType(),
    "String": T.StringType(),
    "UUID": T.StringType(),
    "IPv4": T.StringType(),
    "IPv6": T.StringType(),
    "Date": T.DateType(),
    "Date32": T.DateType(),
}


def spark_type(ch_type: str) -> T.DataType:
    """The Spark type that holds the contract's values for a canonical ClickHouse type
    (``UInt64``: ``decimal(20,0)``, Spark having no unsigned longs)."""
    base, _ = unwrap(ch_type)
    if base in _SCALARS:
        return _SCALARS[base]
    name, _, rest = base.partition("(")
    args = [a.strip() for a in rest[:-1].split(",")] if rest else []
    if name == "FixedString":
        return T.StringType()
    if name in ("DateTime", "DateTime64"):
        return T.TimestampType()
    if name == "Decimal":
        return T.DecimalType(int(args[0]), int(args[1]))
    if name in ("Array", "Map"):
        inner = rest[:-1]
        if name == "Array":
            return T.ArrayType(spark_type(inner), True)
        depth = 0
        for i, ch in enumerate(inner):  # split at the top-level comma
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                return T.MapType(
                    spark_type(inner[:i].strip()), spark_type(inner[i + 1 :].strip()), True
                )
    raise SchemaError(f"ClickHouse type {ch_type} has no Spark counterpart in the contract")


def spark_schema(schema: TableSchema) -> T.StructType:
    """Payload fields of ``schema`` as Spark types (validated by the contract first)."""
    contract = compile_contract(schema)
    return T.StructType(
        [
            T.StructField(col.name, spark_type(col.ch_type), not rule.required)
            for col, rule in zip(schema.columns, contract.fields, strict=True)
        ]
    )


def _python_for_arrow(ch_type: str) -> Callable[[Any], Any] | None:
    """How a canonical value becomes what ``pa.array`` takes for its Spark type (None: as is)."""
    base, _ = unwrap(ch_type)
    if base == "UInt64":
        return Decimal
    name = base.partition("(")[0]
    if name == "Array":
        inner = _python_for_arrow(base[len("Array(") : -1])
        if inner is None:
            return None
        return lambda items: [None if v is None else inner(v) for v in items]
    if name == "Map":
        inner_type = base[len("Map(") : -1].split(",", 1)[1].strip()
        inner = _python_for_arrow(inner_type)
        if inner is None:
            return lambda mapping: list(mapping.items())
        return lambda mapping: [(k, None if v is None else inner(v)) for k, v in mapping.items()]
    return None


def _payload_arrays(
    schema: TableSchema, target: pa.StructType, values: list[bytes | None], count: int
) -> tuple[list[pa.Array], dict[int, tuple[str, str]]]:
    """Payload arrays for ``count`` rows and the bad rows ``{position: (class, message)}``."""
    fast = core_decode.decode_json_arrow(values, schema) if values else None
    if fast is not None:
        try:
            arrays = [
                fast.column(i).combine_chunks().cast(target.field(i).type)
                for i in range(target.num_fields)
            ]
            return arrays, {}
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # a cast Arrow cannot vouch for: take the reference path
    decoded = decode_values(values, schema)  # JSON, or framed via the registry (per worker)
    bad = {b.index: (str(b.error_class), b.message) for b in decoded.bad}
    arrays = []
    for i, col in enumerate(schema.columns):
        to_python = _python_for_arrow(col.ch_type)
        column = iter(decoded.columns[col.name])
        full: list[Any] = []
        for position in range(count):
            if position in bad:
                full.append(None)
                continue
            value = next(column)
            full.append(value if to_python is None or value is None else to_python(value))
        arrays.append(pa.array(full, type=target.field(i).type))
    return arrays, bad


def _decode_batch(
    batch: pa.RecordBatch,
    schema: TableSchema,
    target: pa.StructType,
    max_record_bytes: int | None,
) -> pa.RecordBatch:
    count = batch.num_rows
    keys: list[bytes | None] = batch.column("key").to_pylist()
    values: list[bytes | None] = batch.column("value").to_pylist()
    errors: dict[int, tuple[str, str]] = {}
    if max_record_bytes is not None:
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            message = oversized(key, value, max_record_bytes)
            if message is not None:
                errors[i] = (str(ErrorClass.OVERSIZED), message)
    kept = [i for i in range(count) if i not in errors]
    arrays, bad = _payload_arrays(schema, target, [values[i] for i in kept], len(kept))
    for position, verdict in bad.items():
        errors[kept[position]] = verdict
    if len(kept) != count:  # spread the kept rows back over the whole batch
        where = {row: n for n, row in enumerate(kept)}
        take = pa.array([where.get(i) for i in range(count)], pa.int64())
        arrays = [array.take(take) for array in arrays]
    is_bad = [i in errors for i in range(count)]
    payload = pa.StructArray.from_arrays(arrays, fields=list(target))
    columns = [
        batch.column("topic"),
        batch.column("partition"),
        batch.column("offset"),
        batch.column("timestamp"),
        pa.array([k if b else None for k, b in zip(keys, is_bad, strict=True)], pa.binary()),
        pa.array([v if b else None for v, b in zip(values, is_bad, strict=True)], pa.binary()),
        pa.array([errors[i][0] if i in errors else None for i in range(count)], pa.string()),
        pa.array([errors[i][1] if i in errors else None for i in range(count)], pa.string()),
        payload,
    ]
    names = [*KAFKA_FIELDS, ERROR_CLASS_COLUMN, ERROR_COLUMN, PARSED_COLUMN]
    return pa.RecordBatch.from_arrays(columns, names=names)


def tag_json(
    df: DataFrame, schema: TableSchema, *, max_record_bytes: int | None = None
) -> DataFrame:
    """Every Kafka row of ``df`` judged by the contract in one pass: the Kafka columns (``key``
    and ``value`` of bad rows only), ``error_class``/``error`` and the payload as a struct. Persist
    it and split it with :func:`split_tagged` to decode each record once.
    """
    # Nullable: bad rows carry no payload (the contract sees to good rows' required fields).
    payload = T.StructType([T.StructField(f.name, f.dataType, True) for f in spark_schema(schema)])
    reserved = {*SOURCE_COLUMNS.values(), TIMESTAMP_COLUMN}
    clash = set(payload.fieldNames()) & reserved
    if clash:
        raise SchemaError(f"schema fields {sorted(clash)} clash with reserved column names")
    out = T.StructType(
        [
            T.StructField("topic", T.StringType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("offset", T.LongType()),
            T.StructField("timestamp", T.TimestampType()),
            T.StructField("key", T.BinaryType()),
            T.StructField("value", T.BinaryType()),
            T.StructField(ERROR_CLASS_COLUMN, T.StringType()),
            T.StructField(ERROR_COLUMN, T.StringType()),
            T.StructField(PARSED_COLUMN, payload),
        ]
    )
    target = to_arrow_type(payload)

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield _decode_batch(batch, schema, target, max_record_bytes)

    return df.select(*KAFKA_FIELDS).mapInArrow(decode, out)


def split_tagged(tagged: DataFrame, schema: TableSchema) -> tuple[DataFrame, DataFrame]:
    """Good rows (source columns + payload fields) and bad rows (Kafka columns + error)."""
    good = tagged.where(F.col(ERROR_CLASS_COLUMN).isNull()).select(
        *(F.col(src).alias(dst) for src, dst in SOURCE_COLUMNS.items()),
        F.col("timestamp").alias(TIMESTAMP_COLUMN),
        *(F.col(PARSED_COLUMN)[c.name].alias(c.name) for c in schema.columns),
    )
    bad = tagged.where(F.col(ERROR_CLASS_COLUMN).isNotNull()).select(
        *KAFKA_FIELDS, ERROR_CLASS_COLUMN, ERROR_COLUMN
    )
    return good, bad


def decode_json(
    df: DataFrame, schema: TableSchema, *, max_record_bytes: int | None = None
) -> tuple[DataFrame, DataFrame]:
    """Split Kafka rows into decoded rows and dead-letter rows by the contract; none dropped."""
    return split_tagged(tag_json(df, schema, max_record_bytes=max_record_bytes), schema)
