"""The trace search and the flow page in Chromium, against `flowledger serve`.

Flows are seeded as an agent writes them (bearer ``reasoning.write``: open, steps in batches, close);
the pages read them back with SigV4-signed admin calls made in the browser. Each trace id is new per
run, so the session's shared server needs no store of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from flowledger.ids import new_id
from tests.browser.conftest import PHONE, READY, Api, open_console, screenshot, serious_violations
from tests.e2e.conftest import RunningServer

BATCH = 49  # steps:batch takes at most 49 steps (one DynamoDB transaction)
SIGV4 = "AWS4-HMAC-SHA256"


@dataclass
class Seeded:
    flow_id: str
    trace_id: str
    steps: list[dict[str, Any]] = field(default_factory=list)

    def step_id(self, index: int) -> str:
        return str(self.steps[index]["step_id"])


def step(kind: str, agent: str, summary: str, parents: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "step_id": new_id("st_"),
        "step_kind": kind,
        "agent": agent,
        "summary_text": summary,
        "parent_step_ids": parents or [],
        **extra,
    }


def seed_flow(
    api: Api,
    token: str,
    *,
    trace_id: str,
    ref: str,
    steps: Sequence[dict[str, Any]] = (),
    patient_id: str | None = None,
    close: dict[str, Any] | None = None,
) -> Seeded:
    """Open a flow, record ``steps`` in batches (a parent may be an earlier step), close it if asked."""
    body = {
        "trigger_type": "lab_result",
        "trigger_ref": ref,
        "trigger_summary": f"New lab result {ref}",
        "trace_id": trace_id,
    }
    if patient_id:
        body["patient_id"] = patient_id
    flow_id = api.bearer("POST", "/api/reasoning/flows", token, body, expect=201).json()["flow_id"]
    for start in range(0, len(steps), BATCH):
        batch = {"steps": list(steps[start : start + BATCH])}
        api.bearer("POST", f"/api/reasoning/flows/{flow_id}/steps:batch", token, batch, expect=201)
    if close:
        api.bearer("PATCH", f"/api/reasoning/flows/{flow_id}", token, close, expect=200)
    return Seeded(flow_id, trace_id, list(steps))


def fan_in_steps(groups: int) -> list[dict[str, Any]]:
    """``groups`` x (plan -> three retrievals -> synthesis of all three), each plan after the last synthesis."""
    steps: list[dict[str, Any]] = []
    previous: str | None = None
    for g in range(groups):
        plan = step("planning", "planner", f"Plan round {g}", [previous] if previous else [])
        found = [
            step("retrieval", "researcher", f"Passages {g}.{k}", [plan["step_id"]], confidence=0.8) for k in range(3)
        ]
        synthesis = step("synthesis", "writer", f"Synthesis of round {g}", [f["step_id"] for f in found])
        steps += [plan, *found, synthesis]
        previous = synthesis["step_id"]
    return steps


def edge_count(steps: list[dict[str, Any]]) -> int:
    return sum(len(set(s["parent_step_ids"])) for s in steps)


@pytest.fixture(scope="module")
def writer(api: Api) -> str:
    return api.token("agent-console-tests", ["reasoning.write"])


@pytest.fixture(scope="module")
def traces(api: Api, writer: str) -> dict[str, list[Seeded]]:
    """Trace A holds three flows (two pages of two), trace B one."""
    a, b = f"trace-a-{uuid.uuid4().hex[:8]}", f"trace-b-{uuid.uuid4().hex[:8]}"
    return {
        "a": [seed_flow(api, writer, trace_id=a, ref=f"lab/a{n}") for n in range(3)],
        "b": [seed_flow(api, writer, trace_id=b, ref="lab/b0")],
    }


@pytest.fixture(scope="module")
def small_flow(api: Api, writer: str) -> Seeded:
    """Two retrievals, a synthesis of both (two parents), a review; closed with an outcome."""
    first = step("retrieval", "researcher", "Found the potassium guideline", latency_ms=12, confidence=0.9)
    second = step("retrieval", "researcher", "Found the patient's last three results")
    synthesis = step(
        "synthesis",
        "clinician",
        "Potassium is trending up over three results",
        [first["step_id"], second["step_id"]],
        latency_ms=250,
        confidence=0.73,
        back_refs={"llm_call_log_ref": "llm-call/7781"},
    )
    review = step("review", "auditor", "Checked the synthesis against the guideline", [synthesis["step_id"]])
    close = {
        "state": "completed",
        "outcome": {"type": "recommendation_delivered", "summary": "Repeat the potassium test", "confidence": 0.8},
    }
    return seed_flow(
        api,
        writer,
        trace_id=f"trace-s-{uuid.uuid4().hex[:8]}",
        ref="lab/k-1",
        steps=[first, second, synthesis, review],
        patient_id="patient-4711",
        close=close,
    )


@pytest.fixture(scope="module")
def big_flow(api: Api, writer: str) -> Seeded:
    return seed_flow(api, writer, trace_id=f"trace-big-{uuid.uuid4().hex[:8]}", ref="lab/big", steps=fan_in_steps(100))


def is_flows_listing(response: Any) -> bool:
    return "/admin/v1/reasoning/flows?" in response.url


def is_flow_read(flow_id: str) -> Callable[[Any], bool]:
    return lambda response: response.url.endswith(f"/admin/v1/reasoning/flows/{flow_id}")


def assert_signed_ok(response: Any) -> None:
    assert response.status == 200
    assert response.request.all_headers()["authorization"].startswith(SIGV4)


def listed_flows(page: Any) -> list[str]:
    return list(page.locator("tbody tr[data-flow-id]").evaluate_all("rows => rows.map(r => r.dataset.flowId)"))


def tab_to(page: Any, predicate: str, limit: int = 40) -> None:
    """Press Tab until ``predicate`` (JS, of the focused element ``e``) holds."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate(f"(e => !!e && ({predicate}))(document.activeElement)"):
            return
    raise AssertionError(f"Tab never reached an element where {predicate}")


