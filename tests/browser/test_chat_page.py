"""The chat page in Chromium against `flowledger serve` on the offline model.

The module runs a server of its own: the dev user's sessions, workspaces and documents are state no other
test should see. A diagnosis is held mid-run, deterministically, by holding an exclusive lock on the demo
incident's SQLite file (the agent's first database read waits on it, up to SQLite's 5 s busy timeout):
while it is held the turn is provably unfinished, so what the page shows then arrived before ``done``.
What an action changed is checked over the API with the dev user's token, not on the page.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from flowledger.local.datadir import DEV_USER
from tests.browser.conftest import PHONE, Api, open_console, screenshot, serious_violations
from tests.e2e.conftest import RunningServer, launch_server

DEMO_QUESTION = "Why did checkout fail last night?"
SALES_CSV = (
    b"month,region,store,amount\n"
    b"2026-04,north,n1,120.5\n2026-04,south,s1,80\n2026-04,east,e1,45\n"
    b"2026-05,north,n1,130\n2026-05,south,s2,95.5\n2026-05,east,e1,60\n"
)
REFUNDS_MD = b"# Refunds policy\n\nRefunds over 500 EUR need approval by a finance lead. Deadlines: 30 days.\n"
DONE = ".turn:last-child:not([data-state='streaming'])"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = launch_server(tmp_path_factory.mktemp("chat-page") / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def seed(server: RunningServer) -> Api:
    return Api(server)


@pytest.fixture(scope="module")
def user(seed: Api) -> str:
    return seed.token(DEV_USER, ["chat", "documents"])


@contextmanager
def diagnosis_held(server: RunningServer) -> Iterator[None]:
    """Hold the demo database exclusively: a diagnosis reading it waits until this ends (or 5 s pass)."""
    connection = sqlite3.connect(server.data_dir.path / "demo-incident.sqlite", isolation_level=None)
    try:
        connection.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        connection.execute("ROLLBACK")
        connection.close()


def runs(seed: Api, token: str, session_id: str) -> list[dict[str, Any]]:
    response = seed.bearer("GET", f"/api/chat/sessions/{session_id}/runs", token, expect=200)
    return list(response.json()["runs"])


def chat_requests(page: Any) -> list[bytes]:
    """Every POST /api/chat body the page sends, as the network layer sees it."""
    bodies: list[bytes] = []

    def capture(request: Any) -> None:
        if request.method == "POST" and request.url.endswith("/api/chat"):
            bodies.append(request.post_data_buffer)

    page.on("request", capture)
    return bodies


def ask(page: Any, text: str) -> Any:
    page.fill("#chat-input", text)
    page.click("button.send")
    page.wait_for_selector(DONE, timeout=30_000)
    return page.locator(".turn").last


def record_phases(page: Any) -> None:
    """Keep every value each turn's data-phase had, in order (attribute records carry the old value)."""
    page.evaluate(
        """() => {
          window.__phases = [];
          new MutationObserver((records) => {
            for (const r of records) if (r.attributeName === 'data-phase') window.__phases.push(r.oldValue);
          }).observe(document.querySelector('.turns'), {subtree: true, attributes: true, attributeOldValue: true});
        }"""
    )


def open_panel(page: Any) -> None:
    if page.get_attribute(".panel-toggle", "aria-expanded") != "true":
        page.click(".panel-toggle")
    page.wait_for_selector("#chat-panel .workspace")


def session_of(page: Any) -> str:
    return str(page.evaluate("new URLSearchParams(location.search).get('session')"))


