"""Fetching and verifying the pinned JVM jars."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from eos_dev.stack.registry import unpacked
from eos_pipeline.adapters import jvm_artifacts as artifacts
from eos_pipeline.adapters.jvm_artifacts import Artifact, ArtifactError, ensure_bundle, load_lock


def test_lock_pins_every_bundle_with_a_sha256() -> None:
    _, bundles = load_lock()
    assert {"kafka", "zookeeper", "spark-kafka", "hudi"} <= set(bundles)
    for jars in bundles.values():
        for jar in jars:
            assert len(jar.sha256) == 64 and int(jar.sha256, 16) >= 0
            assert jar.size > 0


def _fake_repo(tmp_path: Path, payload: bytes, pinned: bytes) -> tuple[str, Artifact]:
    """A file:// Maven layout serving ``payload`` for an artifact pinned to ``pinned``'s digest."""
    art = Artifact("org.example:demo:1.0", hashlib.sha256(pinned).hexdigest(), len(pinned))
    jar = tmp_path / "repo" / "org" / "example" / "demo" / "1.0" / art.filename
    jar.parent.mkdir(parents=True)
    jar.write_bytes(payload)
    return (tmp_path / "repo").as_uri(), art


def _with_lock(monkeypatch: pytest.MonkeyPatch, repo: str, art: Artifact) -> None:
    monkeypatch.setattr(artifacts, "load_lock", lambda: (repo, {"demo": [art]}))


def test_download_is_verified_then_reused_without_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, art = _fake_repo(tmp_path, b"jar-bytes", b"jar-bytes")
    _with_lock(monkeypatch, repo, art)
    fetched: list[str] = []
    [path] = ensure_bundle("demo", tmp_path / "cache", progress=fetched.append)
    assert path.read_bytes() == b"jar-bytes" and len(fetched) == 1

    # Second run: the repository is gone, yet the cached, verified jar is enough.
    _with_lock(monkeypatch, "http://127.0.0.1:9/none", art)
    again: list[str] = []
    assert ensure_bundle("demo", tmp_path / "cache", progress=again.append) == [path]
    assert again == []


def test_checksum_mismatch_is_rejected_and_nothing_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, art = _fake_repo(tmp_path, b"tampered", b"original")
    art = Artifact(art.coords, art.sha256, len(b"tampered"))
    _with_lock(monkeypatch, repo, art)
    with pytest.raises(ArtifactError, match=r"checksum mismatch.*org\.example:demo:1\.0"):
        ensure_bundle("demo", tmp_path / "cache")
    assert list((tmp_path / "cache" / "demo").iterdir()) == []


def test_unreachable_repository_names_the_artifact_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, art = _fake_repo(tmp_path, b"x", b"x")
    _with_lock(monkeypatch, "http://127.0.0.1:9/maven2", art)
    with pytest.raises(ArtifactError, match=r"could not download org\.example:demo:1\.0.*mirror"):
        ensure_bundle("demo", tmp_path / "cache")


def test_real_cache_matches_the_lock(tmp_path: Path) -> None:
    """The jars the stack uses are exactly the pinned bytes (fetched on first use)."""
    paths = ensure_bundle("zookeeper")
    _, bundles = load_lock()
    expected = {a.filename: a.sha256 for a in bundles["zookeeper"]}
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths} == expected
    assert json.loads(json.dumps(expected))  # the lock is plain JSON data


def test_an_application_archive_is_verified_then_unpacked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("app-runner.jar")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"jar"))
    data = buffer.getvalue()
    art = Artifact("org.example:app:1.0:all", hashlib.sha256(data).hexdigest(), len(data), "tar.gz")
    assert art.filename == "app-1.0-all.tar.gz"
    archive = tmp_path / "repo" / "org" / "example" / "app" / "1.0" / art.filename
    archive.parent.mkdir(parents=True)
    archive.write_bytes(data)
    _with_lock(monkeypatch, (tmp_path / "repo").as_uri(), art)
    [path] = ensure_bundle("demo", tmp_path / "cache")
    home = unpacked(path)
    assert home == path.parent / "app-1.0-all" and (home / "app-runner.jar").read_bytes() == b"jar"
    (home / "app-runner.jar").write_bytes(b"kept")
    assert unpacked(path) == home  # unpacked once: a finished folder is reused
    assert (home / "app-runner.jar").read_bytes() == b"kept"


def test_the_registry_is_pinned_as_an_archive_on_java_17() -> None:
    """Apicurio 2.6 runs on the stack's Java 17 (3.x needs 21): the pin must stay on 2.x."""
    _, bundles = load_lock()
    [registry] = bundles["registry"]
    assert registry.packaging == "tar.gz" and ":2.6." in registry.coords
