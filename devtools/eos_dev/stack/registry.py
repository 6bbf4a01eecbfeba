"""The stack's schema registry: Apicurio Registry serving the Confluent-compatible API.

Confluent's own registry is not on Maven Central; Apicurio's application archive is, and its
``/apis/ccompat/v7`` speaks the API confluent-kafka's client and serializers use. The 2.6 line
runs on Java 17 (the 3.x line needs Java 21), so it shares the stack's JVM. Its storage is the
built-in H2 database, kept in a file under the state directory (``WRITE_DELAY=0``: a registered
schema survives even a SIGKILL, measured), so ids stay valid across ``stack down``/``up`` and a
killed registry comes back with every schema it had: records never change verdict for it.
"""

from __future__ import annotations

import shutil
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from eos_dev.stack.config import StackConfig, StackError
from eos_dev.stack.processes import wait_ready
from eos_pipeline.adapters.jvm_artifacts import default_cache_dir, ensure_bundle

if TYPE_CHECKING:
    from eos_dev.stack.services import Stack

#: Where the Confluent-compatible API lives under the registry's root.
CCOMPAT_PATH = "/apis/ccompat/v7"


def registry_url(cfg: StackConfig) -> str:
    """The base URL a schema-registry client takes (Confluent-compatible API)."""
    return f"http://{cfg.host}:{cfg.registry_port}{CCOMPAT_PATH}"


def registry_ready(url: str) -> bool:
    """True once the registry answers a real API request (its subject list) with HTTP 200."""
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=2.0) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def runner_jar(stack: Stack) -> Path:
    """The registry's runner jar, fetched and unpacked on first use."""
    archive = ensure_bundle("registry", stack.config.cache_dir or default_cache_dir(), stack.say)
    home = unpacked(archive[0])
    jars = sorted(home.glob("*-runner.jar"))
    if not jars:
        raise StackError(f"no *-runner.jar in {home}: delete that folder and run `stack up` again")
    return jars[0]


def unpacked(archive: Path) -> Path:
    """The folder a verified ``.tar.gz`` from :func:`ensure_bundle` unpacks to, once: into a
    temporary folder renamed when complete, so an interrupted unpack is redone.
    """
    target = archive.with_name(archive.name.removesuffix(".tar.gz"))
    if target.is_dir():
        return target
    partial = target.with_name(target.name + ".part")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(partial, filter="data")
    try:
        partial.rename(target)
    except OSError:  # another process finished first
        shutil.rmtree(partial, ignore_errors=True)
    return target


def start_registry(stack: Stack, java: str) -> None:
    """Start the registry and wait until its API answers; a running one is only checked."""
    cfg = stack.config
    url = registry_url(cfg)
    if pid := stack._running_pid("registry"):
        if not registry_ready(url):
            raise StackError(
                f"registry (pid {pid}) is running but does not answer at {url}; see "
                f"{stack.log_path('registry')} or run `stack down`."
            )
        stack.say(f"registry already running (pid {pid}) at {url}")
        return
    stack._check_ports("registry", {"EOS_REGISTRY_PORT": cfg.registry_port})
    jar = runner_jar(stack)
    data = stack._dir("registry") / "data"
    data.mkdir(parents=True, exist_ok=True)
    pid = stack._launch(
        "registry",
        java,
        [
            f"-Dquarkus.http.host={cfg.host}",
            f"-Dquarkus.http.port={cfg.registry_port}",
            # No management interface, no telemetry: one port, nothing reached from outside.
            "-Dquarkus.management.enabled=false",
            "-Dquarkus.analytics.disabled=true",
            f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{data / 'registry'};WRITE_DELAY=0",
            "-jar",
            str(jar),
        ],
        cfg.registry_heap,
    )
    stack.say(f"starting registry (pid {pid}) ...")
    wait_ready("registry", lambda: registry_ready(url), pid, stack.log_path("registry"))
    stack.say(f"registry ready at {url}")
