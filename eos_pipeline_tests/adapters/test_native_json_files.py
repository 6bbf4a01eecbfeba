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


def test_a_process_writes_over_its_two_staging_files_and_removes_them_at_exit(
    tmp_path: Path,
) -> None:
    """Chunk after chunk the same two files (their pages reused), cut to each chunk; gone when
    the process exits; a forked child makes its own instead of writing over its parent's."""
    code = (
        "import os, sys\n"
        "from eos_pipeline.adapters.clickhouse import native_json as nj\n"
        "d = sys.argv[1]\n"
        "first = nj._staging(d)\n"
        "nj._rewrite(first.fds[0], lambda fd: nj._write_lines(fd, [b'{\"a\": 1}'] * 1000))\n"
        "nj._rewrite(first.fds[0], lambda fd: nj._write_lines(fd, [b'{}', b'{}']))\n"
        "assert nj._staging(d) is first\n"
        "assert open(first.paths[0], 'rb').read() == b'{}\\n{}'\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    child = nj._staging(d)\n"
        "    assert child is not first and str(os.getpid()) in child.paths[0]\n"
        "    os._exit(0 if all(os.path.exists(p) for p in first.paths) else 1)\n"
        "assert os.waitpid(pid, 0)[1] == 0\n"
        "print(' '.join(first.paths))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    paths = out.stdout.split()
    assert len(paths) == 2 and paths[0].endswith(".jsonl") and paths[1].endswith(".src")
    assert not any(Path(p).exists() for p in paths)  # removed at exit
    # the child's exit (os._exit) ran no exit hooks: its files are a killed writer's, swept later
    assert len(sweep_stale(tmp_path, now=time.time() + STALE_AFTER_S + 1)) == 2
    assert list(tmp_path.iterdir()) == []
