"""The console's landing page, the flows list, in Chromium against `flowledger serve`.

Flows are seeded as an agent writes them (bearer ``reasoning.write``), each test under a trigger type of
its own, so the session's shared server (where other tests write flows too) needs no store of its own:
a filter by that trigger type shows only this test's flows.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from flowledger.otlp.ingest import flow_id_of
from tests.browser.conftest import PHONE, READY, Api, open_console, screenshot, serious_violations
from tests.e2e.conftest import RunningServer

SIGV4 = "AWS4-HMAC-SHA256"


@pytest.fixture(scope="module")
def writer(api: Api) -> str:
    return api.token("agent-flows-list", ["reasoning.write"])


def kind() -> str:
    return f"list_{uuid.uuid4().hex[:10]}"


def seed(api: Api, token: str, trigger_type: str, summary: str, *, agent: str | None = None) -> str:
    body = {"trigger_type": trigger_type, "trigger_ref": "chat/run-1", "trigger_summary": summary}
    flow_id = str(api.bearer("POST", "/api/reasoning/flows", token, body, expect=201).json()["flow_id"])
    if agent:
        step = {"step_kind": "retrieval", "agent": agent, "summary_text": "Read the guidelines", "confidence": 0.9}
        api.bearer("POST", f"/api/reasoning/flows/{flow_id}/steps", token, step, expect=201)
    return flow_id


def close(api: Api, token: str, flow_id: str, state: str = "completed", outcome: str = "no_action") -> None:
    body = {"state": state, "outcome": {"type": outcome, "summary": "Nothing to do"}}
    api.bearer("PATCH", f"/api/reasoning/flows/{flow_id}", token, body, expect=200)


def listed(page: Any) -> list[str]:
    return list(page.locator("table.flow-list tbody tr").evaluate_all("rows => rows.map(r => r.dataset.flowId)"))


def is_list_call(response: Any) -> bool:
    return "/admin/v1/reasoning/flows?" in response.url


def test_the_landing_page_lists_the_newest_flows_with_a_link_to_each(
    page: Any, console_server: RunningServer, api: Api, writer: str
) -> None:
    mine = kind()
    first = seed(api, writer, mine, "Checked a lab trend", agent="researcher")
    close(api, writer, first, outcome="recommendation_delivered")
    second = seed(api, writer, mine, "Answered a billing question")
    close(api, writer, second, "aborted", "error")
    newest = seed(api, writer, mine, "Still looking into a dosage question")

    with page.expect_response(is_list_call) as call:
        open_console(page, console_server, "")  # /console/ is the flows list
    assert call.value.request.all_headers()["authorization"].startswith(SIGV4)
    assert page.title() == "Flows · Flowledger"
    assert listed(page)[:3] == [newest, second, first]  # nothing newer was written meanwhile

    row = page.locator(f"tr[data-flow-id='{first}']")
    cells = row.locator("td").all_inner_texts()
    assert cells[0].splitlines() == ["Checked a lab trend", f"SDK {mine}"]  # written through the API
    assert cells[1].splitlines() == ["researcher", "retrieval: Read the guidelines"]  # agents, first step
    assert (cells[2], cells[4]) == ("completed", "1")
    assert cells[3].startswith("recommendation_delivered")
    assert cells[6].endswith(("ms", "s", "min"))
    assert page.locator(f"tr[data-flow-id='{newest}'] td").nth(1).inner_text() == "no steps yet"
    assert page.locator(f"tr[data-flow-id='{newest}'] td").nth(6).inner_text() == "running"
    assert row.get_by_role("link").get_attribute("href") == f"/console/flows/{first}"
    # The trace search and the open-by-id field are still on the page.
    assert page.get_by_role("search", name="Flows by trace").is_visible()
    assert page.get_by_role("button", name="Open flow").is_visible()
    assert serious_violations(page) == []
    screenshot(page, "flows-list")


def test_an_otlp_trace_is_told_apart_by_its_service_agent_and_first_step(
    page: Any, console_server: RunningServer, api: Api, writer: str
) -> None:
    service = f"bot-{uuid.uuid4().hex[:8]}"
    trace_id = uuid.uuid4().hex
    span = {
        "traceId": trace_id,
        "spanId": "eee19b7ec3c1b174",
        "name": "execute_tool lookup_order",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000500000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.tool.name", "value": {"stringValue": "lookup_order"}},
        ],
    }
    spans = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [{"spans": [span]}],
            }
        ]
    }
    api.bearer("POST", "/api/otlp/v1/traces", writer, spans, expect=200)
    flow_id = flow_id_of(trace_id)

    open_console(page, console_server, "flows?trigger_type=otlp&limit=100")
    cells = page.locator(f"tr[data-flow-id='{flow_id}'] td").all_inner_texts()
    assert cells[0].splitlines() == [f"Trace from {service}", f"OTLP \u00b7 {service} otlp"]
    assert cells[1].splitlines() == [service, "tool call: Tool lookup_order"]
    assert serious_violations(page) == []


def test_filters_go_in_the_address_and_narrow_the_list(
    page: Any, console_server: RunningServer, api: Api, writer: str
) -> None:
    mine = kind()
    done = seed(api, writer, mine, "A finished question", agent="critic")
    close(api, writer, done)
    seed(api, writer, mine, "An open question", agent="researcher")
    open_console(page, console_server, "flows")

    page.get_by_label("Trigger type").fill(mine)
    page.get_by_label("State").select_option("completed")
    page.get_by_label("Agent").fill("critic")
    with page.expect_response(is_list_call) as call:
        page.get_by_role("button", name="Apply filters").click()
    page.wait_for_selector(READY)
    sent = parse_qs(urlsplit(call.value.url).query)
    assert (sent["trigger_type"], sent["state"], sent["agent"]) == ([mine], ["completed"], ["critic"])
    assert parse_qs(urlsplit(page.url).query) == {"trigger_type": [mine], "state": ["completed"], "agent": ["critic"]}
    assert listed(page) == [done]

    page.reload()  # the address holds the filters: the controls and the list come back the same
    page.wait_for_selector(READY)
    assert page.get_by_label("Trigger type").input_value() == mine
    assert page.get_by_label("State").input_value() == "completed"
    assert listed(page) == [done]

    page.get_by_role("link", name="Clear filters").click()
    page.wait_for_selector(READY)
    assert urlsplit(page.url).query == "" and page.get_by_label("Trigger type").input_value() == ""


def test_older_pages_through_an_empty_filtered_page(
    page: Any, console_server: RunningServer, api: Api, writer: str
) -> None:
    """One aborted flow, then eight newer open ones of the same type: a page of one reads eight index items,
    so the first page comes back empty, says the list goes on, and "Older" reaches the aborted flow."""
    mine = kind()
    aborted = seed(api, writer, mine, "Stopped early")
    close(api, writer, aborted, "aborted", "timeout")
    for n in range(8):
        seed(api, writer, mine, f"Open question {n}")
    open_console(page, console_server, f"flows?trigger_type={mine}&state=aborted&limit=10")
    assert listed(page) == [aborted]

    open_console(page, console_server, f"flows?trigger_type={mine}&state=aborted&limit=1")
    assert listed(page) == []
    assert "No flow on this page matches; older flows may." in page.locator("main").inner_text()
    for _ in range(3):  # the other tests' flows may stand between them too
        if listed(page):
            break
        page.get_by_role("link", name="Older").click()
        page.wait_for_selector(READY)
    assert listed(page) == [aborted]
    query = parse_qs(urlsplit(page.url).query)
    assert query["cursor"] and int(query["page"][0]) >= 2
    newest = urlsplit(page.get_by_role("link", name="Newest").get_attribute("href"))
    assert newest.path == "/console/flows"
    assert parse_qs(newest.query) == {"trigger_type": [mine], "state": ["aborted"], "limit": ["1"]}


def test_a_cursor_the_api_did_not_issue_is_refused_on_the_page(page: Any, console_server: RunningServer) -> None:
    open_console(page, console_server, "flows?cursor=bm90LWEtY3Vyc29y&page=2")
    assert "(HTTP 422)" in page.get_by_role("alert").inner_text()


def test_a_malformed_filter_is_refused_before_any_call(page: Any, console_server: RunningServer) -> None:
    calls: list[str] = []
    page.on("request", lambda request: calls.append(request.url) if "/admin/" in request.url else None)
    open_console(page, console_server, "flows?trigger_type=Not%20A%20Name")
    assert "Lower-case letters" in page.locator("#filter-trigger-type-error").inner_text()
    assert calls == []
    page.get_by_label("Trigger type").fill("")
    page.get_by_label("Agent").fill("Bad Agent")
    page.get_by_role("button", name="Apply filters").click()
    assert page.evaluate("document.activeElement.id") == "filter-agent"
    assert calls == [] and "agent=" not in page.url


def test_the_list_fits_a_phone(page: Any, console_server: RunningServer, api: Api, writer: str) -> None:
    mine = kind()
    seed(api, writer, mine, "A question asked on a phone")
    page.set_viewport_size(PHONE)
    open_console(page, console_server, f"flows?trigger_type={mine}")
    assert len(listed(page)) == 1
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "flows-list-phone")
