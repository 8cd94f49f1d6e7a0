"""The flow graph component (console/js/flow_graph.js) in Chromium, mounted on a console page served by
`flowledger serve`, fed steps as the flow page feeds it (pages in creation order), then driven with the
mouse and the keyboard. No flow is written: the component is tried alone, fast, on flows of any shape.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowledger.ids import new_id
from tests.browser.conftest import open_console, screenshot, serious_violations
from tests.e2e.conftest import RunningServer

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
MOUNT = """async ({steps, page}) => {
  const { mountFlowGraph } = await import('/console/js/flow_graph.js');
  const box = document.createElement('section');
  box.setAttribute('aria-label', 'Graph under test');
  document.querySelector('main').replaceChildren(box);
  window.selected = [];
  window.graph = mountFlowGraph(box, { label: 'Test graph', onSelect: (step) => window.selected.push(step.step_id) });
  for (let i = 0; i < steps.length; i += page) await window.graph.append(steps.slice(i, i + page));
  await window.graph.finish();
}"""
IN_STAGE = """() => {
  const stage = document.querySelector('.fg-stage').getBoundingClientRect();
  return [...document.querySelectorAll('.fg-node')].filter((node) => {
    const r = node.getBoundingClientRect();
    return r.left >= stage.left && r.right <= stage.right && r.top >= stage.top && r.bottom <= stage.bottom;
  }).map((node) => node.dataset.stepId || node.dataset.loop);
}"""


def step(kind: str, parents: list[str], n: int, **extra: Any) -> dict[str, Any]:
    return {
        "step_id": new_id("st_"),
        "step_kind": kind,
        "agent": "agent",
        "summary_text": f"{kind} number {n}",
        "parent_step_ids": parents,
        "latency_ms": None,
        "confidence": None,
        "created_at": (START + timedelta(seconds=n)).isoformat().replace("+00:00", "Z"),
        **extra,
    }


def fan_in(rounds: int) -> list[dict[str, Any]]:
    """``rounds`` x (plan -> three retrievals -> synthesis of the three), each plan after the last synthesis."""
    steps: list[dict[str, Any]] = []
    last: list[str] = []
    for _ in range(rounds):
        plan = step("planning", last, len(steps))
        found = [
            step("retrieval", [plan["step_id"]], len(steps) + 1 + k, latency_ms=40, confidence=0.8) for k in range(3)
        ]
        synthesis = step("synthesis", [f["step_id"] for f in found], len(steps) + 4)
        steps += [plan, *found, synthesis]
        last = [synthesis["step_id"]]
    return steps


def agent_loop(turns: int) -> list[dict[str, Any]]:
    """A question, ``turns`` x (llm_call -> tool_call) in one chain, an answer."""
    steps = [step("question", [], 0)]
    for _ in range(turns):
        for kind in ("llm_call", "tool_call"):
            steps.append(step(kind, [steps[-1]["step_id"]], len(steps), latency_ms=100))
    steps.append(step("answer", [steps[-1]["step_id"]], len(steps)))
    return steps


def wait_until(page: Any, predicate: str, timeout: float = 5.0) -> None:
    """Poll ``predicate`` (a JS expression) until it holds. The console's CSP refuses wait_for_function's eval."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(f"() => !!({predicate})"):
        assert time.monotonic() < deadline, f"never true: {predicate}"
        time.sleep(0.02)


def mount(page: Any, server: RunningServer, steps: list[dict[str, Any]], per_page: int = 100) -> Any:
    open_console(page, server, "flows")
    page.evaluate(MOUNT, {"steps": steps, "page": per_page})
    return page


def focused() -> str:
    return "document.activeElement.dataset.stepId || document.activeElement.dataset.loop || ''"


def scale(page: Any) -> float:
    return float(page.locator(".fg").get_attribute("data-scale"))


