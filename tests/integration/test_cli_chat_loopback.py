"""The `chat` command's source options reach the server as the request body says (a loopback server)."""

from __future__ import annotations

import pytest

from tests.integration.test_cli import DONE, START, ScriptedChat, ask, chat_server, sse

__all__ = ["chat_server"]  # the fixture, imported so pytest finds it here

A, B = "dc_" + "A" * 26, "dc_" + "B" * 26
CONTEXT = {
    "decision": "history",
    "engines": [],
    "sources": [
        {
            "document_id": A,
            "file_name": "a.csv",
            "version": 2,
            "how": "selected",
            "engine": "history",
            "outcome": "reused",
        },
        {"document_id": B, "file_name": "refunds.md", "version": None, "how": "history", "outcome": "revoked"},
    ],
}
CONTENT = ("content", {"content": {"text": "As before.", "references": [], "source_context": CONTEXT}})


def test_select_twice_posts_both_ids_and_the_answer_shows_its_sources(
    chat_server: ScriptedChat, capsys: pytest.CaptureFixture[str]
) -> None:
    chat_server.body = sse(START, CONTENT, DONE)
    assert ask(chat_server.url, "--session", "ses_1", "--select", A, "--select", B, "--include-prior") == 0
    assert [r["body"] for r in chat_server.requests] == [
        {
            "query": "when are checkpoints taken?",
            "session_id": "ses_1",
            "selection_mode": "selected",
            "document_ids": [A, B],
            "include_prior": True,
        }
    ]
    out, err = capsys.readouterr()
    assert out == "As before.\n"
    assert "  sources: a.csv v2 (selected, history, reused), refunds.md (history, revoked) · decision history\n" in err


def test_a_refused_combination_sends_nothing(chat_server: ScriptedChat, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        ask(chat_server.url, "--all", "--include-prior")
    assert exited.value.code == 2
    assert chat_server.requests == []
    assert "--include-prior" in capsys.readouterr().err


FLOW = "fl_" + "F" * 26


def test_the_answer_names_its_flow_with_the_console_link(
    chat_server: ScriptedChat, capsys: pytest.CaptureFixture[str]
) -> None:
    done = ("done", {**DONE[1], "flow_id": FLOW})
    chat_server.body = sse(("start", {**START[1], "flow_id": FLOW}), CONTENT, done)
    assert ask(chat_server.url) == 0
    err = capsys.readouterr().err
    assert f"  flow: {FLOW}  {chat_server.url.rstrip('/')}/console/flows/{FLOW}\n" in err


def test_an_answer_whose_flow_was_not_recorded_says_so_and_links_nothing(
    chat_server: ScriptedChat, capsys: pytest.CaptureFixture[str]
) -> None:
    chat_server.body = sse(("start", {**START[1], "flow_id": FLOW}), CONTENT, ("done", {**DONE[1], "flow_id": None}))
    assert ask(chat_server.url) == 0
    err = capsys.readouterr().err
    assert "  flow: not recorded" in err and "/console/flows/" not in err


def test_a_table_answer_prints_as_a_table_and_says_how_many_rows_are_shown(
    chat_server: ScriptedChat, capsys: pytest.CaptureFixture[str]
) -> None:
    table = {
        "document_id": A,
        "title": "demo-sales.csv",
        "columns": ["month", "total_amount"],
        "rows": [["2026-01", 142084.5], ["2026-02", 9.0]],
        "total_rows": 5,
        "rows_shown": 2,
    }
    content = ("content", {"content": {"text": "Totals by month.", "references": [], "tables": [table]}})
    chat_server.body = sse(START, content, DONE)
    assert ask(chat_server.url) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "Totals by month.",
        "  month    total_amount",
        "  -------  ------------",
        "  2026-01      142084.5",
        "  2026-02           9.0",
        "  (2 of 5 rows shown)",
    ]
