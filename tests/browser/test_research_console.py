"""The Research console in Chromium against a `flowledger serve` of its own: match, radars, Reuse, deeper
research, the backlog panel, claim triage and the comparison radar, each action checked in the store
through the API, not by trusting the page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.browser.conftest import PHONE, Api, open_console, screenshot, serious_violations
from tests.e2e.conftest import RunningServer, launch_server

pytestmark = pytest.mark.e2e
TRIGGER = {"trigger_type": "user_question", "trigger_ref": "chat/labs/q-1"}
# Three pathways the matcher ranks exact, prefix, family-only; the prefix one gathered more kinds of
# evidence (a higher Coverage), so a comparison has a dominant pick.
SEEDS = [
    ("chat/labs/q-1", [("retrieval", "researcher")]),
    ("chat/labs", [("retrieval", "researcher"), ("llm_prompt", "critic"), ("verdict", "critic")]),
    ("intake/other", [("retrieval", "researcher"), ("graph_walk", "researcher")]),
]
WARN_FAILURES = 5  # research/health.py: five recent failures make the loop "warn"
CLAIMS = ["claim-dose-1", "claim-dose-2", "claim-dose-3"]


@dataclass
class Seeded:
    server: RunningServer
    api: Api
    failed_requests: list[str]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """A store nobody else writes to, the backlog consumer off (a queued row stays pending), seeded over HTTP."""
    server = launch_server(tmp_path_factory.mktemp("research") / "data", env={"BACKLOG_CONSUMER_ENABLED": "false"})
    try:
        api = Api(server)
        token = api.token("agent-researcher", ["reasoning.write"])
        for ref, steps in SEEDS:
            record_flow(api, token, ref, steps)
        for n, claim_id in enumerate(CLAIMS):
            api.admin(
                "POST",
                "/admin/v1/reasoning/claims-pending-review",
                {"claim_id": claim_id, "rejection_summary": f"Citation {n} did not support the dose"},
                expect=201,
            )
        yield Seeded(server, api, failed_requests(api, WARN_FAILURES))
    finally:
        server.stop()


def record_flow(api: Api, token: str, ref: str, steps: list[tuple[str, str]]) -> None:
    """A completed high-confidence flow: its close extracts a pathway."""
    opened = api.bearer(
        "POST",
        "/api/reasoning/flows",
        token,
        {"trigger_type": "user_question", "trigger_ref": ref, "trigger_summary": "A question about a lab trend"},
        expect=201,
    )
    flow_id = opened.json()["flow_id"]
    for kind, agent in steps:
        step = {"step_kind": kind, "agent": agent, "summary_text": "Retrieved guideline passages", "confidence": 0.95}
        api.bearer("POST", f"/api/reasoning/flows/{flow_id}/steps", token, step, expect=201)
    outcome = {"type": "recommendation_delivered", "summary": "Recommended a follow-up", "confidence": 0.96}
    api.bearer(
        "PATCH", f"/api/reasoning/flows/{flow_id}", token, {"state": "completed", "outcome": outcome}, expect=200
    )


def failed_requests(api: Api, count: int) -> list[str]:
    """Requests a dispatcher pulled and gave up on: enough recent failures to turn the loop to warn."""
    failed = []
    for n in range(count):
        body = {
            "idempotency_key": f"seed-failure-{n:04d}",
            "trigger_type": "user_question",
            "trigger_ref": f"chat/failing/{n}",
            "reason": "operator_request",
            "question_framing": "What went wrong?",
        }
        api.admin("POST", "/admin/v1/reasoning/research/deeper-request", body, expect=201)
        pulled = api.admin("POST", "/admin/v1/reasoning/research/backlog/next", {}, expect=200).json()["request"]
        api.admin(
            "POST",
            f"/admin/v1/reasoning/research/backlog/{pulled['request_id']}/complete",
            {"error": "no_sources"},
            expect=200,
        )
        failed.append(str(pulled["request_id"]))
    return failed


def match(api: Api) -> dict[str, Any]:
    return dict(api.admin("GET", f"/admin/v1/reasoning/pathways/match?{urlencode(TRIGGER)}", expect=200).json())


def backlog(api: Api) -> dict[str, Any]:
    return dict(api.admin("GET", "/admin/v1/reasoning/research/backlog", expect=200).json())


def search(page: Any, seeded: Seeded) -> Any:
    """The console opened empty and the trigger submitted through the form."""
    open_console(page, seeded.server, "research")
    page.fill("#trigger-type", TRIGGER["trigger_type"])
    page.fill("#trigger-ref", TRIGGER["trigger_ref"])
    page.get_by_role("button", name="Find pathways").click()
    page.wait_for_selector("li.candidate")
    return page


def test_candidates_come_in_the_api_order_each_with_an_accessible_radar_that_expands(page: Any, seeded: Seeded) -> None:
    candidates = match(seeded.api)["candidates"]
    expected = [c["pathway"]["pathway_id"] for c in candidates]
    search(page, seeded)
    assert page.locator("li.candidate").evaluate_all("items => items.map(i => i.dataset.pathwayId)") == expected
    assert len(expected) == 3
    radars = page.locator("li.candidate .radar-toggle svg")
    assert radars.count() == 3
    for n in range(3):
        assert radars.nth(n).get_attribute("role") == "img"
        # The chart speaks the API's own 0..7 scores, axis by axis.
        confidence = candidates[n]["pathway"]["dimensions"]["confidence"]
        spoken = f"Confidence {confidence['bucket']} ({confidence['score']} of 7)"
        assert spoken in (radars.nth(n).get_attribute("aria-label") or "")
    first = page.locator("li.candidate").first
    toggle = first.locator(".radar-toggle")
    assert toggle.get_attribute("aria-expanded") == "false"
    assert first.locator(".radar-full").is_hidden()
    toggle.click()
    assert toggle.get_attribute("aria-expanded") == "true"
    full = first.locator(".radar-full svg[role='img']")
    assert full.locator("text.radar-label").all_text_contents() == [
        "Confidence",
        "Coverage",
        "Maturity",
        "Recency",
        "Consensus",
        "Risk",
    ]
    # The 0-7 scores beside the chart are the API's own.
    confidence = match(seeded.api)["candidates"][0]["pathway"]["dimensions"]["confidence"]
    assert first.locator(".radar-full .axes div").first.inner_text().split("\n")[-1] == (
        f"{confidence['score']}/7 · {confidence['bucket']}"
    )
    screenshot(page, "research-console")
    assert serious_violations(page) == []
    toggle.click()
    assert first.locator(".radar-full").is_hidden()


def test_the_backlog_panel_shows_the_api_counts_ages_failures_and_health(page: Any, seeded: Seeded) -> None:
    open_console(page, seeded.server, "research")
    view = backlog(seeded.api)
    chips = page.locator(".backlog .chip[data-status]")
    shown = dict(
        zip(
            chips.evaluate_all("c => c.map(x => x.dataset.status)"),
            chips.evaluate_all("c => c.map(x => Number(x.dataset.count))"),
            strict=True,
        )
    )
    assert shown == view["status_distribution"] and shown["failed_voluntary"] == WARN_FAILURES
    pill = page.locator(".backlog .pill")
    assert pill.get_attribute("data-health") == view["loop_health"] == "warn"
    assert pill.inner_text() == "Loop needs attention" and "warn" in (pill.get_attribute("class") or "").split()
    rows = page.locator(".failures tr[data-request-id]")
    assert sorted(rows.evaluate_all("r => r.map(x => x.dataset.requestId)")) == sorted(
        f["request_id"] for f in view["recent_failures"]
    )
    assert set(seeded.failed_requests) <= {f["request_id"] for f in view["recent_failures"]}
    assert all("no_sources" in text for text in rows.all_inner_texts())
    assert page.locator("[data-callout='oldest-pending'] dd").inner_text() == "none"  # nothing is pending yet


def test_reuse_records_a_hit_in_the_store_and_shows_the_new_count(page: Any, seeded: Seeded) -> None:
    search(page, seeded)
    first = page.locator("li.candidate").first
    pathway_id = first.get_attribute("data-pathway-id")
    before = seeded.api.admin("GET", f"/admin/v1/reasoning/pathways/{pathway_id}", expect=200).json()["hit_count"]
    first.get_by_role("button", name="Reuse pathway").click()
    first.locator(".reused").wait_for()
    after = seeded.api.admin("GET", f"/admin/v1/reasoning/pathways/{pathway_id}", expect=200).json()
    assert after["hit_count"] == before + 1
    assert first.locator(".hit-count").inner_text() == str(after["hit_count"])
    assert (
        first.locator(".reused").inner_text()
        == f"Reused: {after['hit_count']} {'hit' if after['hit_count'] == 1 else 'hits'} now."
    )


def test_trigger_deeper_research_queues_a_row_the_backlog_counts(page: Any, seeded: Seeded) -> None:
    pending = backlog(seeded.api)["status_distribution"]["pending"]
    search(page, seeded)
    page.get_by_role("button", name="Trigger deeper research").click()
    page.locator(".request-id").wait_for()
    request_id = page.locator(".request-id").inner_text()
    assert re.fullmatch(r"rq_[0-9a-f]{26}", request_id)
    assert page.locator(".request-status").inner_text() == "pending"
    assert page.locator(".deeper-created").inner_text() == "Queued a deeper-research request."
    assert backlog(seeded.api)["status_distribution"]["pending"] == pending + 1
    # The panel refreshed with the new row.
    page.wait_for_selector(f".backlog .chip[data-status='pending'][data-count='{pending + 1}']")
    # A second click is a new request (a fresh idempotency key), not the same one again.
    page.get_by_role("button", name="Trigger deeper research").click()
    # Another id shown, not merely the old one gone: the panel clears it while the request is in flight.
    page.wait_for_function(
        "old => /^rq_[0-9a-f]{26}$/.test(document.querySelector('.request-id')?.textContent ?? '')"
        " && document.querySelector('.request-id').textContent !== old",
        arg=request_id,
    )
    assert backlog(seeded.api)["status_distribution"]["pending"] == pending + 2


def test_resolve_and_dismiss_settle_claims_in_the_store_and_move_them_to_the_strip(page: Any, seeded: Seeded) -> None:
    open_console(page, seeded.server, "research")
    for claim_id, button, status in ((CLAIMS[0], "Resolve", "resolved"), (CLAIMS[1], "Dismiss", "dismissed")):
        claim = page.locator(f"li.claim[data-claim-id='{claim_id}']")
        claim.get_by_label("Note (optional)").fill(f"{status} in the browser test")
        claim.get_by_role("button", name=button).click()
        page.locator(f".resolved-strip li[data-claim-id='{claim_id}'][data-status='{status}']").wait_for()
        assert claim.count() == 0
    queue = seeded.api.admin("GET", "/admin/v1/reasoning/claims-pending-review", expect=200).json()
    assert [c["claim_id"] for c in queue["pending"]] == [CLAIMS[2]]
    settled = {c["claim_id"]: (c["status"], c["note"]) for c in queue["recent_resolutions"]}
    assert settled == {
        CLAIMS[0]: ("resolved", "resolved in the browser test"),
        CLAIMS[1]: ("dismissed", "dismissed in the browser test"),
    }
    # A reload draws the same split from the server.
    open_console(page, seeded.server, "research")
    assert page.locator("li.claim").evaluate_all("c => c.map(x => x.dataset.claimId)") == [CLAIMS[2]]
    strip = page.locator(".resolved-strip li").evaluate_all("c => c.map(x => x.dataset.claimId)")
    assert sorted(strip) == sorted(CLAIMS[:2])


def test_two_ticked_candidates_draw_the_comparison_the_api_computes(page: Any, seeded: Seeded) -> None:
    search(page, seeded)
    candidates = page.locator("li.candidate")
    # Both tick orders: the first ticked is the API's "first" (deltas are second minus first).
    for order in ((0, 1), (1, 0)):
        ids = [candidates.nth(n).get_attribute("data-pathway-id") for n in order]
        candidates.nth(order[0]).get_by_label("Compare").check()
        assert page.locator(".compare .compare-body").inner_text() == "Tick one more candidate to compare."
        candidates.nth(order[1]).get_by_label("Compare").check()
        page.locator(".compare .dominant").wait_for()
        assert candidates.nth(2).get_by_label("Compare").is_disabled()  # two at most
        expected = seeded.api.admin("POST", "/admin/v1/reasoning/pathways/compare", {"pathway_ids": ids}, expect=200)
        comparison = expected.json()
        chart = page.locator(".compare svg[role='img']")
        assert chart.locator("polygon.radar-area").count() == 2
        assert (chart.locator("polygon.series-0 title").text_content() or "").endswith(f"({ids[0]})")
        assert (chart.locator("polygon.series-1 title").text_content() or "").endswith(f"({ids[1]})")
        assert comparison["dominant"] in ids  # the seeds differ: one of them dominates
        assert page.locator(".compare .dominant").get_attribute("data-dominant") == comparison["dominant"]
        assert comparison["dominant"] in page.locator(".dominant-pick").inner_text()
        assert page.locator(".dominant-reason").inner_text() == comparison["reasoning"]
        shown = page.locator(".deltas li").evaluate_all("d => d.map(x => [x.dataset.axis, Number(x.dataset.delta)])")
        assert shown == [[d["axis"], d["delta"]] for d in comparison["deltas"]]
        if order == (0, 1):
            screenshot(page, "research-compare")
            assert serious_violations(page) == []
        candidates.nth(order[0]).get_by_label("Compare").uncheck()
        assert page.locator(".compare .dominant").count() == 0
        assert not candidates.nth(2).get_by_label("Compare").is_disabled()
        candidates.nth(order[1]).get_by_label("Compare").uncheck()


def tab_to(page: Any, selector: str, limit: int = 60) -> None:
    """Press Tab until the element matching ``selector`` has the focus, and check the focus shows."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("s => document.activeElement?.matches(s)", selector):
            assert page.evaluate("document.activeElement.matches(':focus-visible')")
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_the_main_path_works_by_keyboard(page: Any, seeded: Seeded) -> None:
    open_console(page, seeded.server, "research")
    tab_to(page, "#trigger-ref")
    page.keyboard.type(TRIGGER["trigger_ref"])
    page.keyboard.press("Enter")
    page.wait_for_selector("li.candidate")
    tab_to(page, "li.candidate .radar-toggle")
    page.keyboard.press("Enter")
    assert page.locator("li.candidate .radar-toggle").first.get_attribute("aria-expanded") == "true"
    tab_to(page, "li.candidate .compare-pick")
    page.keyboard.press("Space")
    tab_to(page, "li.candidate:nth-child(2) .compare-pick")
    page.keyboard.press("Space")
    page.locator(".compare .dominant").wait_for()
    # Resolving by keyboard leaves the focus on the next claim (or the heading), not on the lost button.
    tab_to(page, "li.claim .resolve")
    claim_id = page.evaluate("document.activeElement.closest('li.claim').dataset.claimId")
    page.keyboard.press("Enter")
    page.wait_for_selector(f".resolved-strip li[data-claim-id='{claim_id}'][data-status='resolved']")
    assert page.evaluate("document.activeElement.closest('.claims-panel') !== null")


def test_at_phone_width_nothing_overflows(page: Any, seeded: Seeded) -> None:
    page.set_viewport_size(PHONE)
    open_console(page, seeded.server, f"research?{urlencode(TRIGGER)}")
    page.wait_for_selector("li.candidate")
    page.locator("li.candidate .radar-toggle").first.click()
    page.locator("li.candidate").nth(0).get_by_label("Compare").check()
    page.locator("li.candidate").nth(1).get_by_label("Compare").check()
    page.locator(".compare .dominant").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "research-phone")


def test_a_refused_trigger_says_why_without_a_trace(page: Any, seeded: Seeded) -> None:
    open_console(page, seeded.server, "research?trigger_type=user_question&trigger_ref=" + "x" * 300)
    assert page.locator(".results .problem").count() == 1
    assert "HTTP 4" in page.locator(".results .problem").inner_text()
    assert "Traceback" not in page.locator("main").inner_text()
