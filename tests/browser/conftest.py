"""The console in a real browser: Debian's Chromium driven by Python playwright, against `flowledger serve`.

Playwright is launched on ``/usr/bin/chromium`` (``FLOWLEDGER_CHROMIUM`` overrides it) and never
downloads a browser. Without Chromium these tests skip, unless ``FLOWLEDGER_REQUIRE_CHROMIUM=1`` (as
``.ci/run`` sets it), where a missing browser fails them. Every page test keeps a screenshot under
``test-artifacts/console/``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import RunningServer, launch_server
from tests.signing import sigv4_headers

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
AXE = Path(__file__).parent / "vendor" / "axe-core-4.11.0" / "axe.min.js"
CHROMIUM = os.environ.get("FLOWLEDGER_CHROMIUM", "/usr/bin/chromium")
# As the machine's notes say: without the background-networking flags Chromium keeps dialling out.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}
READY = "main[data-ready='true']"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]

pytestmark = pytest.mark.e2e


def chromium_path() -> str:
    """The browser to drive, or a skip (a failure where CI requires it)."""
    if shutil.which(CHROMIUM) or Path(CHROMIUM).is_file():
        return CHROMIUM
    message = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("FLOWLEDGER_REQUIRE_CHROMIUM") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One dev server for the console tests (tests that need a store of their own launch their own)."""
    running = launch_server(tmp_path_factory.mktemp("console") / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Per module, not per session: sync playwright keeps its event loop running in this thread while it
    # is started, so every asyncio test after it (anyio, starlette's TestClient) would fail to start one.
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh desktop-sized tab (its own storage); console errors fail the test at teardown."""
    context = browser.new_context(viewport=DESKTOP)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def open_console(page: Any, server: RunningServer, path: str) -> Any:
    """Go to ``/console/<path>`` and wait until the page says it has rendered."""
    page.goto(f"{server.base_url}/console/{path.lstrip('/')}")
    page.wait_for_selector(READY, timeout=30_000)
    return page


def screenshot(page: Any, name: str) -> Path:
    """Keep a full-page screenshot as a test artefact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(target), full_page=True)
    return target


def serious_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical findings on the page as it is now (WCAG 2.1 A and AA rules)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # evaluate is not subject to the page's CSP, which (rightly) refuses an injected script tag.
        page.evaluate(AXE.read_text())
    result = page.evaluate("async (tags) => await axe.run(document, {runOnly: {type: 'tag', values: tags}})", AXE_TAGS)
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


@dataclass
class Api:
    """The server's API as tests seed it: signed admin calls and bearer calls, over HTTP."""

    server: RunningServer

    def admin(self, method: str, path: str, body: Any = None, expect: int | None = None) -> httpx.Response:
        data = json.dumps(body).encode() if body is not None else b""
        headers = sigv4_headers(self.server.data_dir.admin_credentials(), method, f"{self.server.base_url}{path}", data)
        response = httpx.request(
            method,
            f"{self.server.base_url}{path}",
            content=data,
            headers={**headers, "content-type": "application/json"},
            timeout=60,
        )
        if expect is not None:
            assert response.status_code == expect, response.text
        return response

    def token(self, sub: str, scopes: list[str], patient_id: str | None = None) -> str:
        return self.server.data_dir.token(sub, scopes, patient_id=patient_id)

    def bearer(self, method: str, path: str, token: str, body: Any = None, expect: int | None = None) -> httpx.Response:
        response = httpx.request(
            method,
            f"{self.server.base_url}{path}",
            json=body,
            headers={"authorization": f"Bearer {token}"},
            timeout=60,
        )
        if expect is not None:
            assert response.status_code == expect, response.text
        return response


@pytest.fixture(scope="session")
def api(console_server: RunningServer) -> Api:
    return Api(console_server)
