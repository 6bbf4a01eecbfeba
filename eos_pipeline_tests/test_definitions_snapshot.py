"""A snapshot of the code location's definitions, without a stack: what a user sees in the UI.

Asset keys, kinds, groups, owners, dependencies, partitions, backfill policies and pools; checks
and their pools; sensors, their intervals, default status and targets; jobs; resource types.
A change to any of them fails this test until the snapshot is written again on purpose
(``EOS_UPDATE_SNAPSHOT=1 pytest eos_pipeline_tests/test_definitions_snapshot.py``), so the diff
of ``eos_pipeline_tests/snapshots/definitions.json`` shows a reviewer what moved in the UI.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg

from eos_pipeline import definitions

SNAPSHOT = Path(__file__).parent / "snapshots" / "definitions.json"


def describe(defs: dg.Definitions) -> dict[str, Any]:
    repo = defs.get_repository_def()
    assets = {}
    for key, assets_def in repo.assets_defs_by_key.items():
        spec = next(s for s in assets_def.specs if s.key == key)
        partitions = assets_def.partitions_def
        assets[key.to_user_string()] = {
            "kinds": sorted(spec.kinds),
            "group": spec.group_name,
            "owners": sorted(spec.owners),
            "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
            "partitions": getattr(partitions, "name", None) if partitions else None,
            "backfill_policy": str(assets_def.backfill_policy or "") or None,
            "pool": assets_def.node_def.pool if assets_def.is_executable else None,
            "executable": assets_def.is_executable,
        }
    checks = {}
    for checks_def in defs.asset_checks or ():
        for spec in checks_def.check_specs:
            name = f"{spec.asset_key.to_user_string()}:{spec.name}"
            checks[name] = {"blocking": spec.blocking, "pool": checks_def.node_def.pool}
    sensors = {
        s.name: {
            "interval_s": s.minimum_interval_seconds,
            "default": s.default_status.value,
            "targets": sorted(t.job_name for t in s.targets),
        }
        for s in repo.sensor_defs
    }
    jobs = sorted(j.name for j in repo.get_all_jobs() if not j.name.startswith("__"))
    resources = {k: type(v).__name__ for k, v in (defs.resources or {}).items()}
    return {
        "assets": dict(sorted(assets.items())),
        "checks": dict(sorted(checks.items())),
        "sensors": dict(sorted(sensors.items())),
        "jobs": jobs,
        "resources": dict(sorted(resources.items())),
    }


def test_the_definitions_match_their_snapshot() -> None:
    now = describe(definitions.defs)
    if os.environ.get("EOS_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(json.dumps(now, indent=2) + "\n")
    assert SNAPSHOT.exists(), f"no snapshot yet: run with EOS_UPDATE_SNAPSHOT=1 to write {SNAPSHOT}"
    assert now == json.loads(SNAPSHOT.read_text()), (
        "the definitions changed; if on purpose, run with EOS_UPDATE_SNAPSHOT=1 and review the diff"
    )
