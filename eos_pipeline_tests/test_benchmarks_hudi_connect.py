"""``benchmarks.hudi_connect``'s rows and options, without a stack (its runs take minutes)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import hudi_connect


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"modes": ["session", "auto"], "streamer_operations": ["upsert"]}
    return argparse.Namespace(**(base | kw))


def test_rows_name_each_mode_then_each_streamer_operation_per_kind_of_table() -> None:
    rows = hudi_connect._rows_of(_args(streamer_operations=["upsert", "bulk_insert"]))
    assert rows == (
        "server, table's session, new table",
        "server, table's session, auto, new table",
        "HoodieStreamer, new table",  # the first streamer operation: the ratio's base
        "HoodieStreamer bulk_insert, new table",
        "server, table's session, existing table",
        "server, table's session, auto, existing table",
        "HoodieStreamer, existing table",
        "HoodieStreamer bulk_insert, existing table",
    )
    assert hudi_connect._rows_of(_args(modes=["server"]))[-1] == "server, idle"


@pytest.mark.parametrize("flag", [["--modes", "nope"], ["--streamer-operations", "upsert,merge"]])
def test_an_unknown_mode_or_streamer_operation_is_refused(flag: list[str]) -> None:
    with pytest.raises(SystemExit):
        hudi_connect.main(flag)