def test_trace_search_lists_one_traces_flows_page_by_page(
    page: Any, console_server: RunningServer, traces: dict[str, list[Seeded]]
) -> None:
    trace_a = traces["a"][0].trace_id
    open_console(page, console_server, "flows?limit=2")
    tab_to(page, "e.id === 'trace-id'")
    page.keyboard.type(trace_a)
    with page.expect_response(is_flows_listing) as listing:
        page.keyboard.press("Enter")
    assert_signed_ok(listing.value)
    page.wait_for_selector(READY)
    assert f"trace_id={trace_a}" in page.url

    first = listed_flows(page)
    assert first == [f.flow_id for f in traces["a"][:2]]  # oldest first, two a page
    assert traces["b"][0].flow_id not in first
    link = page.locator(f"a[href='/console/flows/{first[0]}']")
    assert link.is_visible()
    screenshot(page, "flow-search")
    assert serious_violations(page) == []

    with page.expect_response(is_flows_listing) as listing:
        page.get_by_role("link", name="Next page").click()
    assert "cursor=" in listing.value.url
    page.wait_for_selector(READY)
    assert listed_flows(page) == [traces["a"][2].flow_id]
    assert page.get_by_role("link", name="Next page").count() == 0
    assert page.locator("[aria-label='Result pages']").inner_text().startswith("Page 2")

    # The address holds the search: a reload (or a shared link) shows the same page.
    page.reload()
    page.wait_for_selector(READY)
    assert listed_flows(page) == [traces["a"][2].flow_id]
    assert page.locator("#trace-id").input_value() == trace_a


def test_trace_search_shows_only_the_other_traces_flow(
    page: Any, console_server: RunningServer, traces: dict[str, list[Seeded]]
) -> None:
    open_console(page, console_server, f"flows?trace_id={traces['b'][0].trace_id}")
    assert listed_flows(page) == [traces["b"][0].flow_id]
    row = page.locator(f"tr[data-flow-id='{traces['b'][0].flow_id}']").inner_text()
    assert "lab_result" in row and "lab/b0" in row and "active" in row


