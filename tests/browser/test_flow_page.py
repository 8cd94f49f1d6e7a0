"""The trace search and the flow page in Chromium, against `flowledger serve`.

Flows are seeded as an agent writes them (bearer ``reasoning.write``: open, steps in batches, close);
the pages read them back with SigV4-signed admin calls made in the browser. Each trace id is new per
run, so the session's shared server needs no store of its own.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from flowledger.ids import new_id
from flowledger.otlp.ingest import flow_id_of, step_id_of
from tests.browser.conftest import PHONE, READY, Api, open_console, screenshot, serious_violations
from tests.e2e.conftest import RunningServer

BATCH = 49  # steps:batch takes at most 49 steps (one DynamoDB transaction)
PHI = "Ann Example"  # a sealed input: on the page only once an operator asks for it
SQL = "SELECT month, region, SUM(amount) AS total FROM sales GROUP BY month, region"
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
    trigger_type: str = "lab_result",
) -> Seeded:
    """Open a flow, record ``steps`` in batches (a parent may be an earlier step), close it if asked."""
    body = {
        "trigger_type": trigger_type,
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
    """300 steps: six pages of 50 when the page reads ``?page_size=50``."""
    return seed_flow(api, writer, trace_id=f"trace-big-{uuid.uuid4().hex[:8]}", ref="lab/big", steps=fan_in_steps(60))


@pytest.fixture(scope="module")
def evidence_flow(api: Api, writer: str) -> Seeded:
    """A chat turn's flow (its trace id a chat session id) whose query step carries its evidence, one input sealed."""
    question = step("retrieval", "chat", "Read the question")
    rows = [{"month": f"2026-{m:02d}", "region": region, "total": 100.5 * m} for m in range(1, 6) for region in "ABCDE"]
    query = step(
        "tool_call",
        "chat",
        "Ran query_sql: 25 rows",
        [question["step_id"]],
        inputs={"sql": SQL, "patient_name": PHI},
        outputs={"rows": rows, "row_count": 25, "excerpt": "x" * 3000},
        pii_fields={"inputs": ["patient_name"]},
        latency_ms=42,
    )
    flow = seed_flow(
        api,
        writer,
        trace_id=new_id("ses_"),
        ref="chat/run-1",
        steps=[question, query],
        trigger_type="chat_turn",
    )
    return flow


def is_flows_listing(response: Any) -> bool:
    return "/admin/v1/reasoning/flows?" in response.url


def is_flow_read(flow_id: str) -> Callable[[Any], bool]:
    """The flow's own read (its metadata and first page of steps), not a later page of steps."""
    return lambda response: urlsplit(response.url).path.endswith(f"/admin/v1/reasoning/flows/{flow_id}")


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


def test_flow_page_shows_the_metadata_the_graph_and_the_table(
    page: Any, console_server: RunningServer, small_flow: Seeded
) -> None:
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
    assert page.locator(".steps-table summary").inner_text() == "All 4 steps as a table"
    assert value("closed_at") != "—" and value("duration") not in ("", "still active")
    assert value("dimension-maturity") == "not rated"  # no pathway family: not rated, never low
    trace = page.locator("[data-field='trace_id'] a")
    assert trace.inner_text() == small_flow.trace_id
    assert trace.get_attribute("href") == f"/console/flows?trace_id={small_flow.trace_id}"
    assert page.locator("[data-field='conversation']").count() == 0  # a lab result came from no conversation

    nodes = page.locator(".fg-node[data-step-id]")
    assert sorted(nodes.evaluate_all("ns => ns.map(n => n.dataset.stepId)")) == sorted(
        s["step_id"] for s in small_flow.steps
    )
    table = page.locator(".steps-scroll table")
    assert table.get_attribute("aria-rowcount") == "5"  # four steps and the header
    rows = page.locator(".steps-scroll tr[data-step-row]")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.stepRow)") == [s["step_id"] for s in small_flow.steps]
    assert rows.evaluate_all("rs => rs.map(r => r.getAttribute('aria-rowindex'))") == ["2", "3", "4", "5"]
    assert "#1, #2" in rows.nth(2).inner_text()  # the synthesis's parents, by number
    # A flow read in one page is laid out and drawn once, already finished (not "so far", then again).
    page.locator("main[data-ready='true']").wait_for()
    assert page.evaluate("performance.getEntriesByName('flowledger:dag-layout').length") == 1
    assert "so far" not in (page.locator(".fg-svg").get_attribute("aria-label") or "")
    screenshot(page, "flow-page")
    assert serious_violations(page) == []


