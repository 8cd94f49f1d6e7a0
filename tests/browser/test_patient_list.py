"""A patient's "My explanations" list and the nav a patient sees, in Chromium against `flowledger serve`.

Flows are seeded as an agent writes them; each test reads as a patient of its own (a token in the tab's
session storage, as the profile page's token field stores it), so the shared server's other patients
never show. The nav is checked for a patient-only console (a config.json with a patient token and no
operator credentials, as a page opened from another host gets) and for Cognito sign-ins, whose id
token's claims say who is signed in.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

import pytest

from tests.browser.conftest import READY, Api, open_console, screenshot, serious_violations
from tests.e2e.conftest import RunningServer

STORAGE_KEY = "flowledger.patientToken"
COGNITO_TOKENS = "flowledger.cognito.tokens"
SAFE = "A question about a recent lab result"
UNSAFE = "Reviewed metformin 500mg dosing"  # the guard refuses it: the patient never sees it
OPERATOR_LINKS = ["Flows", "Research", "Pathways"]
PATIENT_LINKS = ["My explanations", "Explanation settings"]


@pytest.fixture(scope="module")
def writer(api: Api) -> str:
    return api.token("agent-patient-list", ["reasoning.write"])


def someone() -> str:
    return f"p-list-{uuid.uuid4().hex[:8]}"


def patient_token(api: Api, patient_id: str) -> str:
    return api.token(f"u-{patient_id}", ["reasoning.read"], patient_id=patient_id)


def seed(api: Api, token: str, patient_id: str, summary: str, *, close: bool = True) -> str:
    body = {"trigger_type": "user_question", "trigger_ref": "chat/1", "trigger_summary": summary}
    body["patient_id"] = patient_id
    flow_id = str(api.bearer("POST", "/api/reasoning/flows", token, body, expect=201).json()["flow_id"])
    if not close:
        return flow_id
    step = {"step_kind": "retrieval", "agent": "researcher", "summary_text": "Read the guidelines", "confidence": 0.9}
    api.bearer("POST", f"/api/reasoning/flows/{flow_id}/steps", token, step, expect=201)
    if close:
        done = {"state": "completed", "outcome": {"type": "recommendation_delivered", "summary": "See your team"}}
        api.bearer("PATCH", f"/api/reasoning/flows/{flow_id}", token, done, expect=200)
    return flow_id


def opt_in(api: Api, patient_id: str) -> None:
    api.bearer("PUT", "/api/reasoning/consent", patient_token(api, patient_id), {"reasoning_read": True}, expect=200)


def as_patient(page: Any, api: Api, patient_id: str) -> None:
    token = json.dumps(patient_token(api, patient_id))
    page.add_init_script(f"sessionStorage.setItem({json.dumps(STORAGE_KEY)}, {token})")


def nav_links(page: Any) -> list[str]:
    nav = page.get_by_role("navigation", name="Console sections")
    return [link.inner_text() for link in nav.get_by_role("link").all()]


def test_my_explanations_lists_my_flows_newest_first_and_opens_one(
    page: Any, console_server: RunningServer, api: Api, writer: str
) -> None:
    me, neighbour = someone(), someone()
    readable = seed(api, writer, me, SAFE)
    refused = seed(api, writer, me, UNSAFE)
    running = seed(api, writer, me, "A question still being looked into", close=False)
    seed(api, writer, neighbour, "A neighbour's question")
    opt_in(api, me)
    as_patient(page, api, me)
    open_console(page, console_server, "patient/flows")

    assert page.title() == "My explanations · Flowledger"
    items = page.locator("ol.patient-list > li")
    assert items.count() == 3
    hrefs = [items.nth(n).get_by_role("link").get_attribute("href") for n in range(3)]
    assert hrefs == [f"/console/patient/flows/{f}" for f in (running, refused, readable)]
    texts = [items.nth(n).inner_text() for n in range(3)]
    assert texts[0].startswith("Still in progress") and "In progress" in texts[0]
    assert texts[1].startswith("Ask your care team about this one")
    assert texts[2].startswith(SAFE) and "Ready to read" in texts[2]
    html = page.content()
    assert "metformin" not in html and "neighbour" not in html and "fl_" not in page.locator("main").inner_text()
    assert serious_violations(page) == []
    screenshot(page, "patient-list")

    items.nth(2).get_by_role("link").click()
    page.wait_for_url(f"**/console/patient/flows/{readable}")
    page.wait_for_selector(READY)
    assert page.get_by_role("heading", name="How the system got there").is_visible()


def test_older_explanations_page_on_and_back(page: Any, console_server: RunningServer, api: Api, writer: str) -> None:
    me = someone()
    oldest = seed(api, writer, me, "The first question", close=False)
    for n in range(20):  # a page holds 20
        seed(api, writer, me, f"Question {n}", close=False)
    opt_in(api, me)
    as_patient(page, api, me)
    open_console(page, console_server, "patient/flows")
    assert page.locator("ol.patient-list > li").count() == 20
    page.get_by_role("link", name="Older explanations").click()
    page.wait_for_selector(READY)
    assert "cursor=" in page.url
    links = page.locator("ol.patient-list > li a")
    assert [links.nth(0).get_attribute("href")] == [f"/console/patient/flows/{oldest}"] and links.count() == 1
    assert page.get_by_role("link", name="Older explanations").count() == 0
    page.get_by_role("link", name="Newest explanations").click()
    page.wait_for_selector(READY)
    assert page.locator("ol.patient-list > li").count() == 20


def test_my_explanations_asks_to_turn_them_on_first(page: Any, console_server: RunningServer, api: Api) -> None:
    me = someone()
    as_patient(page, api, me)
    open_console(page, console_server, "patient/flows")
    assert page.get_by_role("heading", name="Explanations are turned off").is_visible()
    link = page.get_by_role("link", name="Turn on explanations on your profile page")
    assert link.get_attribute("href") == "/console/patient"


def test_a_patient_sees_only_their_own_links_and_lands_on_their_explanations(
    page: Any, console_server: RunningServer, api: Api
) -> None:
    me = someone()
    opt_in(api, me)
    config = {"mode": "local", "api_base": "", "region": "us-east-1", "patient_token": patient_token(api, me)}
    page.route(f"{console_server.base_url}/console/config.json", lambda route: route.fulfill(json=config))
    open_console(page, console_server, "")
    assert page.evaluate("location.pathname") == "/console/patient/flows"
    assert nav_links(page) == PATIENT_LINKS
    current = page.locator("header nav a[aria-current='page']")
    assert current.inner_text() == "My explanations"
    assert serious_violations(page) == []


def test_an_operator_on_loopback_sees_every_link(page: Any, console_server: RunningServer) -> None:
    open_console(page, console_server, "flows")
    assert nav_links(page) == ["Chat", *OPERATOR_LINKS, *PATIENT_LINKS]


def fake_id_token(claims: dict[str, Any]) -> str:
    """An unsigned JWT: the nav reads its claims; the API would refuse it (it verifies signatures)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


@pytest.mark.parametrize(
    ("claims", "links"),
    [
        ({"cognito:groups": ["patients"], "scope": "reasoning.read", "patient_id": "p-1"}, PATIENT_LINKS),
        ({"cognito:groups": ["operators"]}, OPERATOR_LINKS),
        ({"cognito:groups": ["chat-users"], "scope": "chat documents"}, ["Chat"]),
        (None, []),  # nobody signed in yet
    ],
    ids=["patient", "operator", "chat_user", "signed_out"],
)
def test_a_cognito_sign_in_shows_the_links_its_groups_give(
    page: Any, console_server: RunningServer, claims: dict[str, Any] | None, links: list[str]
) -> None:
    config = {"mode": "cognito", "api_base": "", "region": "us-east-1", "cognito": {}}
    page.route(f"{console_server.base_url}/console/config.json", lambda route: route.fulfill(json=config))
    if claims:
        stored = {"idToken": fake_id_token(claims), "refreshToken": "r", "renewAt": (time.time() + 3600) * 1000}
        page.add_init_script(f"sessionStorage.setItem({json.dumps(COGNITO_TOKENS)}, {json.dumps(json.dumps(stored))})")
    open_console(page, console_server, "no-such-page")
    assert nav_links(page) == links