def test_fit_shows_every_node_of_a_50_step_flow(page: Any, console_server: RunningServer) -> None:
    steps = fan_in(10)
    mount(page, console_server, steps, per_page=20)
    # Too tall to read whole: the first view is 100% at the top, the rest in the overview.
    assert scale(page) == 1.0
    assert steps[0]["step_id"] in page.evaluate(IN_STAGE)
    assert len(page.evaluate(IN_STAGE)) < 50
    page.get_by_role("button", name="Fit the whole flow (0)").click()
    wait_until(page, "document.querySelector('.fg').dataset.scale !== '1.000'")
    assert sorted(page.evaluate(IN_STAGE)) == sorted(s["step_id"] for s in steps)
    assert "50 steps" in (page.locator(".fg-svg").get_attribute("aria-label") or "")
    screenshot(page, "flow-graph-fit-50")
    assert serious_violations(page) == []

    # A click low in the overview brings the end of the flow into view at the same scale.
    page.keyboard.press("Tab")  # into the graph, then zoom in to 100% again
    for _ in range(8):
        page.keyboard.press("+")
    last = steps[-1]["step_id"]
    wait_until(page, f"!document.querySelector('.fg-node[data-step-id=\"{last}\"]')")
    box = page.locator(".fg-overview").bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] - 6)
    wait_until(page, f"!!document.querySelector('.fg-node[data-step-id=\"{last}\"]')")
    assert last in page.evaluate(IN_STAGE)


def test_zoom_and_pan_by_buttons_keys_wheel_and_drag(page: Any, console_server: RunningServer) -> None:
    steps = fan_in(2)
    mount(page, console_server, steps)
    node = page.locator(f".fg-node[data-step-id='{steps[0]['step_id']}']")
    before = node.bounding_box()
    first = scale(page)
    page.get_by_role("button", name="Zoom in (+)").click()
    wait_until(page, f"document.querySelector('.fg').dataset.scale === '{first * 1.25:.3f}'")
    after = node.bounding_box()
    assert after["width"] == pytest.approx(before["width"] * 1.25, rel=0.02)

    node.focus()
    page.keyboard.press("-")
    page.keyboard.press("-")
    wait_until(page, "document.querySelector('.fg').dataset.scale === '0.800'")
    page.keyboard.press("0")
    wait_until(page, "document.querySelector('.fg').dataset.scale !== '0.800'")
    assert len(page.evaluate(IN_STAGE)) == 10  # fit: every node in the box

    stage = page.locator(".fg-stage").bounding_box()
    page.mouse.move(stage["x"] + 40, stage["y"] + 40)
    zoomed = scale(page)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -200)
    page.keyboard.up("Control")
    wait_until(page, f"Number(document.querySelector('.fg').dataset.scale) > {zoomed}")

    start = node.bounding_box()
    page.mouse.move(stage["x"] + 60, stage["y"] + 60)
    page.mouse.down()
    page.mouse.move(stage["x"] + 110, stage["y"] + 90, steps=4)
    page.mouse.up()
    wait_until(page, f"document.querySelector('.fg-node').getBoundingClientRect().x !== {start['x']}")
    moved = node.bounding_box()
    assert (moved["x"] - start["x"], moved["y"] - start["y"]) == (pytest.approx(50, abs=1), pytest.approx(30, abs=1))
    assert page.evaluate("window.selected") == []  # a drag is not a click


