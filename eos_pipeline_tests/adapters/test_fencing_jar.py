"""The fencing jar is built by `eos-pipeline fetch`; a run without it is refused, never degraded."""

from __future__ import annotations

from pathlib import Path

import pytest

from eos_pipeline.adapters.jvm_artifacts import ArtifactError
from eos_pipeline.adapters.spark import FencingJarError, build_fencing_jar, fencing_jar


def test_a_missing_fencing_jar_refuses_and_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FencingJarError, match="run `eos-pipeline fetch`") as refused:
        fencing_jar(Path("hudi-spark3.5-bundle_2.12-1.1.1.jar"), tmp_path)
    assert isinstance(refused.value, ArtifactError)  # the CLI reports it like a failed download
    assert not any(tmp_path.rglob("*.jar"))


def test_building_without_a_jdk_refuses_and_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FencingJarError, match="javac not found"):
        build_fencing_jar(Path("hudi-spark3.5-bundle_2.12-1.1.1.jar"), tmp_path)


def test_the_jar_fetch_built_is_the_one_a_run_uses() -> None:
    from eos_pipeline.adapters.jvm_artifacts import ensure_bundle

    hudi = next(j for j in ensure_bundle("hudi") if "hudi-spark" in j.name)
    built = build_fencing_jar(hudi)
    assert fencing_jar(hudi) == built
    assert built.stat().st_size > 0
