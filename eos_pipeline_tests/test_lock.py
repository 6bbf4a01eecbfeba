"""requirements.lock must hold every pin of pyproject.toml, at the same version, with hashes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _locked() -> dict[str, tuple[str, int]]:
    """Package -> (version, number of hashes) from requirements.lock."""
    text = (ROOT / "requirements.lock").read_text()
    out: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = re.match(r"([A-Za-z0-9_.-]+)==([^\s\\]+)", block)
        if head:
            out[_norm(head.group(1))] = (head.group(2), block.count("--hash=sha256:"))
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_pin_of_pyproject_is_locked_at_its_version_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    locked = _locked()
    stale = []
    for pin in pins:
        name, _, version = re.split(r"(==)", re.sub(r"\[.*?\]", "", pin).strip(), maxsplit=1)
        got = locked.get(_norm(name))
        if got is None or got[0] != version or got[1] == 0:
            stale.append(f"{pin}: locked {got}")
    assert not stale, "requirements.lock is stale (run `make lock`): " + "; ".join(stale)


def test_every_locked_package_carries_a_hash() -> None:
    locked = _locked()
    assert len(locked) > 50
    assert [name for name, (_, hashes) in locked.items() if hashes == 0] == []