def test_a_table_row_chosen_by_keyboard_shows_its_details(
    page: Any, console_server: RunningServer, small_flow: Seeded
) -> None:
    open_console(page, console_server, f"flows/{small_flow.flow_id}")
    synthesis, review = small_flow.step_id(2), small_flow.step_id(3)
    tab_to(page, f"e.closest('tr')?.dataset.stepRow === '{synthesis}'")
    page.keyboard.press("Enter")

    panel = page.locator(".step-panel")
    assert panel.locator("h2").inner_text() == "Step 3: synthesis"

    def detail(name: str) -> str:
        return str(panel.locator(f"[data-field='{name}'] dd").first.inner_text())

    assert detail("summary_text") == "Potassium is trending up over three results"
    assert detail("confidence") == "0.73"
    assert detail("latency_ms") == "250 ms"
    assert detail("agent") == "clinician"
    assert panel.locator("[data-field='parents'] button").all_inner_texts() == ["#1 retrieval", "#2 retrieval"]
    assert panel.locator("[data-field='children'] button").all_inner_texts() == ["#4 review"]
    assert "llm-call/7781" in detail("back_refs")
    node = page.locator(f".fg-node[data-step-id='{synthesis}']")
    assert node.get_attribute("aria-pressed") == "true"
    assert page.locator(f"tr.selected[data-step-row='{synthesis}']").count() == 1
    # The selection was measured from the key press to the filled panel.
    page.wait_for_function("performance.getEntriesByName('flowledger:step-select').length === 1")
    assert page.evaluate("performance.getEntriesByName('flowledger:step-shown').length") == 1

    # Arrow down moves to the next row's button; Space selects it.
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.activeElement.closest('tr').dataset.stepRow") == review
    page.keyboard.press("Space")
    assert detail("summary_text") == "Checked the synthesis against the guideline"
    assert detail("confidence") == "not rated"
    assert node.get_attribute("aria-pressed") == "false"
    # A child button in the panel goes back up the graph.
    panel.locator("[data-field='parents'] button").click()
    assert panel.locator("h2").inner_text() == "Step 3: synthesis"


def test_step_details_show_inputs_outputs_and_open_a_sealed_field_on_request(
    page: Any, console_server: RunningServer, evidence_flow: Seeded
) -> None:
    sealed_reads: list[str] = []
    page.on("request", lambda r: sealed_reads.append(r.url) if "/sealed?" in r.url else None)
    open_console(page, console_server, f"flows/{evidence_flow.flow_id}?page_size=1")
    query = evidence_flow.step_id(1)
    page.locator(f"tr[data-step-row='{query}'] .row-button").click()
    panel = page.locator(".step-panel")
    inputs, outputs = panel.locator("dl.fields[data-side='inputs']"), panel.locator("dl.fields[data-side='outputs']")
    assert "SELECT month, region, SUM(amount)" in inputs.locator("[data-field='sql']").inner_text()
    rows = outputs.locator("[data-field='rows'] table")
    assert rows.locator("th").all_inner_texts() == ["month", "region", "total"]
    assert rows.locator("tbody tr").count() == 20 and "first 20 of 25 rows" in rows.locator("caption").inner_text()
    assert outputs.locator("[data-field='row_count'] dd").inner_text() == "25"
    long_text = outputs.locator("[data-field='excerpt']")
    assert "Show all 3,000 characters" in long_text.inner_text() and len(long_text.locator("pre").inner_text()) == 1200
    # The sealed field is a button: its value is nowhere on the page until it is asked for.
    assert PHI not in page.content() and sealed_reads == []
    button = inputs.locator("[data-field='patient_name'] button")
    assert button.inner_text() == "Show sealed value"
    with page.expect_response(lambda r: "/sealed?" in r.url) as opened:
        button.click()
    assert_signed_ok(opened.value)
    assert "side=inputs" in opened.value.url and "field=patient_name" in opened.value.url
    # The response is in; the page renders it a moment later: wait for the value, not for the request.
    expect(inputs.locator("[data-field='patient_name'] dd")).to_have_text(re.compile(re.escape(PHI) + "$"))
    assert len(sealed_reads) == 1
    screenshot(page, "flow-step-evidence")
    assert serious_violations(page) == []


def test_an_otlp_trace_opens_like_any_flow_and_its_tool_arguments_open_on_request(
    page: Any, console_server: RunningServer, api: Api
) -> None:
    writer = api.token("otlp-flow-page", ["reasoning.write"])
    trace_id, agent_span, tool_span = uuid.uuid4().hex, "aaa19b7ec3c1b174", "bbb19b7ec3c1b175"

    def span(span_id: str, name: str, attributes: dict[str, str], parent: str = "") -> dict[str, Any]:
        return {
            "traceId": trace_id,
            "spanId": span_id,
            "parentSpanId": parent,
            "name": name,
            "startTimeUnixNano": "1700000000000000000",
            "endTimeUnixNano": "1700000000400000000",
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
        }

    spans = [
        span(
            tool_span,
            "execute_tool lookup_patient",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup_patient",
                "gen_ai.tool.call.arguments": f'{{"name": "{PHI}"}}',
            },
            parent=agent_span,
        ),
        span(
            agent_span, "invoke_agent triage", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage"}
        ),
    ]
    body = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    api.bearer("POST", "/api/otlp/v1/traces", writer, body, expect=200)
    flow_id = flow_id_of(trace_id)

    open_console(page, console_server, f"flows/{flow_id}")
    assert page.locator("dl.grid [data-field='trigger_type'] dd").first.inner_text() == "otlp"
    assert page.locator(".fg-node[data-step-id]").count() == 2  # the agent and its tool call, drawn
    tool = step_id_of(trace_id, tool_span)
    page.locator(f"tr[data-step-row='{tool}'] .row-button").click()
    inputs = page.locator(".step-panel dl.fields[data-side='inputs']")
    assert PHI not in page.content()  # the tool's arguments are sealed until an operator asks
    with page.expect_response(lambda r: "/sealed?" in r.url) as opened:
        inputs.locator("[data-field='gen_ai.tool.call.arguments'] button").click()
    assert_signed_ok(opened.value)
    expect(inputs.locator("[data-field='gen_ai.tool.call.arguments'] dd")).to_contain_text(PHI)
    assert serious_violations(page) == []


