"""Staging files of the native JSON path left by killed runs are swept, others are kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from eos_pipeline.adapters.clickhouse.native_json import STALE_AFTER_S, sweep_stale


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _file(directory: Path, name: str, age_s: float) -> Path:
    path = directory / name
    path.write_bytes(b"{}\n")
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def test_only_old_files_of_dead_writers_are_removed(tmp_path: Path) -> None:
    dead = _dead_pid()
    old = STALE_AFTER_S + 60
    left_by_a_kill = _file(tmp_path, f"eos-native-{dead}-ab12.jsonl", old)
    its_source = _file(tmp_path, f"eos-native-{dead}-cd34.src", old)
    dead_but_fresh = _file(tmp_path, f"eos-native-{dead}-ef56.jsonl", 1)
    ours_and_old = _file(tmp_path, f"eos-native-{os.getpid()}-gh78.jsonl", old)
    without_a_pid = _file(tmp_path, "eos-native-xyz.jsonl", old)
    not_ours = _file(tmp_path, f"other-{dead}-ab12.jsonl", old)

    removed = sweep_stale(tmp_path)

    assert sorted(removed) == sorted([left_by_a_kill, its_source])
    assert not left_by_a_kill.exists() and not its_source.exists()
    for kept in (dead_but_fresh, ours_and_old, without_a_pid, not_ours):
        assert kept.exists(), kept.name


def test_a_sigkilled_insert_leaves_a_file_the_next_process_sweeps(tmp_path: Path) -> None:
    """A writer killed between creating its file and unlinking it: the next sweep frees it."""
    code = (
        "import os, signal, tempfile, sys\n"
        "prefix = f'eos-native-{os.getpid()}-'\n"
        f"fd, path = tempfile.mkstemp(prefix=prefix, dir={str(tmp_path)!r})\n"
        "os.write(fd, b'{}')\n"
        "print(path, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == -9
    left = Path(out.stdout.strip())
    assert left.exists()
    assert sweep_stale(tmp_path) == []  # too young: it could still be in use
    assert sweep_stale(tmp_path, now=time.time() + STALE_AFTER_S + 1) == [left]
    assert not left.exists()
