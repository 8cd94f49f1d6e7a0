"""The patient pages in Chromium against `flowledger serve`: the narrative, its 202 and 403 states, the consent toggle.

Flows are seeded over the API as an agent writes them (a ``reasoning.write`` token: open, ``steps:batch``,
close); what a patient's action changed is checked over the API with a patient token, not on the page.
The module runs a server of its own: the consent of ``patient-demo`` (the patient of the token the dev
server hands a loopback page) is state no other test should see or change. Every other test reads as a
patient of its own (a token put in the tab's session storage, as the profile page's token field does),
so no patient passes the narrative route's 30 reads per 5 minutes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import PHONE, READY, Api, open_console, screenshot, serious_violations
from tests.e2e.conftest import RunningServer, launch_server

DEMO = "patient-demo"
WRITER = "agent-patient-pages"
# Distinct kinds of evidence and confident agents: a radar with every axis above zero.
SAFE_STEPS = [
    ("retrieval", "researcher", "Looked up the clinical guidelines for this question", 0.95),
    ("llm_prompt", "researcher", "Drafted an answer from those guidelines", 0.93),
    ("verdict", "critic", "Checked that the answer is well supported", 0.97),
]
TRIGGER = "A question about a recent lab result"
OUTCOME = "Suggested a follow-up test with your care team"
# The radar's internal axis names; the patient sees the audience labels the API sends instead.
INTERNAL_AXES = ("Coverage", "Consensus", "Risk", "Maturity", "Recency")
AUDIENCE_LABELS = (
    "Confidence",
    "Evidence breadth",
    "Established practice",
    "Freshness",
    "Care team agreement",
    "Caution flags",
)
STORAGE_KEY = "flowledger.patientToken"  # where api.js keeps a tab's own patient token


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = launch_server(tmp_path_factory.mktemp("patient-pages") / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def seed(server: RunningServer) -> Api:
    return Api(server)


# ---- seeding over the API ----------------------------------------------------------------------------


def writer(api: Api) -> str:
    return api.token(WRITER, ["reasoning.write"])


def patient(api: Api, patient_id: str) -> str:
    return api.token(f"u-{patient_id}", ["reasoning.read"], patient_id=patient_id)


def open_flow(
    api: Api, patient_id: str, steps: list[tuple[str, str, str, float | None]], trigger: str = TRIGGER
) -> str:
    token = writer(api)
    flow = api.bearer(
        "POST",
        "/api/reasoning/flows",
        token,
        {
            "trigger_type": "user_question",
            "trigger_ref": "chat/run-1",
            "trigger_summary": trigger,
            "patient_id": patient_id,
        },
        expect=201,
    ).json()
    add_steps(api, flow["flow_id"], steps)
    return str(flow["flow_id"])


def add_steps(api: Api, flow_id: str, steps: list[tuple[str, str, str, float | None]]) -> None:
    body = {
        "steps": [
            {"step_kind": kind, "agent": agent, "summary_text": text, "confidence": confidence}
            for kind, agent, text, confidence in steps
        ]
    }
    api.bearer("POST", f"/api/reasoning/flows/{flow_id}/steps:batch", writer(api), body, expect=201)


def close(api: Api, flow_id: str) -> dict[str, Any]:
    outcome = {"type": "recommendation_delivered", "summary": OUTCOME, "confidence": 0.94}
    body = {"state": "completed", "outcome": outcome}
    return dict(api.bearer("PATCH", f"/api/reasoning/flows/{flow_id}", writer(api), body, expect=200).json())


def closed_flow(api: Api, patient_id: str, steps: list[tuple[str, str, str, float]] = SAFE_STEPS) -> str:
    flow_id = open_flow(api, patient_id, steps)
    close(api, flow_id)
    return flow_id


def opt_in(api: Api, patient_id: str, on: bool = True) -> None:
    api.bearer("PUT", "/api/reasoning/consent", patient(api, patient_id), {"reasoning_read": on}, expect=200)


def stored_consent(api: Api, patient_id: str) -> bool:
    answer = api.bearer("GET", "/api/reasoning/consent", patient(api, patient_id), expect=200).json()
    return bool(answer["reasoning_read"])


def narrative_status(api: Api, patient_id: str, flow_id: str) -> tuple[int, str | None]:
    response = api.bearer("GET", f"/api/reasoning/flows/{flow_id}", patient(api, patient_id))
    return response.status_code, response.json().get("error")


def narrative_radar(api: Api, patient_id: str, flow_id: str) -> list[dict[str, Any]]:
    answer = api.bearer("GET", f"/api/reasoning/flows/{flow_id}", patient(api, patient_id), expect=200).json()
    return list(answer["radar"])


# ---- the page -----------------------------------------------------------------------------------------


def as_patient(page: Any, api: Api, patient_id: str) -> None:
    """This tab reads as ``patient_id`` (what "Use another sign-in token" on the profile page stores)."""
    page.add_init_script(f"sessionStorage.setItem({json.dumps(STORAGE_KEY)}, {json.dumps(patient(api, patient_id))})")


def main_text(page: Any) -> str:
    return str(page.locator("main").inner_text())


def tab_to(page: Any, selector: str, limit: int = 25) -> None:
    """Press Tab until ``selector`` has the focus, and check the focus is visible there."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement?.matches(s) ?? false", selector):
            assert page.evaluate("() => document.activeElement.matches(':focus-visible')")
            return
    pytest.fail(f"{selector} never took the focus by Tab")


