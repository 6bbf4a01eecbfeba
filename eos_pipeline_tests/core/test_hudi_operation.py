"""The operation of one Hudi transaction: every branch of the rule, no stack."""

from __future__ import annotations

import pytest

from eos_pipeline.core.offsets import OffsetRange
from eos_pipeline.core.planning import (
    AUTO_STEADY_OPERATION,
    DEFAULT_BULK_INSERT_MIN_RECORDS,
    planned_records,
    transaction_operation,
)


def test_planned_records_is_the_sum_of_the_range_widths() -> None:
    assert planned_records([OffsetRange(5, 15), OffsetRange(8, 8), OffsetRange(0, 3)]) == 13
    assert planned_records([]) == 0


@pytest.mark.parametrize("configured", ["upsert", "insert", "bulk_insert"])
@pytest.mark.parametrize("planned", [0, 1, 10**9])
def test_a_fixed_operation_is_kept_whatever_the_size(configured: str, planned: int) -> None:
    assert transaction_operation(configured, planned, bulk_insert_min_records=10) == configured  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("planned", "expected"),
    [(0, "upsert"), (9, "upsert"), (10, "bulk_insert"), (10**9, "bulk_insert")],
)
def test_auto_bulk_inserts_from_the_threshold_on(planned: int, expected: str) -> None:
    assert transaction_operation("auto", planned, bulk_insert_min_records=10) == expected


def test_auto_upserts_whatever_the_size_when_keys_may_repeat() -> None:
    # a business key: upsert keeps the latest row per key, bulk_insert would keep every row
    assert transaction_operation("auto", 10**9, bulk_insert_min_records=10, unique_keys=False) == (
        "upsert"
    )
    assert transaction_operation("bulk_insert", 5, unique_keys=False) == "bulk_insert"


def test_auto_defaults() -> None:
    assert AUTO_STEADY_OPERATION == "upsert"
    below, at = DEFAULT_BULK_INSERT_MIN_RECORDS - 1, DEFAULT_BULK_INSERT_MIN_RECORDS
    assert transaction_operation("auto", below) == "upsert"
    assert transaction_operation("auto", at) == "bulk_insert"


@pytest.mark.parametrize(
    ("configured", "planned", "threshold"),
    [("delete", 1, 10), ("auto", -1, 10), ("auto", 1, 0), ("merge", 1, 10)],
)
def test_refuses_what_it_cannot_decide(configured: str, planned: int, threshold: int) -> None:
    with pytest.raises(ValueError):
        transaction_operation(configured, planned, bulk_insert_min_records=threshold)  # type: ignore[arg-type]
