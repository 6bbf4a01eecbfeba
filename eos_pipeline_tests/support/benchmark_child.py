"""Run a benchmark module's smoke mode in its own process, against the session's stack.

A separate process: the benchmarks open their own chDB engine (one data path per process).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from eos_pipeline.adapters.kafka import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]


def run_smoke(
    module: str,
    kafka: KafkaSettings,
    zookeeper_hosts: str,
    out: Path,
    timeout: float,
    extra: Sequence[str] = (),
) -> str:
    """``python -m <module> --smoke [extra]`` writing to ``out``: its stdout; fails the test
    with its output when it fails."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            module,
            "--smoke",
            "--kafka-bootstrap",
            kafka.bootstrap_servers,
            "--zookeeper-hosts",
            zookeeper_hosts,
            "--out",
            str(out),
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout
