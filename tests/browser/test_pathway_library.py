"""The Pathway library page in Chromium against a `flowledger serve` of its own (a store nobody else
writes to): what it shows is the stats route's answer, and a change in the store shows after a refresh,
by the button or on the timer, in the same document (no reload)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowledger.config import load_settings
from flowledger.jobs import run_job
from flowledger.local.datadir import EMBEDDED_CREDENTIALS
from flowledger.services import build_services
from tests.browser.conftest import PHONE, Api, open_console, screenshot, serious_violations
from tests.e2e.conftest import RunningServer, launch_server

pytestmark = pytest.mark.e2e
UPDATED = re.compile(r"^Updated \d\d:\d\d:\d\d$")
_refs = itertools.count(1)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Api]]:
    """Two families; every count different: 5 pathways, 2 active, 1 active embedded, 3 demoted, one reused twice."""
    server = launch_server(tmp_path_factory.mktemp("library") / "data", env={"BACKLOG_CONSUMER_ENABLED": "false"})
    try:
        api = Api(server)
        reused = add_pathway(api, "user_question", "recommendation_delivered")
        add_pathway(api, "user_question", "recommendation_delivered")
        add_pathway(api, "user_question", "recommendation_delivered")
        add_pathway(api, "claim_review", "claim_created")
        for _ in range(2):
            api.admin("POST", f"/admin/v1/reasoning/pathways/{reused}/hit", expect=200)
        # The hourly embedding job, run now from the CLI against the server's store: by_model fills in.
        job = server.cli("jobs", "run", "pathway_embedding_backfill", "--data-dir", str(server.data_dir.path))
        assert job.returncode == 0, job.stderr
        demote_the_cold(server)
        add_pathway(api, "user_question", "recommendation_delivered")  # after the backfill: not embedded
        yield server, api
    finally:
        server.stop()


def demote_the_cold(server: RunningServer) -> None:
    """The daily decay job over the server's store, its clock a month on: the never-reused pathways go cold."""
    endpoints = server.data_dir.endpoints()
    services = build_services(
        load_settings(aws_endpoint_url=endpoints.aws_endpoint_url, aws_region=endpoints.region), EMBEDDED_CREDENTIALS
    )
    services.clock = lambda: datetime.now(UTC) + timedelta(days=31)
    assert run_job("pathway_decay", services)["demoted_cold"] == 3


def add_pathway(api: Api, trigger_type: str, outcome: str) -> str:
    """A completed high-confidence flow over HTTP, whose close extracts a pathway; the pathway's id."""
    token = api.token("agent-library", ["reasoning.write"])
    ref = f"library/{trigger_type}/{next(_refs)}"
    opened = api.bearer(
        "POST",
        "/api/reasoning/flows",
        token,
        {"trigger_type": trigger_type, "trigger_ref": ref, "trigger_summary": "A question about a lab trend"},
        expect=201,
    )
    flow_id = opened.json()["flow_id"]
    step = {
        "step_kind": "retrieval",
        "agent": "researcher",
        "summary_text": "Retrieved guideline passages",
        "confidence": 0.95,
    }
    api.bearer("POST", f"/api/reasoning/flows/{flow_id}/steps", token, step, expect=201)
    closing = {
        "state": "completed",
        "outcome": {"type": outcome, "summary": "Recommended a follow-up", "confidence": 0.96},
    }
    api.bearer("PATCH", f"/api/reasoning/flows/{flow_id}", token, closing, expect=200)
    extracted = api.admin("POST", "/admin/v1/reasoning/pathways/extract", {"flow_id": flow_id}, expect=200).json()
    return str(extracted["pathway_id"])  # extracted at close already: this says which one


def stats(api: Api) -> dict[str, Any]:
    return dict(api.admin("GET", "/admin/v1/reasoning/pathways/stats", expect=200).json())


def shown_total(page: Any, key: str) -> int:
    return int(page.locator(f"[data-total='{key}'] dd").inner_text())


def mark_document(page: Any) -> None:
    """A marker a reload would lose."""
    page.evaluate("window.__sameDocument = 'library'")


def same_document(page: Any) -> bool:
    return bool(page.evaluate("window.__sameDocument === 'library'"))


