"""The Python the benchmarks write out for other processes imports names that exist.

That code is a string (a code location the UI benchmark's webserver loads, the run-entry probe
of the Dagster benchmark), so neither ruff nor the import checks see it. A module renamed
without it once made the scale smoke wait on a code location that never loaded until its 120 s
timeout; this fails in a second, without a stack, naming the import.
"""

from __future__ import annotations

import ast
import importlib

import pytest

from benchmarks.dagster_throughput import _RUN_ENTRY
from benchmarks.ui_load import _CODE


@pytest.mark.parametrize("code", [_CODE, _RUN_ENTRY], ids=["ui_load", "dagster_throughput"])
def test_the_code_written_for_another_process_imports_what_exists(code: str) -> None:
    found = 0
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
                found += 1
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
                found += 1
    assert found