def no_horizontal_overflow(page: Any) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


# ---- tests --------------------------------------------------------------------------------------------


def test_consent_round_trip_through_the_profile_page(page: Any, server: RunningServer, seed: Api) -> None:
    """The demo patient (the dev server's own sign-in): refused, opts in by keyboard, reads, opts out again."""
    flow_id = closed_flow(seed, DEMO)
    assert not stored_consent(seed, DEMO)

    open_console(page, server, f"patient/flows/{flow_id}")
    assert page.get_by_role("heading", name="Explanations are turned off").is_visible()
    link = page.get_by_role("link", name="Turn on explanations on your profile page")
    assert link.get_attribute("href") == "/console/patient"
    link.click()
    page.wait_for_selector(READY)
    assert page.evaluate("location.pathname") == "/console/patient"
    assert page.title() == "Explanation settings · Flowledger"
    toggle = page.get_by_role("checkbox", name="Let me read explanations")
    assert not toggle.is_checked()

    tab_to(page, "#consent")
    page.keyboard.press("Space")
    status = page.locator("#consent-status")
    status.filter(has_text="Saved: explanations are on.").wait_for()
    assert stored_consent(seed, DEMO)
    assert narrative_status(seed, DEMO, flow_id) == (200, None)
    assert serious_violations(page) == []
    screenshot(page, "patient-profile")

    page.reload()
    page.wait_for_selector(READY)
    assert page.get_by_role("checkbox", name="Let me read explanations").is_checked()

    page.get_by_role("checkbox", name="Let me read explanations").click()
    status.filter(has_text="Saved: explanations are off.").wait_for()
    assert not stored_consent(seed, DEMO)
    assert narrative_status(seed, DEMO, flow_id) == (403, "consent_required")
    page.reload()
    page.wait_for_selector(READY)
    assert not page.get_by_role("checkbox", name="Let me read explanations").is_checked()


