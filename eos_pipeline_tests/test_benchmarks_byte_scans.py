"""The byte-scan benchmark on a small chunk: chDB's counts agree with the product's scans (the
benchmark stops otherwise), and every figure is reported."""

from __future__ import annotations

from typing import Any

from benchmarks.byte_scans import measure


def test_chdb_counts_the_quoted_values_the_product_counts(chdb_client: Any) -> None:
    doc = measure(records=300, record_bytes=400, repeat=1, client=chdb_client)

    assert doc["quoted_values"] > 300  # several string fields per record
    assert set(doc["cpu_ms_best"]) == {
        "python scans (the product)",
        "chDB reads the blob",
        "chDB reads the lines",
        "chDB counts over the blob",
        "chDB counts over the lines",
    }
    assert all(ms >= 0 for ms in doc["cpu_ms_best"].values())
