"""The ``eos-pipeline`` command line: help and clear errors for bad input."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eos_pipeline.cli import main


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eos_pipeline.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_help_lists_commands_and_environment() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for word in ("stack", "fetch", "demo", "EOS_KAFKA_PORT", "EOS_STACK_DIR"):
        assert word in result.stdout


def test_unknown_command_is_rejected_with_the_choices() -> None:
    result = _run("frobnicate")
    assert result.returncode == 2
    assert "invalid choice: 'frobnicate'" in result.stderr and "stack" in result.stderr


def test_unknown_stack_action_is_rejected() -> None:
    result = _run("stack", "sideways")
    assert result.returncode == 2 and "choose from 'up', 'down', 'status'" in result.stderr


def test_stack_up_without_java_exits_1_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "missing-jdk"))
    assert main(["stack", "up", "--state-dir", str(tmp_path / "s")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Java not found") and "JAVA_HOME" in err


def test_bad_port_variable_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("EOS_KAFKA_PORT", "ninety-ninety-two")
    assert main(["stack", "status", "--state-dir", str(tmp_path)]) == 1
    assert "EOS_KAFKA_PORT='ninety-ninety-two' is not a port number" in capsys.readouterr().err


def test_status_of_a_stopped_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", "status", "--state-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["zookeeper", "stopped"], ["kafka", "stopped"]]


def test_console_script_is_installed() -> None:
    assert shutil.which("eos-pipeline") or Path(sys.executable).with_name("eos-pipeline").exists()


def test_replay_help_says_what_it_does_and_that_it_is_a_dry_run_by_default() -> None:
    result = _run("replay", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())  # argparse wraps lines
    for words in ("--from", "--to", "--yes", "--sink", "nothing is written", "does not move"):
        assert words in text
    assert "replay" in _run("--help").stdout