def test_malformed_ids_are_refused_in_the_page_before_any_call(page: Any, console_server: RunningServer) -> None:
    calls: list[str] = []
    open_console(page, console_server, "flows")  # the landing page lists flows: calls counted from here
    page.on("request", lambda request: calls.append(request.url) if "/admin/" in request.url else None)
    start = page.url

    page.get_by_role("button", name="Search").click()
    assert page.locator("#trace-id-error").inner_text() == "Enter a trace id."
    page.locator("#trace-id").fill("bad id!")
    page.get_by_role("button", name="Search").click()
    assert "only letters, digits" in page.locator("#trace-id-error").inner_text()
    assert page.locator("#trace-id").get_attribute("aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "trace-id"

    page.locator("#flow-id").fill("fl_nope")
    page.get_by_role("button", name="Open flow").click()
    assert "fl_ followed by 26" in page.locator("#flow-id-error").inner_text()
    assert page.url == start and calls == []

    # A malformed trace id in the address is refused the same way.
    open_console(page, console_server, "flows?trace_id=has%20space")
    assert "only letters, digits" in page.locator("#trace-id-error").inner_text()
    assert calls == []


def test_open_flow_by_id_goes_to_its_page(page: Any, console_server: RunningServer, small_flow: Seeded) -> None:
    open_console(page, console_server, "flows")
    page.locator("#flow-id").fill(small_flow.flow_id.lower())  # a pasted id in lower case is accepted
    page.get_by_role("button", name="Open flow").click()
    page.wait_for_url(f"**/console/flows/{small_flow.flow_id}")
    page.wait_for_selector(READY)
    assert page.locator("h1").inner_text() == f"Flow {small_flow.flow_id}"


def test_flow_page_shows_the_metadata_and_the_dag(page: Any, console_server: RunningServer, small_flow: Seeded) -> None:
    with page.expect_response(is_flow_read(small_flow.flow_id)) as read:
        open_console(page, console_server, f"flows/{small_flow.flow_id}")
    assert_signed_ok(read.value)
    assert page.title() == f"Flow {small_flow.flow_id} · Flowledger"
    assert page.locator("h1").count() == 1

    def value(name: str) -> str:
        return str(page.locator(f"dl.grid [data-field='{name}'] dd").first.inner_text())

    assert value("trigger_type") == "lab_result"
    assert value("trigger_ref") == "lab/k-1"
    assert value("patient_id") == "patient-4711"
    assert value("flow_state") == "completed"
    assert value("outcome") == "recommendation_delivered: Repeat the potassium test (confidence 0.80)"
    assert value("step_count") == "4"
    assert value("closed_at") != "—" and value("duration") not in ("", "still active")
    trace = page.locator("[data-field='trace_id'] a")
    assert trace.inner_text() == small_flow.trace_id
    assert trace.get_attribute("href") == f"/console/flows?trace_id={small_flow.trace_id}"

    nodes = page.locator(".dag svg [data-step-id]")
    assert sorted(nodes.evaluate_all("ns => ns.map(n => n.dataset.stepId)")) == sorted(
        s["step_id"] for s in small_flow.steps
    )
    synthesis = small_flow.step_id(2)
    into_synthesis = page.locator(f".dag svg path.edge[data-to='{synthesis}']")
    assert into_synthesis.count() == 2
    assert sorted(into_synthesis.evaluate_all("es => es.map(e => e.dataset.from)")) == sorted(
        [small_flow.step_id(0), small_flow.step_id(1)]
    )
    assert into_synthesis.first.get_attribute("marker-end") == "url(#dag-arrow)"
    assert page.locator(".dag svg marker#dag-arrow").count() == 1
    assert page.locator(".dag svg path.edge").count() == edge_count(small_flow.steps) == 3
    assert page.locator("table [data-step-row]").count() == 4
    screenshot(page, "flow-page")
    assert serious_violations(page) == []


def test_selecting_a_node_by_keyboard_shows_its_details(
    page: Any, console_server: RunningServer, small_flow: Seeded
) -> None:
    open_console(page, console_server, f"flows/{small_flow.flow_id}")
    synthesis, review = small_flow.step_id(2), small_flow.step_id(3)
    tab_to(page, f"e.dataset.stepId === '{synthesis}'")
    assert page.evaluate("document.activeElement.matches(':focus-visible')")
    page.keyboard.press("Enter")

    panel = page.locator(".step-panel")
    assert panel.locator("h2").inner_text() == "Step 3: synthesis"

    def detail(name: str) -> str:
        return str(panel.locator(f"[data-field='{name}'] dd").inner_text())

    assert detail("summary_text") == "Potassium is trending up over three results"
    assert detail("confidence") == "0.73"
    assert detail("latency_ms") == "250 ms"
    assert detail("agent") == "clinician"
    assert panel.locator("[data-field='parents'] button").all_inner_texts() == ["#1 retrieval", "#2 retrieval"]
    assert "llm-call/7781" in detail("back_refs")
    node = page.locator(f".dag [data-step-id='{synthesis}']")
    assert node.get_attribute("aria-pressed") == "true"
    assert "synthesis by clinician" in (node.get_attribute("aria-label") or "")

    tab_to(page, f"e.dataset.stepId === '{review}'")
    page.keyboard.press("Space")
    assert detail("summary_text") == "Checked the synthesis against the guideline"
    assert detail("confidence") == "—"
    assert node.get_attribute("aria-pressed") == "false"


def test_a_500_step_flow_draws_every_node_and_edge(page: Any, console_server: RunningServer, big_flow: Seeded) -> None:
    with page.expect_response(is_flow_read(big_flow.flow_id)) as read:
        open_console(page, console_server, f"flows/{big_flow.flow_id}")
    assert_signed_ok(read.value)
    ids = page.locator(".dag svg [data-step-id]").evaluate_all("ns => ns.map(n => n.dataset.stepId)")
    assert len(ids) == 500
    assert set(ids) == {s["step_id"] for s in big_flow.steps}
    assert page.locator(".dag svg path.edge").count() == edge_count(big_flow.steps) == 699
    last_synthesis = big_flow.step_id(499)
    assert page.locator(f".dag svg path.edge[data-to='{last_synthesis}']").count() == 3
    # One SVG, and the page measured its own layout and draw.
    assert page.locator(".dag svg").count() == 1
    assert page.evaluate("performance.getEntriesByName('flowledger:dag').length") == 1
    assert page.locator("table [data-step-row]").count() == 500
    screenshot(page, "flow-500-steps")


def test_unknown_and_malformed_flow_ids_say_so(page: Any, console_server: RunningServer) -> None:
    missing = "fl_" + "0" * 26
    with page.expect_response(is_flow_read(missing)) as read:
        open_console(page, console_server, f"flows/{missing}")
    assert read.value.status == 404
    assert page.locator("h1").inner_text() == "Flow not found"
    assert missing in page.get_by_role("alert").inner_text()
    assert page.locator(".dag").count() == 0

    calls: list[str] = []
    page.on("request", lambda request: calls.append(request.url) if "/admin/" in request.url else None)
    open_console(page, console_server, "flows/not-a-flow")
    assert page.locator("h1").inner_text() == "Not a flow id"
    assert "not-a-flow" in page.get_by_role("alert").inner_text()
    assert calls == []


def test_pages_fit_a_phone_screen(
    page: Any, console_server: RunningServer, small_flow: Seeded, traces: dict[str, list[Seeded]]
) -> None:
    page.set_viewport_size(PHONE)
    open_console(page, console_server, f"flows/{small_flow.flow_id}")
    assert page.locator(".dag svg [data-step-id]").count() == 4
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.locator(f".dag [data-step-id='{small_flow.step_id(2)}']").click()
    assert page.locator(".step-panel [data-field='confidence'] dd").inner_text() == "0.73"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "flow-phone")

    open_console(page, console_server, f"flows?trace_id={traces['a'][0].trace_id}")
    assert len(listed_flows(page)) == 3
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert serious_violations(page) == []
