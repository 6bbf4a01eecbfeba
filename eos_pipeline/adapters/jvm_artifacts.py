"""Fetch the pinned JVM jars from Maven Central into a local cache, verified by SHA-256 against
``jvm_artifacts.json`` (``tools/lock_jvm_artifacts.py`` writes it). A cached jar with the right
digest is reused (a second run asks nothing of the network); downloads are renamed only once
verified, so an interrupted one never leaves a half jar that looks valid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_CACHE_ENV = "EOS_ARTIFACT_CACHE"


class ArtifactError(RuntimeError):
    """A jar could not be fetched or did not match its pinned digest."""


@dataclass(frozen=True)
class Artifact:
    coords: str  # group:artifact:version[:classifier]
    sha256: str
    size: int
    #: The file's extension on Maven Central: ``jar``, or ``tar.gz`` for an application archive.
    packaging: str = "jar"

    @property
    def filename(self) -> str:
        _, artifact, version, *classifier = self.coords.split(":")
        suffix = f"-{classifier[0]}" if classifier else ""
        return f"{artifact}-{version}{suffix}.{self.packaging}"

    def url(self, repository: str) -> str:
        group, artifact, version, *_ = self.coords.split(":")
        return f"{repository}/{group.replace('.', '/')}/{artifact}/{version}/{self.filename}"


def load_lock() -> tuple[str, dict[str, list[Artifact]]]:
    raw = json.loads(
        resources.files("eos_pipeline.adapters").joinpath("jvm_artifacts.json").read_text()
    )
    bundles = {
        name: [Artifact(**a) for a in bundle["artifacts"]]
        for name, bundle in raw["bundles"].items()
    }
    return os.environ.get("EOS_MAVEN_REPOSITORY", raw["repository"]).rstrip("/"), bundles


def default_cache_dir() -> Path:
    """``$EOS_ARTIFACT_CACHE``, else ``.cache/jvm`` under the current directory."""
    return Path(os.environ.get(DEFAULT_CACHE_ENV, Path.cwd() / ".cache" / "jvm")).resolve()


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _download(url: str, target: Path, artifact: Artifact) -> None:
    partial = target.with_suffix(".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise ArtifactError(
            f"could not download {artifact.coords} from {url}: {exc}. Check the network or set "
            "EOS_MAVEN_REPOSITORY to a reachable Maven Central mirror."
        ) from exc
    actual = _sha256(partial)
    if actual != artifact.sha256:
        partial.unlink(missing_ok=True)
        raise ArtifactError(
            f"checksum mismatch for {artifact.coords} from {url}: expected sha256 "
            f"{artifact.sha256}, got {actual}. The download was discarded."
        )
    partial.rename(target)


def ensure_bundle(
    name: str,
    cache_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Return the local paths of every jar of bundle ``name``, downloading what is missing."""
    repository, bundles = load_lock()
    if name not in bundles:
        raise ArtifactError(f"unknown JVM bundle {name!r}; known: {', '.join(sorted(bundles))}")
    folder = (cache_dir or default_cache_dir()) / name
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for artifact in bundles[name]:
        target = folder / artifact.filename
        if target.exists() and target.stat().st_size == artifact.size:
            if _sha256(target) == artifact.sha256:
                paths.append(target)
                continue
            log.warning("cached %s does not match its digest; fetching it again", target)
        if progress:
            progress(f"fetching {artifact.coords} ({artifact.size / 1e6:.1f} MB)")
        _download(artifact.url(repository), target, artifact)
        paths.append(target)
    return paths


def ensure_all(
    cache_dir: Path | None = None, progress: Callable[[str], None] | None = None
) -> dict[str, list[Path]]:
    _, bundles = load_lock()
    return {name: ensure_bundle(name, cache_dir, progress) for name in bundles}