def test_the_graph_is_one_tab_stop_and_arrows_follow_the_links(page: Any, console_server: RunningServer) -> None:
    steps = fan_in(2)
    plan, r1, r2, r3, synthesis = (s["step_id"] for s in steps[:5])
    mount(page, console_server, steps)
    page.get_by_role("button", name="Fit the whole flow (0)").focus()
    page.keyboard.press("Tab")
    assert page.evaluate(focused()) == plan
    label = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert label.startswith("Step 1: planning by agent. planning number 0.") and "3 children" in label
    page.keyboard.press("Tab")  # the next Tab leaves the graph
    assert page.evaluate("!document.activeElement.closest('.fg-svg')")
    assert page.locator(".fg-svg [tabindex='0']").count() == 1

    page.keyboard.press("Shift+Tab")
    assert page.evaluate(focused()) == plan
    page.keyboard.press("ArrowDown")  # to the nearest child: the middle retrieval
    assert page.evaluate(focused()) == r2
    page.keyboard.press("ArrowLeft")
    assert page.evaluate(focused()) == r1
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.evaluate(focused()) == r3
    page.keyboard.press("ArrowDown")
    assert page.evaluate(focused()) == synthesis
    page.keyboard.press("ArrowUp")
    assert page.evaluate(focused()) == r2  # of several parents, the nearest one
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert page.evaluate(focused()) == steps[5]["step_id"]  # the next round's plan
    assert page.locator(".fg-svg [tabindex='0']").count() == 1

    page.keyboard.press("Enter")
    assert page.evaluate("window.selected") == [steps[5]["step_id"]]
    assert page.locator(f".fg-node[data-step-id='{steps[5]['step_id']}']").get_attribute("aria-pressed") == "true"
    page.keyboard.press("ArrowUp")
    page.keyboard.press(" ")
    assert page.evaluate("window.selected") == [steps[5]["step_id"], synthesis]

    # select() from the page (the details panel's parent links) moves focus there too.
    page.evaluate(f"window.graph.select('{r1}', {{focus: true}})")
    assert page.evaluate(focused()) == r1


def test_a_repeated_model_tool_loop_folds_into_one_node_that_opens(page: Any, console_server: RunningServer) -> None:
    steps = agent_loop(12)
    mount(page, console_server, steps, per_page=7)  # the loop grows across pages
    loop = page.locator(".fg-node[data-loop]")
    assert loop.count() == 1
    assert loop.locator(".fg-kind").text_content() == "12 \u00d7 llm_call → tool_call"
    assert "latency Σ 2.4 s" in (loop.text_content() or "")
    assert page.locator(".fg-node[data-step-id]").count() == 2  # the question and the answer
    assert loop.get_attribute("aria-expanded") == "false"

    page.get_by_role("button", name="Open all loops").focus()  # the last button before the graph
    page.keyboard.press("Tab")
    page.keyboard.press("ArrowDown")
    assert page.evaluate(focused()) == f"loop:{steps[1]['step_id']}"
    page.keyboard.press("Enter")
    assert page.evaluate(focused()) == steps[1]["step_id"]  # the loop's first step
    assert page.locator(".fg-node[data-loop]").count() == 0
    assert "Loop opened: 24 steps" in page.locator(".fg [aria-live]").inner_text()
    page.keyboard.press("ArrowDown")
    assert page.evaluate(focused()) == steps[2]["step_id"]
    page.keyboard.press("Escape")
    assert page.evaluate(focused()) == f"loop:{steps[1]['step_id']}"
    assert page.locator(".fg-node[data-loop]").count() == 1

    # Selecting a step inside a folded loop (from the table, say) opens the loop to show it.
    inside = steps[9]["step_id"]
    page.evaluate(f"window.graph.select('{inside}', {{focus: true}})")
    assert page.evaluate(focused()) == inside
    assert page.locator(f".fg-node[data-step-id='{inside}']").get_attribute("aria-pressed") == "true"
    assert page.evaluate("window.selected") == [inside]


def test_nodes_show_latency_and_confidence_and_never_make_one_up(page: Any, console_server: RunningServer) -> None:
    rated = step("retrieval", [], 0, latency_ms=40, confidence=0.8)
    bare = step("synthesis", [rated["step_id"]], 1)
    mount(page, console_server, [rated, bare])
    metrics = page.locator(".fg-node .fg-metrics").all_text_contents()
    assert metrics == ["40 ms · conf 0.80", "— · conf not rated"]
    label = page.locator(f".fg-node[data-step-id='{bare['step_id']}']").get_attribute("aria-label") or ""
    assert "Latency —, confidence not rated" in label