def test_a_closed_flow_reads_as_a_plain_narrative_with_the_audience_radar(
    page: Any, server: RunningServer, seed: Api
) -> None:
    flow_id = closed_flow(seed, "p-reader")
    opt_in(seed, "p-reader")
    as_patient(page, seed, "p-reader")
    open_console(page, server, f"patient/flows/{flow_id}")

    assert page.title() == "Your explanation · Flowledger"
    assert page.locator("h1").count() == 1
    text = main_text(page)
    assert TRIGGER in text and OUTCOME in text
    assert "It is not medical advice" in text
    steps = page.locator("ol.patient-steps > li")
    assert steps.count() == len(SAFE_STEPS)
    for n, (_, agent, summary, _) in enumerate(SAFE_STEPS):
        item = steps.nth(n)
        assert agent.title() in item.inner_text() and summary in item.inner_text()
        assert item.locator("time").get_attribute("datetime")
        assert item.locator("time").inner_text().strip()

    radar = page.locator("main svg[role='img']")
    assert radar.count() == 1
    label = radar.get_attribute("aria-label")
    assert all(name in label for name in AUDIENCE_LABELS), label
    vertex_titles = radar.evaluate("svg => [...svg.querySelectorAll('circle > title')].map(t => t.textContent)")
    # A vertex for each rated axis (a fresh server has no pathway snapshot: its family's axes are not rated).
    sent = narrative_radar(seed, "p-reader", flow_id)
    assert [t.split(":")[0] for t in vertex_titles] == [a["label"] for a in sent if a["score"] is not None]
    assert [a["label"] for a in sent] == list(AUDIENCE_LABELS)
    for name in ("Evidence breadth", "Care team agreement", "Caution flags"):
        assert page.locator("main dl.patient-axes dt", has_text=name).is_visible()
    # No internal name anywhere a patient (or a screen reader) meets it: the text, the chart, its tooltips.
    svg_words = radar.evaluate("svg => svg.textContent + ' ' + svg.getAttribute('aria-label')")
    for internal in INTERNAL_AXES:
        assert not re.search(rf"\b{internal}\b", text + svg_words, re.I), internal
    assert flow_id not in text and "fl_" not in text

    assert serious_violations(page) == []
    screenshot(page, "patient-narrative")

    tab_to(page, "main a[href='/console/patient/flows']")
    page.keyboard.press("Enter")
    page.wait_for_url("**/console/patient/flows")
    page.wait_for_selector(READY)
    assert page.get_by_role("heading", name="My explanations", level=1).is_visible()


def test_an_active_flow_shows_the_banner_then_the_narrative_without_a_reload(
    page: Any, server: RunningServer, seed: Api
) -> None:
    flow_id = open_flow(seed, "p-waiting", SAFE_STEPS[:2])
    opt_in(seed, "p-waiting")
    as_patient(page, seed, "p-waiting")
    open_console(page, server, f"patient/flows/{flow_id}")

    banner = page.get_by_role("status").filter(has_text="We're still working on this")
    assert banner.is_visible()
    assert "2 steps so far" in banner.inner_text()
    assert serious_violations(page) == []
    screenshot(page, "patient-in-progress")
    page.evaluate("window.__sameDocument = true")  # gone if the page reloaded

    add_steps(seed, flow_id, SAFE_STEPS[2:])
    page.get_by_text("3 steps so far").wait_for(timeout=30_000)
    close(seed, flow_id)
    page.get_by_role("heading", name="How the system got there").wait_for(timeout=30_000)
    assert page.evaluate("window.__sameDocument === true")
    assert page.locator("ol.patient-steps > li").count() == len(SAFE_STEPS)
    assert OUTCOME in main_text(page)
    assert not page.get_by_text("We're still working on this").is_visible()


def test_a_flow_without_a_patient_safe_summary_asks_for_the_care_team(
    page: Any, server: RunningServer, seed: Api
) -> None:
    flow_id = closed_flow(seed, "p-careteam", [("retrieval", "researcher", "Reviewed metformin 500mg", 0.95)])
    opt_in(seed, "p-careteam")
    assert narrative_status(seed, "p-careteam", flow_id) == (403, "ask_care_team")
    as_patient(page, seed, "p-careteam")
    open_console(page, server, f"patient/flows/{flow_id}")

    assert page.get_by_role("heading", name="Please ask your care team").is_visible()
    text = main_text(page)
    assert "metformin" not in text and TRIGGER not in text
    assert "opt in" not in text.lower() and "HTTP" not in text
    assert serious_violations(page) == []
    screenshot(page, "patient-ask-care-team")


def test_another_patients_flow_is_refused_gently(page: Any, server: RunningServer, seed: Api) -> None:
    secret = "A question about a neighbour's scan"
    flow_id = open_flow(seed, "p-owner", SAFE_STEPS, trigger=secret)
    close(seed, flow_id)
    for someone in ("p-owner", "p-intruder"):
        opt_in(seed, someone)
    assert narrative_status(seed, "p-intruder", flow_id) == (403, "forbidden")
    as_patient(page, seed, "p-intruder")
    open_console(page, server, f"patient/flows/{flow_id}")

    assert page.get_by_role("heading", name="Please ask your care team").is_visible()
    assert "not available to you" in main_text(page)
    assert secret not in page.content()


def test_an_unknown_explanation_says_it_was_not_found(page: Any, server: RunningServer, seed: Api) -> None:
    opt_in(seed, "p-lost")
    as_patient(page, seed, "p-lost")
    open_console(page, server, "patient/flows/fl_01JZ0000000000000000000000")
    assert page.get_by_role("heading", name="We could not find this explanation").is_visible()


def test_the_profile_opens_an_explanation_by_number_as_another_sign_in(
    page: Any, server: RunningServer, seed: Api
) -> None:
    flow_id = closed_flow(seed, "p-other")
    opt_in(seed, "p-other")
    open_console(page, server, "patient")
    assert not page.get_by_role("checkbox", name="Let me read explanations").is_checked()  # the demo patient

    page.get_by_text("Use another sign-in token").click()
    page.get_by_label("Sign-in token").fill(patient(seed, "p-other"))
    page.get_by_role("button", name="Use this token").click()
    page.wait_for_load_state()
    page.wait_for_selector(READY)
    assert page.get_by_role("checkbox", name="Let me read explanations").is_checked()  # p-other opted in

    page.get_by_label("Explanation number").fill(flow_id)
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/console/patient/flows/{flow_id}")
    page.wait_for_selector(READY)
    assert page.get_by_role("heading", name="How the system got there").is_visible()
    assert TRIGGER in main_text(page)


def test_the_patient_pages_fit_a_phone(page: Any, server: RunningServer, seed: Api) -> None:
    flow_id = closed_flow(seed, "p-phone")
    opt_in(seed, "p-phone")
    as_patient(page, seed, "p-phone")
    page.set_viewport_size(PHONE)
    open_console(page, server, f"patient/flows/{flow_id}")
    assert page.locator("main svg[role='img']").is_visible()
    no_horizontal_overflow(page)
    screenshot(page, "patient-phone")
    open_console(page, server, "patient")
    page.get_by_text("Use another sign-in token").click()
    no_horizontal_overflow(page)


def test_axes_without_data_read_not_rated_never_low_or_high(page: Any, server: RunningServer, seed: Api) -> None:
    """A chat turn whose steps and outcome carry no confidence: no "Confidence low", no "Caution flags high"."""
    steps = [
        ("retrieval", "chat", "Looked up the clinical guidelines", None),
        ("llm_prompt", "chat", "Drafted an answer", None),
    ]
    flow_id = open_flow(seed, "p-unrated", steps)
    body = {"state": "completed", "outcome": {"type": "recommendation_delivered", "summary": OUTCOME}}
    seed.bearer("PATCH", f"/api/reasoning/flows/{flow_id}", writer(seed), body, expect=200)
    opt_in(seed, "p-unrated")
    as_patient(page, seed, "p-unrated")
    open_console(page, server, f"patient/flows/{flow_id}")

    axes = page.locator("main dl.patient-axes > div")
    said = {axes.nth(n).locator("dt").inner_text(): axes.nth(n).locator("dd").inner_text() for n in range(axes.count())}
    for name in ("Confidence", "Caution flags", "Care team agreement", "Established practice", "Freshness"):
        assert said[name] == "not rated", (name, said)
    assert said["Evidence breadth"] == "medium (3 of 7)"  # two kinds of evidence were recorded: rated
    radar = page.locator("main svg[role='img']")
    label = radar.get_attribute("aria-label")
    assert "Confidence not rated" in label and "Caution flags not rated" in label, label
    assert not re.search(r"Confidence (low|medium|high)|Caution flags (low|medium|high)", label + main_text(page))
    vertex_titles = radar.evaluate("svg => [...svg.querySelectorAll('circle > title')].map(t => t.textContent)")
    assert vertex_titles == ["Evidence breadth: medium (3 of 7)"]  # no vertex drawn at the centre as a 0
    assert radar.locator("line.radar-spoke.not-rated").count() == 5
    assert serious_violations(page) == []
