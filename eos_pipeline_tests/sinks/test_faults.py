"""The fault hook's file form: one armed fault kills exactly one process, whichever reaches it.

Every kill is real: a fresh ``python -c`` child imports only the hook, passes fault points and
prints each pass it survived; the test reads its exit signal, its output and the fault files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from eos_pipeline_tests.support.faults import FAULT_ENV, parse_arm

REPO = Path(__file__).resolve().parents[2]


def _child(code: str, fault: str | None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOS_FAULT")}
    if fault is not None:
        env[FAULT_ENV] = fault
    script = "from eos_pipeline_tests.support.faults import *\n" + textwrap.dedent(code)
    return subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )


def _run(code: str, fault: str | None) -> tuple[int, list[str]]:
    child = _child(code, fault)
    out, _ = child.communicate(timeout=60)
    return child.returncode, out.split()


PASSES = """
for i in range(5):
    fault_point("after_insert")
    print(f"survived-{i}", flush=True)
"""


def _arm(path: Path, text: str) -> Path:
    """Write a fault file atomically (a reader never sees half of it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.rename(path)
    return path


def test_plain_form_kills_every_process_at_the_step() -> None:
    for _ in range(2):
        code, out = _run(PASSES, "after_insert")
        assert code == -signal.SIGKILL and out == []
    code, out = _run(PASSES, "before_keeper_before")
    assert code == 0 and len(out) == 5


def test_file_form_kills_one_process_then_is_spent(tmp_path: Path) -> None:
    fault = _arm(tmp_path / "fault", "after_insert\n")
    code, out = _run(PASSES, f"@{fault}")
    assert code == -signal.SIGKILL and out == []
    fired = list(tmp_path.glob("fault.fired-*"))
    assert len(fired) == 1 and not fault.exists()
    assert fired[0].read_text().strip() == "after_insert"
    # the same environment again: nothing armed any more, the process runs through
    code, out = _run(PASSES, f"@{fault}")
    assert code == 0 and len(out) == 5


def test_file_form_skip_lets_the_first_passes_through(tmp_path: Path) -> None:
    fault = _arm(tmp_path / "fault", "after_insert 3")
    code, out = _run(PASSES, f"@{fault}")
    assert code == -signal.SIGKILL
    assert out == ["survived-0", "survived-1", "survived-2"]


def test_folder_form_and_scopes_pick_the_process(tmp_path: Path) -> None:
    _arm(tmp_path / "a", "clickhouse:before_materialization_event")
    _arm(tmp_path / "b", "mid_hudi_write")
    scoped = """
fault_point("before_materialization_event", scope="hudi")
print("hudi-passed", flush=True)
fault_point("before_materialization_event")
print("unscoped-passed", flush=True)
fault_point("before_materialization_event", scope="clickhouse")
print("clickhouse-passed", flush=True)
"""
    code, out = _run(scoped, f"@{tmp_path}")
    assert code == -signal.SIGKILL
    assert out == ["hudi-passed", "unscoped-passed"]
    assert sorted(p.name.split(".fired-")[0] for p in tmp_path.glob("*.fired-*")) == ["a"]
    assert (tmp_path / "b").exists()  # the other fault is still armed


def test_processes_racing_for_one_fault_lose_exactly_one(tmp_path: Path) -> None:
    fault_dir = tmp_path / "faults"
    fault_dir.mkdir()
    go = tmp_path / "go"
    racer = f"""
import time
from pathlib import Path
while not Path({str(go)!r}).exists():
    time.sleep(0.001)
for _ in range(200):
    fault_point("after_insert")
print("alive", flush=True)
"""
    children = [_child(racer, f"@{fault_dir}") for _ in range(4)]
    time.sleep(1.0)
    _arm(fault_dir / "one", "after_insert")
    go.touch()
    codes = [c.wait(60) for c in children]
    for c in children:
        assert c.stdout is not None
        c.stdout.close()
    assert sorted(codes) == [-signal.SIGKILL, 0, 0, 0]
    (fired,) = fault_dir.glob("one.fired-*")
    killed = [c.pid for c, code in zip(children, codes, strict=True) if code != 0]
    assert fired.name == f"one.fired-{killed[0]}"


def test_hudi_write_watcher_claims_the_file(tmp_path: Path) -> None:
    table = tmp_path / "table"
    (table / ".hoodie").mkdir(parents=True)
    fault = _arm(tmp_path / "fault", "mid_hudi_write")
    watcher = f"""
import time
from pathlib import Path
stop = kill_when_hudi_write_starts({str(table)!r}, poll_seconds=0.01)
print("watching" if stop is not None else "not-armed", flush=True)
time.sleep(0.3)
print("no-write-yet", flush=True)
Path({str(table)!r}, ".hoodie", "001.commit.inflight").touch()
time.sleep(30)
print("survived", flush=True)
"""
    code, out = _run(watcher, f"@{fault}")
    assert code == -signal.SIGKILL
    assert out == ["watching", "no-write-yet"]
    assert not fault.exists() and len(list(tmp_path.glob("fault.fired-*"))) == 1


def test_clickhouse_insert_watcher_kills_inside_the_insert(tmp_path: Path) -> None:
    chdb = tmp_path / "chdb"
    (chdb / "store" / "abc" / "abcdef").mkdir(parents=True)
    fault = _arm(tmp_path / "fault", "mid_insert")
    watcher = f"""
import time
from pathlib import Path
stop = kill_when_clickhouse_inserts({str(chdb)!r})
print("watching" if stop is not None else "not-armed", flush=True)
time.sleep(0.3)
print("no-insert-yet", flush=True)
Path({str(chdb)!r}, "store", "abc", "abcdef", "tmp_insert_all_1_1_0").mkdir(exist_ok=True)
time.sleep(30)
print("survived", flush=True)
"""
    code, out = _run(watcher, f"@{fault}")
    assert code == -signal.SIGKILL
    assert out == ["watching", "no-insert-yet"]
    # not armed: no watcher at all
    code, out = _run(watcher.replace("time.sleep(30)", "pass"), None)
    assert code == 0 and out == ["not-armed", "no-insert-yet", "survived"]


def test_a_bad_fault_file_says_what_is_wrong() -> None:
    assert parse_arm("after_insert 2").skip == 2
    with pytest.raises(ValueError, match="expected '<step> \\[skip\\]'"):
        parse_arm("after_insert 2 3", Path("f"))
