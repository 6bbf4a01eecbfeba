"""A Hudi table's source coordinates read with hudi-rs: the proof side of Hudi tests.

hudi-rs is a reader independent of the Spark that wrote the table, and needs no JVM, no Spark
session and no child process: a test process holding an in-process Spark session (or none) can
read any table this way, at any time, also while a Connect server writes other tables.
"""

from __future__ import annotations

import pyarrow as pa
from hudi import HudiTableBuilder


def hudi_offsets(table_path: str) -> dict[int, dict[int, int]]:
    """``{partition: {offset: rows}}`` of the table's latest snapshot."""
    batches = HudiTableBuilder.from_base_uri(table_path).build().read()
    if not batches:
        return {}
    table = pa.Table.from_batches(batches).select(["_partition", "_offset"])
    out: dict[int, dict[int, int]] = {}
    for p, o in zip(table["_partition"].to_pylist(), table["_offset"].to_pylist(), strict=True):
        rows = out.setdefault(int(p), {})
        rows[int(o)] = rows.get(int(o), 0) + 1
    return out
