"""SIGKILL around a schema evolution: the retry is exact on the data (issue 27).

The table is built from v1 of a registry subject; records of the compatible v2 arrive. A child
run is killed before the evolution's ``ALTER TABLE`` (BEFORE written), between it and the insert
of the step that asked for it, after that insert (ClickHouse), or while the Hudi commit that
carries the evolved schema is in flight; a clean run then catches up: every offset once, the
rows written before the evolution with the new columns' defaults (Hudi: NULL), the later ones
with their values.
"""

from __future__ import annotations

from typing import Any

import pytest

from eos_pipeline_tests.faults.harness import FaultRig, run_child
from eos_pipeline_tests.faults.test_sigkill_clickhouse import keeper_state
from eos_pipeline_tests.support.evolution import COLUMNS, V1, V2, expected_row, v1, v2, writer
from eos_pipeline_tests.support.faults import AFTER_ALTER_STEP, MID_HUDI_WRITE_STEP

pytestmark = pytest.mark.integration


def _send(rig: FaultRig, url: str, schema: str, records: list[dict[str, Any]]) -> list[int]:
    write = writer(url, rig.topic, schema)
    return rig.produce_raw(0, [(None, write(r), None) for r in records])


def _evolving(rig: FaultRig, url: str) -> tuple[dict[str, Any], dict[int, tuple[int, int]], set]:
    """v1 records 0..5 (written by a clean run before the test's kill), then v2 6..11 and v1
    12..13. Returns the job (table built from v1), offset -> (record, version), and the offsets
    the clean run wrote before the evolution."""
    first = _send(rig, url, V1, [v1(i) for i in range(6)])
    schema_id = int.from_bytes(writer(url, rig.topic, V1)(v1(0))[1:5], "big")
    job = rig.job([0], max_records=3, avro_schema=V1, schema_id=schema_id, registry=url)
    return job, {o: (i, 1) for i, o in enumerate(first)}, set(first)


def _rest(rig: FaultRig, url: str, sent: dict[int, tuple[int, int]]) -> None:
    for i, o in zip(range(6, 12), _send(rig, url, V2, [v2(i) for i in range(6, 12)]), strict=True):
        sent[o] = (i, 2)
    for i, o in zip(
        range(12, 14), _send(rig, url, V1, [v1(i) for i in range(12, 14)]), strict=True
    ):
        sent[o] = (i, 1)


def _clean_retry_is_exact(
    rig: FaultRig, job: dict[str, Any], sent: dict[int, tuple[int, int]], before: set
) -> None:
    """A clean ClickHouse run after the kill: every offset once, the rows written before the
    evolution with the new columns' defaults, the later ones with their values."""
    clean = run_child("clickhouse", job)
    assert clean.returncode == 0, clean.tail()
    assert rig.assert_exactly_once() == 14
    rows = run_child("rows", {**job, "columns": list(COLUMNS)}).result
    assert rows == {
        f"0:{o}": [list(expected_row(i, v, before_evolution=o in before, hudi=False).values())]
        for o, (i, v) in sent.items()
    }


def test_sigkill_between_the_alter_and_the_insert_then_the_retry_is_exact(
    rig: FaultRig, schema_registry: str
) -> None:
    job, sent, before = _evolving(rig, schema_registry)
    assert run_child("clickhouse", job).returncode == 0
    _rest(rig, schema_registry, sent)

    killed = run_child("clickhouse", job, fault=AFTER_ALTER_STEP)
    assert killed.killed, f"rc={killed.returncode}\n{killed.tail()}"
    assert "at step after_alter" in killed.stderr
    assert keeper_state(rig, 0) == ("BEFORE", 6, 9)  # the step that asked for the evolution
    after_kill = run_child("rows", {**job, "columns": ["channel"]})
    assert after_kill.returncode == 0, after_kill.tail()  # the column is there ...
    assert sorted(after_kill.result) == [f"0:{o}" for o in sorted(before)]  # ... no new row

    _clean_retry_is_exact(rig, job, sent, before)


@pytest.mark.parametrize("step", ["after_keeper_before", "after_insert"])
def test_sigkill_before_the_alter_or_after_the_insert_then_the_retry_is_exact(
    rig: FaultRig, schema_registry: str, step: str
) -> None:
    """The other two steps around the evolution: killed with BEFORE written and the table not
    yet altered, or with the evolved rows inserted and AFTER not yet written. The retry alters
    (idempotently) and inserts the same block: ClickHouse drops it by its token."""
    job, sent, before = _evolving(rig, schema_registry)
    assert run_child("clickhouse", job).returncode == 0
    _rest(rig, schema_registry, sent)

    killed = run_child("clickhouse", job, fault=step)
    assert killed.killed, f"rc={killed.returncode}\n{killed.tail()}"
    assert f"at step {step}" in killed.stderr
    assert keeper_state(rig, 0) == ("BEFORE", 6, 9)  # the step that asked for the evolution

    _clean_retry_is_exact(rig, job, sent, before)


def test_sigkill_inside_the_hudi_commit_that_evolves_the_table_then_the_retry_is_exact(
    rig: FaultRig, schema_registry: str
) -> None:
    job, sent, before = _evolving(rig, schema_registry)
    job = {**job, "partitions": [0], "max_records": 100}
    assert run_child("hudi", job).returncode == 0
    _rest(rig, schema_registry, sent)

    killed = run_child("hudi", job, fault=MID_HUDI_WRITE_STEP)
    assert killed.killed, f"rc={killed.returncode}\n{killed.tail()}"

    clean = run_child("hudi", {**job, "verify": True, "columns": list(COLUMNS)})
    assert clean.returncode == 0, clean.tail()
    assert clean.result["offsets"] == {"0": {str(o): 1 for o in sent}}
    assert clean.result["rows"] == {
        f"0:{o}": [list(expected_row(i, v, before_evolution=o in before, hudi=True).values())]
        for o, (i, v) in sent.items()
    }