def test_a_streamed_answer_arrives_in_pieces_before_done(
    page: Any, server: RunningServer, seed: Api, user: str
) -> None:
    open_console(page, server, "chat")
    record_phases(page)
    # The main path by keyboard: Tab to the message box, type, Enter sends.
    for _ in range(40):
        if page.evaluate("document.activeElement?.id") == "chat-input":
            break
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement?.id") == "chat-input"
    with diagnosis_held(server):
        page.keyboard.type(DEMO_QUESTION)
        page.keyboard.press("Enter")
        page.wait_for_selector(".turn[data-codes*='ROUTED_DIAGNOSIS']", timeout=30_000)
        turn = page.locator(".turn").last
        # The run is held in the database read: nothing of the answer yet, the progress label is live.
        assert turn.get_attribute("data-state") == "streaming"
        assert turn.locator(".answer").inner_text() == ""
        assert page.inner_text("#chat-progress") in {
            "Investigating",
            "Resolving sources",
            "Diagnosing",
            "Querying the database",
        }
        assert page.get_attribute("#chat-progress", "aria-live") == "polite"
        assert not page.is_disabled("button.cancel")
        screenshot(page, "chat-streaming")
    page.wait_for_selector(DONE, timeout=30_000)
    assert turn.get_attribute("data-state") == "done"
    assert "PAYMENT_TIMEOUT" in turn.locator(".answer-text").inner_text()
    assert "On-call runbook: checkout failures" in turn.locator(".references").inner_text()
    assert turn.locator(".limitations").inner_text().startswith("Limitations:")
    phases = page.evaluate("window.__phases")
    # Each frame changed the page as it came: start, several statuses, the content, all before done.
    assert phases[0] == "sent" and "start" in phases and "content" in phases
    assert len([p for p in phases if p.startswith("status:")]) >= 3
    assert phases.index("content") > max(i for i, p in enumerate(phases) if p.startswith("status:"))
    assert page.inner_text("#chat-progress") == "Answered"
    session_id = session_of(page)
    stored = runs(seed, user, session_id)
    assert [(r["status"], r["release_outcome"]) for r in stored] == [("SUCCESS", "SUCCESS")]
    page.wait_for_selector(f".session-list li[data-session-id='{session_id}']")
    assert page.inner_text(f".session-list li[data-session-id='{session_id}'] .session-title") == DEMO_QUESTION
    screenshot(page, "chat-answer")
    assert serious_violations(page) == []
    # The same conversation redrawn from the runs history.
    open_console(page, server, f"chat?session={session_id}")
    page.wait_for_selector(".turn")
    history = page.locator(".turn")
    assert history.count() == 1 and history.first.get_attribute("data-state") == "done"
    assert DEMO_QUESTION in history.first.locator(".query").inner_text()
    assert "PAYMENT_TIMEOUT" in history.first.locator(".answer-text").inner_text()


def test_cancel_mid_diagnosis_ends_the_run_cancelled(page: Any, server: RunningServer, seed: Api, user: str) -> None:
    open_console(page, server, "chat")
    aborted: list[str] = []
    page.on(
        "requestfailed",
        lambda r: aborted.append(r.failure) if r.method == "POST" and r.url.endswith("/api/chat") else None,
    )
    with diagnosis_held(server):
        page.fill("#chat-input", DEMO_QUESTION)
        page.click("button.send")
        page.wait_for_selector(".turn[data-codes*='ROUTED_DIAGNOSIS']", timeout=30_000)
        run_id = page.get_attribute(".turn", "data-run-id")
        with page.expect_response(lambda r: r.url.endswith(f"/api/chat/runs/{run_id}/cancel")) as cancelled:
            page.click("button.cancel")
        assert cancelled.value.status == 200
        page.wait_for_selector(".turn[data-state='cancelled']")
    assert aborted and "ABORTED" in aborted[0].upper()  # the stream was aborted, not left to run on
    assert page.inner_text(".turn .outcome") == "Cancelled"
    assert page.inner_text("#chat-progress") == "Cancelled"
    assert page.is_disabled("button.cancel")
    session_id = session_of(page)
    stored = runs(seed, user, session_id)
    assert [(r["run_id"], r["status"], r["release_outcome"], r["content"]) for r in stored] == [
        (run_id, "CANCELLED", "CANCELLED", None)
    ]
    screenshot(page, "chat-cancelled")
    open_console(page, server, f"chat?session={session_id}")  # the history says so too
    page.wait_for_selector(".turn[data-state='cancelled']")
    assert page.inner_text(".turn .outcome") == "Cancelled"