def test_the_page_shows_what_the_stats_route_says(page: Any, library: tuple[RunningServer, Api]) -> None:
    server, api = library
    open_console(page, server, "pathways")
    expected = stats(api)
    assert page.title() == "Pathways · Flowledger"
    for key in ("total", "active", "embedded", "demoted"):
        assert shown_total(page, key) == expected[key]
    assert [expected[key] for key in ("total", "active", "embedded", "demoted")] == [5, 2, 1, 3]
    assert expected["maturity_by_trigger_type"] == {"claim_review": "sparse", "user_question": "growing"}
    families = page.locator(".maturity tr[data-family]")
    assert families.evaluate_all("r => r.map(x => [x.dataset.family, x.dataset.maturity])") == sorted(
        [family, level] for family, level in expected["maturity_by_trigger_type"].items()
    )
    counts = page.locator(".maturity tr[data-family] td:nth-child(2)").all_inner_texts()
    families_shown = sorted({*expected["by_trigger_type"], *expected["maturity_by_trigger_type"]})
    assert counts == [str(expected["by_trigger_type"].get(family, 0)) for family in families_shown]
    top = page.locator(".top-hits tr[data-pathway-id]")
    assert top.evaluate_all("r => r.map(x => x.dataset.pathwayId)") == [
        t["pathway_id"] for t in expected["top_hits"][:5]
    ]
    assert top.first.locator(".hits").inner_text() == str(expected["top_hits"][0]["hit_count"]) == "2"
    models = page.locator(".by-model tr[data-model]").evaluate_all("r => r.map(x => x.dataset.model)")
    assert models == sorted(expected["by_model"]) and models  # the backfill embedded them
    counted = page.locator(".by-model tr[data-model] td:nth-child(2)").all_inner_texts()
    assert counted == [str(expected["by_model"][model]) for model in models]
    assert UPDATED.match(page.locator(".updated").inner_text())
    screenshot(page, "pathway-library")
    assert serious_violations(page) == []


def test_refresh_shows_a_new_pathway_without_reloading(page: Any, library: tuple[RunningServer, Api]) -> None:
    server, api = library
    open_console(page, server, "pathways")
    before = shown_total(page, "total")
    mark_document(page)
    add_pathway(api, "claim_review", "claim_created")
    assert stats(api)["total"] == before + 1
    assert shown_total(page, "total") == before  # nothing moves until a refresh
    page.get_by_role("button", name="Refresh").click()
    page.wait_for_selector(f".library-data[data-total='{before + 1}']")
    assert shown_total(page, "total") == before + 1
    assert page.locator(".maturity tr[data-family='claim_review'] td:nth-child(2)").inner_text() == str(
        stats(api)["by_trigger_type"]["claim_review"]
    )
    assert same_document(page)
    assert page.locator(".updated").get_attribute("aria-live") == "polite"


def test_the_timer_refreshes_the_data_in_place(page: Any, library: tuple[RunningServer, Api]) -> None:
    server, api = library
    open_console(page, server, "pathways?every=1")  # the cadence shortened, so a test sees a tick
    before = shown_total(page, "total")
    mark_document(page)
    # The button stays the same element: only the data re-renders.
    page.evaluate("window.__refreshButton = document.querySelector('button.refresh')")
    add_pathway(api, "user_question", "recommendation_delivered")
    page.wait_for_selector(f".library-data[data-total='{before + 1}']", timeout=30_000)
    assert same_document(page)
    assert page.evaluate("window.__refreshButton === document.querySelector('button.refresh')")


def test_refresh_by_keyboard(page: Any, library: tuple[RunningServer, Api]) -> None:
    server, api = library
    open_console(page, server, "pathways")
    before = shown_total(page, "total")
    add_pathway(api, "user_question", "recommendation_delivered")
    for _ in range(20):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.matches('button.refresh')"):
            break
    assert page.evaluate("document.activeElement.matches('button.refresh:focus-visible')")
    page.keyboard.press("Enter")
    page.wait_for_selector(f".library-data[data-total='{before + 1}']")


def test_at_phone_width_nothing_overflows(page: Any, library: tuple[RunningServer, Api]) -> None:
    server, _ = library
    page.set_viewport_size(PHONE)
    open_console(page, server, "pathways")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
