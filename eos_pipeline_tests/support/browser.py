"""Walking the Dagster UI in a real headless Chromium (Debian's, driven by Playwright).

Playwright's own browser download cannot reach its CDN from these machines, so the test uses
the system Chromium that the project's set-up installs (``tools/setup_system.sh``). The flags
keep Chromium off the network it cannot reach (background services, QUIC) and let it run as
root in a container.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing_reason() -> str | None:
    """Why no browser test can run here, or None."""
    if chromium_path() is None:
        return "no Chromium on this machine (`make test` installs Debian's chromium as root)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing (pip install -e '.[dev]')"
    return None


class UiWalker:
    """One page, the UI's URL, and a folder for screenshots. ``graphql`` holds the bodies of
    the GraphQL answers the last page opened received (what the page was given to show)."""

    def __init__(self, page: Any, ui: str, shots: Path) -> None:
        self.page, self.ui, self.shots = page, ui, shots
        self.graphql: list[str] = []
        self._answers: list[Any] = []
        #: Pages left on which to look for the welcome dialog (each look may wait 5 s).
        self._welcome_looks = 2
        page.on("response", self._keep)

    def _keep(self, response: Any) -> None:
        if "/graphql" in response.url:
            self._answers.append(response)

    def _read_answers(self) -> list[str]:
        bodies = []
        for response in self._answers:
            with contextlib.suppress(Exception):  # an answer the page dropped on reload
                bodies.append(response.text())
        self._answers = []
        return bodies

    def open(
        self,
        path: str,
        wait_for: str,
        name: str,
        *,
        settle: tuple[str, int] = ("", 0),
        full_page: bool = True,
        scroll_to: str = "",
    ) -> str:
        """Open ``path``, wait until ``wait_for`` is shown, then until nothing says Loading
        (and ``settle``'s text is shown that many times), save a screenshot, return the text.

        On a loaded machine a page's last queries can stay unanswered for long; the page is then
        loaded again once (what the test asserts is only read after that)."""
        self._answers = []
        for attempt in range(2):
            if attempt == 0:
                self.page.goto(self.ui + path)
            else:
                self.page.reload()
            try:
                self.page.get_by_text(wait_for, exact=False).first.wait_for(timeout=60_000)
            except Exception as exc:  # show what the page said instead
                self.page.screenshot(path=str(self.shots / f"{name}-timeout.png"), full_page=True)
                text = self.page.inner_text("body")
                raise AssertionError(
                    f"{path}: {wait_for!r} not shown; the page says:\n{text}"
                ) from exc
            self._dismiss_welcome()
            with contextlib.suppress(Exception):  # the page's remaining queries landing
                self.page.wait_for_function(
                    "([text, times]) => !document.body.innerText.includes('Loading')"
                    " && document.body.innerText.split(text).length > times",
                    arg=list(settle),
                    timeout=60_000,
                )
                break
        self.page.wait_for_timeout(1000)
        if scroll_to:  # the part of a long page a viewport screenshot should show
            self.page.get_by_text(scroll_to, exact=True).first.scroll_into_view_if_needed()
            self.page.mouse.wheel(0, 300)
            self.page.wait_for_timeout(300)
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=full_page)
        self.graphql = self._read_answers()
        text = str(self.page.inner_text("body"))
        # A Dagster page left open keeps polling the webserver (every 2 s, and more while runs
        # go on): between visits it costs the browser and the webserver CPU the tests share.
        self.page.goto("about:blank")
        return text

    def _dismiss_welcome(self) -> None:
        """The UI greets a new browser with a community dialog over the page: skip it. It is
        shown once per browser profile, a moment late: once skipped (or not seen on two pages)
        no later page waits for it."""
        if self._welcome_looks <= 0:
            return
        self._welcome_looks -= 1
        with contextlib.suppress(Exception):
            self.page.get_by_role("button", name="Skip").click(timeout=5_000)
            self._welcome_looks = 0


@contextlib.contextmanager
def ui_walker(ui: str, shots: Path) -> Iterator[UiWalker]:
    from playwright.sync_api import sync_playwright

    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            yield UiWalker(page, ui, shots)
        finally:
            browser.close()


LAUNCH_BACKFILL = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on InvalidStepError { invalidStepKey }
    ... on UnauthorizedError { message }
  }
}
"""


def launch_backfill(ui: str, asset_paths: list[list[str]], partitions: list[str]) -> str:
    """Launch a backfill the way the UI's "Launch backfill" button does (its GraphQL call)."""
    params = {
        "partitionNames": partitions,
        "assetSelection": [{"path": path} for path in asset_paths],
        "fromFailure": False,
    }
    answer = graphql(ui, LAUNCH_BACKFILL, {"params": params})
    result = answer["data"]["launchPartitionBackfill"]
    if result["__typename"] != "LaunchBackfillSuccess":
        raise RuntimeError(f"backfill not launched: {answer}")
    return str(result["backfillId"])


def graphql(ui: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    """One call to the UI's GraphQL endpoint, as the page makes it; the whole answer."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"{ui}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.load(response)
    return answer