def test_a_csv_uploaded_from_the_page_is_analysed_and_broken_down_by_region(
    page: Any, server: RunningServer, seed: Api, user: str
) -> None:
    open_console(page, server, "chat")
    open_panel(page)
    page.click("text=Create my personal workspace")
    page.wait_for_selector("#upload-workspace option", state="attached")
    page.set_input_files("#upload-file", files=[{"name": "sales.csv", "mimeType": "text/csv", "buffer": SALES_CSV}])
    page.click(".upload button[type=submit]")
    page.wait_for_selector(".upload-status:has-text('Uploaded sales.csv')")
    assert page.get_attribute("#upload-progress", "value") == "100"
    workspace_id = page.input_value("#upload-workspace")
    listed = seed.bearer("GET", f"/api/documents?workspace_id={workspace_id}", user, expect=200).json()["documents"]
    assert [(d["file_name"], d["kind"], d["current_version"]) for d in listed] == [("sales.csv", "csv", 1)]
    document_id = listed[0]["document_id"]
    assert page.is_checked(f"#doc-{document_id}")  # the upload is selected for the next message
    first = ask(page, "total amount by month")
    assert first.get_attribute("data-state") == "done"
    assert "sales.csv v1 (selected, tabular, read)" in first.locator(".source-context").inner_text()
    # No current selection: the follow-up reuses and reauthorises the table, and reruns the tabular engine.
    page.check("#mode-relevance")
    assert not page.is_checked(f"#doc-{document_id}")
    page.click(".panel-toggle")
    follow_up = ask(page, "now break that down by region")
    indicator = follow_up.locator(".source-context")
    assert indicator.get_attribute("data-engines") == "tabular"
    assert "sales.csv v1 (history, tabular, rerun)" in indicator.inner_text()
    assert "engine tabular" in indicator.inner_text()
    assert "north" in follow_up.locator(".answer-text").inner_text()
    stored = runs(seed, user, session_of(page))
    assert [r["content"]["source_context"]["decision"] for r in stored] == ["tabular", "tabular"]
    screenshot(page, "chat-tabular")


def test_panel_open_and_closed_send_byte_identical_requests(page: Any, server: RunningServer, seed: Api) -> None:
    open_console(page, server, "chat")
    bodies = chat_requests(page)
    ask(page, "hello")
    assert json.loads(bodies[0]) == {"query": "hello", "selection_mode": "relevance", "action_mode": "chat"}
    open_panel(page)
    demo = page.locator(".workspace:has(legend:has-text('Demo')) input[type=checkbox]").first
    demo_id = demo.get_attribute("value")
    demo.check()
    page.select_option("#action-mode", "analyze")
    screenshot(page, "chat-panel")
    ask(page, "total amount by month")
    page.click(".panel-toggle")  # closed: the same selection, and so the same request
    assert page.is_hidden("#chat-panel")
    ask(page, "total amount by month")
    assert len(bodies) == 3
    assert bodies[1] == bodies[2]
    assert json.loads(bodies[1]) == {
        "query": "total amount by month",
        "session_id": session_of(page),
        "selection_mode": "selected",
        "action_mode": "analyze",
        "document_ids": [demo_id],
    }


def test_a_revoked_workspaces_source_is_shown_as_not_reused(page: Any, server: RunningServer, seed: Api) -> None:
    owner = seed.token("olga", ["documents"])
    workspace = seed.bearer("POST", "/api/workspaces", owner, {"kind": "group", "name": "Finance"}, expect=201).json()
    path = f"/api/workspaces/{workspace['workspace_id']}"
    seed.bearer("PUT", f"{path}/members/{DEV_USER}", owner, {"role": "viewer"}, expect=200)
    upload = {
        "workspace_id": workspace["workspace_id"],
        "file_name": "refunds.md",
        "kind": "markdown",
        "content_base64": base64.b64encode(REFUNDS_MD).decode(),
    }
    seed.bearer("POST", "/api/documents", owner, upload, expect=201)
    open_console(page, server, "chat")
    open_panel(page)
    page.check(".workspace:has(legend:has-text('Finance')) input[type=checkbox]")
    first = ask(page, "What does the refunds policy say about approvals?")
    assert "refunds.md v1 (selected, narrative, read)" in first.locator(".source-context").inner_text()
    seed.bearer("DELETE", f"{path}/members/{DEV_USER}", owner, expect=200)
    page.check("#mode-relevance")
    second = ask(page, "What does the refunds policy say about deadlines?")
    revoked = second.locator(".source-context .source[data-outcome='revoked']")
    assert revoked.count() == 1
    assert revoked.inner_text() == "refunds.md v1 (history, revoked, not reused)"
    assert "not-reused" in (revoked.get_attribute("class") or "")
    assert "refunds.md" in second.locator(".limitations").inner_text()
    screenshot(page, "chat-revoked")
    assert serious_violations(page) == []


def answering(body: str) -> Any:
    def fulfil(route: Any) -> None:
        route.fulfill(status=200, content_type="text/event-stream", body=body)

    return fulfil