def test_a_chat_turns_flow_links_back_to_its_conversation(
    page: Any, console_server: RunningServer, evidence_flow: Seeded
) -> None:
    open_console(page, console_server, f"flows/{evidence_flow.flow_id}")
    link = page.locator("[data-field='conversation'] a")
    assert link.get_attribute("href") == f"/console/chat?session={evidence_flow.trace_id}"
    link.click()
    page.wait_for_url(f"**/console/chat?session={evidence_flow.trace_id}")


def test_a_multi_page_flow_loads_progressively_into_a_virtualized_table(
    page: Any, console_server: RunningServer, big_flow: Seeded
) -> None:
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url) if "/steps?" in r.url else None)
    with page.expect_response(is_flow_read(big_flow.flow_id)) as read:
        open_console(page, console_server, f"flows/{big_flow.flow_id}?page_size=50")
    assert_signed_ok(read.value)
    assert "steps=50" in read.value.url  # the first page comes with the flow, in the page's one first read
    assert len(read.value.json()["first_steps"]["steps"]) == 50
    assert len(reads) == 5  # the other 250 steps, 50 a page, each asked for with the cursor the last one gave
    assert all("cursor=" in url for url in reads)
    first_view = page.evaluate("performance.getEntriesByName('flowledger:flow-first-view')[0].startTime")
    ready = page.evaluate("performance.getEntriesByName('flowledger:flow-ready')[0].startTime")
    assert first_view < ready
    assert page.locator(".load-status").inner_text() == ""

    page.locator(".steps-table summary").click()  # 300 steps: the table starts folded
    table = page.locator(".steps-scroll table")
    assert table.get_attribute("aria-rowcount") == "301"
    rows = page.locator(".steps-scroll tr[data-step-row]")
    assert 10 <= rows.count() <= 60  # the rows in view and a few around them, not 300
    assert rows.first.get_attribute("aria-rowindex") == "2"
    heights = rows.evaluate_all("rs => rs.slice(0, 3).map(r => r.getBoundingClientRect().height)")
    assert heights == [34, 34, 34]  # the row height the window arithmetic assumes

    # Scrolled to the end, the last rows are drawn (and only a window of them).
    page.locator(".steps-scroll").evaluate("box => { box.scrollTop = box.scrollHeight; }")
    last = big_flow.step_id(299)
    page.wait_for_selector(f"tr[data-step-row='{last}']")
    assert page.locator(f"tr[data-step-row='{last}']").get_attribute("aria-rowindex") == "301"
    assert rows.count() <= 60
    # End and Home on a row button move through the whole flow.
    page.locator(f"tr[data-step-row='{last}'] .row-button").focus()
    page.keyboard.press("Home")
    assert page.evaluate("document.activeElement.closest('tr').getAttribute('aria-rowindex')") == "2"
    page.keyboard.press("End")
    assert page.evaluate("document.activeElement.closest('tr').dataset.stepRow") == last
    page.keyboard.press("Enter")
    assert page.locator(".step-panel h2").inner_text() == "Step 300: synthesis"
    assert page.locator(".step-panel [data-field='parents'] button").count() == 3
    screenshot(page, "flow-300-steps")


def test_unknown_and_malformed_flow_ids_say_so(page: Any, console_server: RunningServer) -> None:
    missing = "fl_" + "0" * 26
    with page.expect_response(is_flow_read(missing)) as read:
        open_console(page, console_server, f"flows/{missing}")
    assert read.value.status == 404
    assert page.locator("h1").inner_text() == "Flow not found"
    assert missing in page.get_by_role("alert").inner_text()
    assert page.locator(".fg").count() == 0

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
    assert page.locator(".fg-node[data-step-id]").count() == 4
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.locator(f".fg-node[data-step-id='{small_flow.step_id(2)}']").click()
    assert page.locator(".step-panel [data-field='confidence'] dd").inner_text() == "0.73"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "flow-phone")

    open_console(page, console_server, f"flows?trace_id={traces['a'][0].trace_id}")
    assert len(listed_flows(page)) == 3
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert serious_violations(page) == []