def test_the_timeline_draws_bars_by_time_and_latency(page: Any, console_server: RunningServer) -> None:
    first = step("retrieval", [], 1, latency_ms=1000)  # recorded at 1 s after 1 s: started at 0
    second = step("llm_call", [first["step_id"]], 2, latency_ms=500)  # 1.5 s to 2 s
    third = step("answer", [second["step_id"]], 3)  # at 3 s, no latency: a tick
    mount(page, console_server, [first, second, third])
    page.get_by_role("button", name="Timeline").click()
    assert page.get_by_role("button", name="Timeline").get_attribute("aria-pressed") == "true"
    assert page.locator(".fg-stage").is_hidden()
    rows = page.locator(".fg-row")
    rows.first.wait_for()
    assert rows.count() == 3
    bars = page.evaluate(
        """() => [...document.querySelectorAll('.fg-row')].map((row) => {
          const track = row.querySelector('.fg-track').getBoundingClientRect();
          const bar = row.querySelector('.fg-bar').getBoundingClientRect();
          return [(bar.left - track.left) / track.width, bar.width / track.width];
        })"""
    )
    assert bars[0] == [pytest.approx(0, abs=0.01), pytest.approx(1 / 3, abs=0.01)]
    assert bars[1] == [pytest.approx(0.5, abs=0.01), pytest.approx(1 / 6, abs=0.01)]
    assert bars[2][0] == pytest.approx(1, abs=0.01)
    assert page.locator(".fg-row-latency").all_inner_texts() == ["1000 ms", "500 ms", "—"]
    assert "0 … 3.0 s" in page.locator(".fg-axis").inner_text()

    rows.first.click()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    assert page.evaluate("window.selected") == [first["step_id"], second["step_id"]]
    assert page.locator(".fg-row[aria-selected='true']").get_attribute("data-step-id") == second["step_id"]
    assert page.locator(".fg-scroll [tabindex='0']").count() == 1
    assert serious_violations(page) == []


def test_past_150_steps_in_view_the_graph_draws_boxes_so_a_pan_stays_quick(
    page: Any, console_server: RunningServer
) -> None:
    """250 steps fitted: boxes on the canvas (some 200 SVG nodes made a pan's frame take over 100 ms)."""
    steps = fan_in(50)
    mount(page, console_server, steps, per_page=250)
    page.keyboard.press("Tab")
    page.get_by_role("button", name="Fit the whole flow (0)").click()
    wait_until(page, "document.querySelector('.fg').dataset.detail === 'overview'")
    assert page.locator(".fg-node").count() <= 1  # only the focused node stays an element
    for _ in range(6):  # closer in: few enough in view to be nodes again, each one an element
        page.get_by_role("button", name="Zoom in (+)").click()
    wait_until(page, "document.querySelector('.fg').dataset.detail === 'nodes'")
    assert 1 < page.locator(".fg-node").count() <= 150


def test_a_2000_step_flow_keeps_the_dom_small(page: Any, console_server: RunningServer) -> None:
    steps = fan_in(400)
    mount(page, console_server, steps, per_page=500)
    elements = "document.querySelectorAll('*').length"
    assert page.locator(".fg-node").count() < 80  # 100%: the first ranks only
    assert page.evaluate(elements) < 1000
    page.keyboard.press("Tab")
    page.get_by_role("button", name="Fit the whole flow (0)").click()
    wait_until(page, "document.querySelector('.fg').dataset.detail === 'overview'")
    assert page.locator(".fg-node").count() <= 1  # boxes on the canvas; only the focused node is an element
    assert page.evaluate(elements) < 1000
    screenshot(page, "flow-graph-2000-fit")

    page.evaluate(f"window.graph.select('{steps[-1]['step_id']}', {{focus: true}})")
    assert page.evaluate(focused()) == steps[-1]["step_id"]
    page.keyboard.press("ArrowUp")
    assert page.evaluate(focused()) in {s["step_id"] for s in steps[-4:-1]}
    page.get_by_role("button", name="Timeline").click()
    page.locator(".fg-row").first.wait_for()
    assert page.locator(".fg-row").count() < 80
    assert page.evaluate(elements) < 1000
    assert page.evaluate("performance.getEntriesByName('flowledger:dag-layout').length") >= 4
