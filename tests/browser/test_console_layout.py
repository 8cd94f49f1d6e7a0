"""The console's layout and wording on every page, in Chromium against a `flowledger serve` of its own
(the backlog consumer off, so a queued request stays where it is): nothing scrolls the page sideways at
390 or 1280 px, no table header breaks inside a word, the chat page opens on its message box, the
comparison shows beside the tick that asked for it, the queue place agrees with the backlog, counts
agree with their nouns, and config.json is fetched once per tab."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest

from flowledger.local.datadir import DEV_USER
from tests.browser.conftest import Api, open_console, screenshot
from tests.browser.test_patient_pages import SAFE_STEPS, add_steps, close, opt_in, writer
from tests.browser.test_research_console import SEEDS, TRIGGER, failed_requests, record_flow
from tests.e2e.conftest import RunningServer, launch_server

pytestmark = pytest.mark.e2e
DEMO_PATIENT = "patient-demo"  # the patient the dev server's console config signs in as
CONVERSATIONS = 9
TRACE = "trace-layout-1"  # the demo patient's flow's: the trace search finds it
WIDTHS = (390, 1280)
PAGES = ("flows", "flow", "flow-search", "research", "pathways", "chat", "patient-flows", "patient-flow", "profile")


@dataclass
class Console:
    server: RunningServer
    api: Api
    flow_id: str
    patient_flow_id: str


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    server = launch_server(tmp_path_factory.mktemp("layout") / "data", env={"BACKLOG_CONSUMER_ENABLED": "false"})
    try:
        api = Api(server)
        researcher = api.token("agent-researcher", ["reasoning.write"])
        for ref, steps in SEEDS:
            record_flow(api, researcher, ref, steps)
        failed_requests(api, 2)  # two tickets served: a new request's ticket is 3, its place 1
        flow = api.admin("GET", "/admin/v1/reasoning/flows?limit=1", expect=200).json()["flows"][0]
        patient_flow_id = demo_patient_flow(api)
        user = api.token(DEV_USER, ["chat", "documents"])
        for n in range(CONVERSATIONS):
            api.bearer("POST", "/api/chat", user, {"query": f"hello number {n}"}, expect=200)
        yield Console(server, api, flow["flow_id"], patient_flow_id)
    finally:
        server.stop()


def demo_patient_flow(api: Api) -> str:
    """A closed flow about the demo patient, who opted in to reading it; the trace search finds it."""
    trigger = {
        "trigger_type": "user_question",
        "trigger_ref": "chat/patient/1",
        "trigger_summary": "A question about a recent lab result",
        "patient_id": DEMO_PATIENT,
        "trace_id": TRACE,
    }
    flow_id = str(api.bearer("POST", "/api/reasoning/flows", writer(api), trigger, expect=201).json()["flow_id"])
    steps: list[tuple[str, str, str, float | None]] = list(SAFE_STEPS)
    add_steps(api, flow_id, steps)
    close(api, flow_id)
    opt_in(api, DEMO_PATIENT)
    return flow_id


def address(console: Console, name: str) -> str:
    return {
        "flows": "flows",
        "flow": f"flows/{console.flow_id}",
        "flow-search": f"flows?{urlencode({'trace_id': TRACE})}",
        "research": f"research?{urlencode(TRIGGER)}",
        "pathways": "pathways",
        "chat": "chat",
        "patient-flows": "patient/flows",
        "patient-flow": f"patient/flows/{console.patient_flow_id}",
        "profile": "patient",
    }[name]


# What a page is wider than its window by, and the boxes that scroll it: measured in the page.
OVERFLOW = """() => {
  const root = document.documentElement;
  const culprits = [];
  for (const node of document.querySelectorAll('main *')) {
    const box = node.getBoundingClientRect();
    if (box.right > root.clientWidth + 1 && !node.closest('.table-wrap, .steps-scroll, .value-table, .answer-table')) {
      culprits.push(`${node.tagName.toLowerCase()}.${[...node.classList].join('.')} right=${Math.round(box.right)}`);
    }
  }
  return { scroll: root.scrollWidth, client: root.clientWidth, culprits: culprits.slice(0, 8) };
}"""

# Each header cell whose text breaks inside a word (a word drawn on two lines), or is wider than its cell.
BROKEN_HEADERS = """() => {
  const broken = [];
  for (const th of document.querySelectorAll('th')) {
    if (!th.getClientRects().length) continue; // not drawn (a closed details, a hidden table)
    const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    for (let text = walker.nextNode(); text; text = walker.nextNode()) {
      for (const word of text.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(text, word.index);
        range.setEnd(text, word.index + word[0].length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(`${word[0]} (split over ${tops.size} lines)`);
      }
    }
    if (th.scrollWidth > th.clientWidth + 1) broken.push(`${th.textContent} (wider than its cell)`);
  }
  return broken;
}"""


# The boxes of tables that do not fit them (they scroll sideways inside): what a desktop should never need.
CLIPPED = """() => [...document.querySelectorAll('.table-wrap')]
  .filter((wrap) => wrap.getClientRects().length && wrap.scrollWidth > wrap.clientWidth + 1)
  .map((wrap) => `${wrap.closest('section')?.className}: ${wrap.scrollWidth} > ${wrap.clientWidth}`)"""


def settle(page: Any, name: str) -> None:
    """What each page draws after its first paint, drawn (the boxes measured are the final ones)."""
    if name == "research":
        page.wait_for_selector("li.candidate")
    elif name == "pathways":
        page.wait_for_selector("li.pathway-card")
    elif name == "flow":
        if not page.locator(".steps-table").evaluate("d => d.open"):
            page.locator(".steps-table summary").click()  # the steps table, open
        page.wait_for_selector(".steps-scroll tbody tr[aria-rowindex]", state="attached")
    elif name == "flow-search":
        page.wait_for_selector(".flow-search table tbody tr")
    elif name == "chat":
        page.wait_for_selector(".session-list li[data-session-id]", state="attached")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", PAGES)
def test_no_page_scrolls_sideways_and_no_header_breaks_inside_a_word(
    page: Any, console: Console, name: str, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    open_console(page, console.server, address(console, name))
    settle(page, name)
    measured = page.evaluate(OVERFLOW)
    assert measured["scroll"] <= measured["client"], measured
    assert page.evaluate(BROKEN_HEADERS) == []
    if width > 1000:
        # On a desktop every table fits its box (a phone scrolls a wide one inside its own box).
        assert page.evaluate(CLIPPED) == []
    screenshot(page, f"layout-{name}-{width}")


def test_the_chat_page_opens_on_its_message_box_above_the_folded_conversations_on_a_phone(
    page: Any, console: Console
) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    open_console(page, console.server, "chat")
    page.wait_for_selector(".session-list li[data-session-id]", state="attached")
    assert page.evaluate("document.activeElement?.id") == "chat-input"
    box = page.locator("#chat-input").bounding_box()
    assert box is not None and box["y"] + box["height"] <= 844  # on screen without scrolling
    assert page.locator(".session-list li[data-session-id]").count() == CONVERSATIONS
    assert page.locator(".session-list").is_hidden()  # folded: one line, after the message box
    sessions = page.locator("nav.sessions").bounding_box()
    assert sessions is not None and sessions["y"] > box["y"]
    page.locator("nav.sessions summary").click()
    assert page.locator(".session-list").is_visible()
    # On a desktop the list is open beside the conversation, and the box has the focus all the same.
    page.set_viewport_size({"width": 1280, "height": 900})
    open_console(page, console.server, "chat")
    assert page.evaluate("document.activeElement?.id") == "chat-input"
    page.wait_for_selector(".session-list li[data-session-id]")


def test_the_comparison_shows_under_the_tick_that_completed_the_pair(page: Any, console: Console) -> None:
    open_console(page, console.server, f"research?{urlencode(TRIGGER)}")
    candidates = page.locator("li.candidate")
    candidates.nth(0).get_by_label("Compare").check()
    second = candidates.nth(1).get_by_label("Compare")
    second.check()
    page.locator(".compare .dominant").wait_for()
    tick, panel = second.bounding_box(), page.locator("section.compare").bounding_box()
    assert tick is not None and panel is not None
    assert 0 <= panel["y"] - (tick["y"] + tick["height"]) <= 80, (tick, panel)
    # It sits between the candidates, right after the second one ticked.
    assert (
        page.evaluate("document.querySelector('section.compare').closest('li').previousElementSibling.dataset.rank")
        == "2"
    )
    second.uncheck()
    assert page.locator(".compare .dominant").count() == 0
    assert page.locator("li.compare-slot").count() == 0


def test_the_place_in_queue_agrees_with_the_backlog(page: Any, console: Console) -> None:
    open_console(page, console.server, f"research?{urlencode(TRIGGER)}")
    page.get_by_role("button", name="Trigger deeper research").click()
    page.locator(".request-id").wait_for()
    pending = console.api.admin("GET", "/admin/v1/reasoning/research/backlog", expect=200).json()
    waiting = pending["status_distribution"]["pending"]
    page.wait_for_selector(f".backlog .chip[data-status='pending'][data-count='{waiting}']")
    assert page.locator(".backlog .chip[data-status='pending']").inner_text() == f"Pending: {waiting}"
    # The newest request waits behind every other pending one: its place is the pending count.
    assert page.locator(".queue-place").inner_text() == str(waiting)


def test_counts_agree_with_their_nouns(page: Any, console: Console) -> None:
    open_console(page, console.server, "research?trigger_type=user_question&trigger_ref=chat/labs/q-1")
    page.wait_for_selector("li.candidate")
    matched = console.api.admin("GET", f"/admin/v1/reasoning/pathways/match?{urlencode(TRIGGER)}", expect=200)
    count = len(matched.json()["candidates"])
    assert count > 1 and page.locator("#candidates-heading").inner_text() == f"{count} candidates"
    first = page.locator("li.candidate").first
    pathway_id = first.get_attribute("data-pathway-id")
    hits = console.api.admin("GET", f"/admin/v1/reasoning/pathways/{pathway_id}", expect=200).json()["hit_count"]
    first.get_by_role("button", name="Reuse pathway").click()
    first.locator(".reused").wait_for()
    noun = "hit" if hits + 1 == 1 else "hits"
    assert first.locator(".reused").inner_text() == f"Reused: {hits + 1} {noun} now."
    assert page.locator("p[role='status']").first.inner_text().endswith(f": {hits + 1} {noun}.")
    assert page.evaluate(
        "async () => { const { plural } = await import('/console/js/dom.js');"
        " return [plural(0, 'hit'), plural(1, 'hit'), plural(2, 'hit'), plural(1200, 'row'),"
        " plural(1, 'retry', 'retries')]; }"
    ) == ["0 hits", "1 hit", "2 hits", "1,200 rows", "1 retry"]
    open_console(page, console.server, "pathways?ref_prefix=chat/labs/q-1")
    page.wait_for_selector("li.pathway-card")
    shown = page.locator("li.pathway-card .hits").first.inner_text()
    assert shown in {"1 hit", f"{hits + 1} hits"} and shown.startswith(f"{hits + 1} ")
    assert page.locator(".pathway-count").inner_text() == "1 pathway shown."


def test_config_json_is_fetched_once_per_tab(page: Any, console: Console) -> None:
    fetched: list[str] = []

    def count(request: Any) -> None:
        if request.url.endswith("/config.json"):
            fetched.append(request.url)

    page.on("request", count)
    open_console(page, console.server, "flows")
    open_console(page, console.server, "research")
    open_console(page, console.server, "chat")
    assert len(fetched) == 1
    # Another tab keeps its own copy.
    other = page.context.browser.new_context().new_page()
    try:
        other.on("request", count)
        open_console(other, console.server, "flows")
    finally:
        other.context.close()
    assert len(fetched) == 2


def listed(console: Console, **query: str) -> list[str]:
    """The pathway ids GET /admin/v1/pathways lists for ``query``, in its order."""
    answer = console.api.admin("GET", f"/admin/v1/pathways?{urlencode({'limit': '20', **query})}", expect=200)
    return [p["pathway_id"] for p in answer.json()["pathways"]]


def test_the_library_lists_and_filters_the_pathways_with_their_radars(page: Any, console: Console) -> None:
    open_console(page, console.server, "pathways")
    page.wait_for_selector("li.pathway-card")
    cards = page.locator("li.pathway-card")
    assert cards.evaluate_all("c => c.map(x => x.dataset.pathwayId)") == listed(console) and cards.count() >= 4
    radar = cards.first.locator("svg[role='img']")
    assert "Confidence" in (radar.get_attribute("aria-label") or "")
    page.get_by_label("Trigger ref starts with").fill("chat/labs")
    page.get_by_role("button", name="Filter").click()
    expected = listed(console, ref_prefix="chat/labs")
    page.wait_for_function("n => document.querySelectorAll('li.pathway-card').length === n", arg=len(expected))
    assert cards.evaluate_all("c => c.map(x => x.dataset.pathwayId)") == expected and len(expected) == 2
    assert "ref_prefix=chat%2Flabs" in page.url  # a copied address reopens the filter
    page.get_by_label("Status").select_option("demoted")
    page.get_by_role("button", name="Filter").click()
    page.get_by_text("No pathway matches.").wait_for()
    assert cards.count() == 0 and listed(console, ref_prefix="chat/labs", status="demoted") == []
