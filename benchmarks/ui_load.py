"""How long Dagster's UI takes to show a table asset, in a real headless Chromium (issue 30).

The scale benchmark calls :func:`ui_load_times` after its catch-up run: a Dagster webserver on
the benchmark's own instance and definitions (no daemon: nothing runs meanwhile), then the
asset's page and its partitions view opened a few times each. A load is timed from the
navigation until the page shows what a user came for, read from the page's text:

* the asset page: the latest materialization's partition key, its "Row count" and its
  metadata (``lag_after``, which every run of the product records);
* the partitions view: "Materialized (N)" with N every partition of the asset.

The first load of each page is reported apart (the browser fetches and compiles the UI's
JavaScript, the webserver warms up); the figure is the median of the others.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: A code location that builds the benchmark's definitions from the YAML beside it.
_CODE = """from pathlib import Path

from eos_pipeline.components.config import parse_config
from eos_pipeline_tests.support.definitions import build_definitions

defs = build_definitions(parse_config(Path(__file__).with_name("pipelines.yaml").read_text(), ""))
"""

_LOCATION_LOADED = """{ workspaceOrError { __typename ... on Workspace {
  locationEntries { name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } } } } } }"""

#: The asset page is shown: the latest partition's key, its row count and its run metadata.
_ASSET_READY = """([key]) => {
  const text = document.body.innerText;
  return text.includes(key) && text.includes('Row count') && text.includes('lag_after');
}"""

#: The partitions view is shown: every partition counted as materialized.
_PARTITIONS_READY = """([total]) => {
  const found = document.body.innerText.match(/Materialized \\(([\\d,]+)\\)/);
  return found !== null && Number(found[1].replace(/,/g, '')) === total;
}"""


def _graphql(ui: str, query: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{ui}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.load(response))


@contextlib.contextmanager
def webserver(home: Path, yaml_text: str, workdir: Path) -> Iterator[str]:
    """``dagster-webserver`` on the instance in ``home`` and the definitions of ``yaml_text``;
    yields its URL once the code location has loaded, stops its process group after."""
    from eos_dev.demo import stop_dagster
    from eos_dev.stack.services import free_port

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pipelines.yaml").write_text(yaml_text)
    code = workdir / "scale_ui_defs.py"
    code.write_text(_CODE)
    port = free_port()
    exe = Path(sys.executable).with_name("dagster-webserver")
    command = [str(exe), "-f", str(code), "-h", "127.0.0.1", "-p", str(port)]
    # The code imports the tests' support (build_definitions), which is not an installed package:
    # the repository's root goes on the path, as pytest and ``python -m benchmarks`` have it.
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": path}
    log = workdir / "webserver.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    ui = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the webserver did not come up; see {log}")
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError, KeyError):
                entries = _graphql(ui, _LOCATION_LOADED)["data"]["workspaceOrError"]
                if entries["locationEntries"] and all(
                    e["loadStatus"] == "LOADED" for e in entries["locationEntries"]
                ):
                    break
            time.sleep(0.5)
        # A location that failed to load is "LOADED" too, with an error: say it now rather than
        # wait for pages that never show (a stale import in _CODE once cost a 120 s timeout).
        failed = [
            e["locationOrLoadError"]["message"]
            for e in entries["locationEntries"]
            if (e.get("locationOrLoadError") or {}).get("__typename") == "PythonError"
        ]
        if failed:
            raise RuntimeError(f"the code location did not load: {failed[0].strip()}; see {log}")
        yield ui
    finally:
        stop_dagster(process)


def _timed_loads(page: Any, url: str, ready: str, arg: list[Any], loads: int) -> dict[str, Any]:
    """Open ``url`` ``loads + 1`` times; seconds until ``ready`` holds for each."""
    seconds = []
    for _ in range(loads + 1):
        began = time.perf_counter()
        page.goto(url, wait_until="commit")
        page.wait_for_function(ready, arg=arg, timeout=180_000, polling=50)
        seconds.append(time.perf_counter() - began)
    rest = seconds[1:]
    return {
        "first_s": round(seconds[0], 2),
        "p50_s": round(statistics.median(rest), 2),
        "max_s": round(max(rest), 2),
        "loads": len(rest),
    }


def ui_load_times(
    home: Path,
    yaml_text: str,
    workdir: Path,
    asset_path: list[str],
    latest_key: str,
    partitions: int,
    *,
    loads: int = 3,
) -> dict[str, Any]:
    """The asset page's and the partitions view's load times (see the module docstring)."""
    from playwright.sync_api import sync_playwright

    from eos_pipeline_tests.support.browser import CHROMIUM_FLAGS, chromium_path

    asset = "/assets/" + "/".join(asset_path)
    began = time.perf_counter()
    with webserver(home, yaml_text, workdir) as ui, sync_playwright() as p:
        started = round(time.perf_counter() - began, 2)
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            found = {
                "webserver_start_s": started,
                "asset_page": _timed_loads(page, ui + asset, _ASSET_READY, [latest_key], loads),
                "partitions_view": _timed_loads(
                    page, ui + asset + "?view=partitions", _PARTITIONS_READY, [partitions], loads
                ),
            }
            page.screenshot(path=str(workdir / "partitions_view.png"))
            return found
        finally:
            browser.close()


def missing_reason() -> str | None:
    """Why the UI cannot be timed here (no Chromium or no Playwright), or None."""
    from eos_pipeline_tests.support.browser import missing_reason

    return missing_reason()