def test_fallback_and_failed_runs_are_shown_as_such(page: Any, server: RunningServer) -> None:
    # The offline model's demo never falls back; these frames are what the API sends when a run does.
    frames = {
        "fallback": [
            {
                "type": "start",
                "session_id": "ses_01JD0000000000000000000000",
                "run_id": "run_01JD0000000000000000000001",
            },
            {"type": "status", "code": "DIAGNOSING"},
            {"type": "content", "content": {"text": "Nothing new was found.", "references": [], "limitations": None}},
            {
                "type": "done",
                "session_id": "ses_01JD0000000000000000000000",
                "run_id": "run_01JD0000000000000000000001",
                "status": "SUCCESS",
                "intent": "DIAGNOSIS",
                "release_outcome": "FALLBACK",
                "model": "flowledger-offline-v1",
                "offline_model": True,
            },
        ],
        "failed": [
            {
                "type": "start",
                "session_id": "ses_01JD0000000000000000000000",
                "run_id": "run_01JD0000000000000000000002",
            },
            {"type": "status", "code": "ROUTING"},
            {"type": "error", "code": "ROUTING_UNAVAILABLE", "message": "the router could not route this query"},
        ],
    }
    for name, events in frames.items():
        body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
        page.route("**/api/chat", answering(body))
        open_console(page, server, "chat")
        turn = ask(page, f"a {name} turn")
        page.unroute("**/api/chat")
        assert turn.get_attribute("data-state") == name
        expected = {"fallback": "Fallback: no conclusion was released", "failed": "Failed"}[name]
        assert turn.locator(".outcome .pill").inner_text() == expected
    assert "the router could not route this query" in turn.locator(".outcome").inner_text()


def test_small_talk_shows_that_it_was_checked_against_nothing(page: Any, server: RunningServer) -> None:
    open_console(page, server, "chat")
    turn = ask(page, "hello")
    assert turn.get_attribute("data-state") == "done"
    assert turn.locator(".limitations").inner_text() == (
        "Limitations: Not checked against any document: this is a conversational answer, not a sourced one."
    )


def test_the_page_is_usable_on_a_phone(page: Any, server: RunningServer) -> None:
    page.set_viewport_size(PHONE)
    open_console(page, server, "chat")
    ask(page, "hello")
    open_panel(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "chat-phone")
    assert serious_violations(page) == []


def test_every_answer_links_to_its_flow_also_when_reloaded_from_the_history(
    page: Any, server: RunningServer, seed: Api
) -> None:
    open_console(page, server, "chat")
    link = ask(page, "hello").locator("a.flow-link")
    assert link.inner_text() == "How this was answered"
    flow_id = link.get_attribute("data-flow-id")
    assert link.get_attribute("href") == f"/console/flows/{flow_id}"
    assert seed.admin("GET", f"/admin/v1/reasoning/flows/{flow_id}", expect=200).json()["flow"]["flow_id"] == flow_id
    # The conversation opened by its URL shows the same link under the stored answer, and it opens the flow.
    open_console(page, server, f"chat?session={session_of(page)}")
    page.click(f".turn a.flow-link[data-flow-id='{flow_id}']")
    page.wait_for_url(f"**/console/flows/{flow_id}")
    page.wait_for_selector("main[data-ready='true']", timeout=30_000)
    assert "Page not found" not in page.locator("main").inner_text()  # the flow page, not the router's 404


def test_a_table_answer_is_a_table_and_a_follow_up_with_the_table_still_ticked_keeps_the_grouping(
    page: Any, server: RunningServer, seed: Api, user: str
) -> None:
    workspace = seed.bearer("POST", "/api/workspaces", user, {"kind": "group", "name": "Sales"}, expect=201).json()
    upload = {
        "workspace_id": workspace["workspace_id"],
        "file_name": "monthly.csv",
        "kind": "csv",
        "content_base64": base64.b64encode(SALES_CSV).decode(),
    }
    document_id = seed.bearer("POST", "/api/documents", user, upload, expect=201).json()["document"]["document_id"]
    open_console(page, server, "chat")
    open_panel(page)
    page.check(f"#doc-{document_id}")
    first = ask(page, "total amount by month").locator(".answer-table")
    assert first.locator("th").all_inner_texts() == ["month", "total_amount"]
    assert first.locator("tbody td:first-child").all_inner_texts() == ["2026-04", "2026-05"]  # key order
    assert first.locator("caption").inner_text() == "monthly.csv: 2 rows"
    assert page.is_checked(f"#doc-{document_id}")  # still ticked for the follow-up
    second = ask(page, "now break that down by region").locator(".answer-table")
    assert second.locator("th").all_inner_texts() == ["month", "region", "total_amount"]
    months_regions = [row.split("\t")[:2] for row in second.locator("tbody tr").all_inner_texts()]
    assert months_regions == [[m, r] for m in ("2026-04", "2026-05") for r in ("east", "north", "south")]
    screenshot(page, "chat-table")
    assert serious_violations(page) == []
