"""The `chat` command's source options, its sources line, and the dev server's continuity default."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

from flowledger.cli import build_parser, main
from flowledger.cli.chat import chat_request_body
from flowledger.cli.chat_output import print_chat_stream, sources_line
from flowledger.config import load_settings
from flowledger.local.demo_table import demo_sales_csv
from flowledger.local.devserver import CONTINUITY_VARIABLE, _function_environment, local_continuity_default
from flowledger.local.functions import settings_environment

A, B, C = "dc_" + "A" * 26, "dc_" + "B" * 26, "dc_" + "C" * 26


def body_of(*argv: str) -> dict[str, Any]:
    return chat_request_body(build_parser().parse_args(["chat", "what is in it?", *argv]))


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one-line argparse refusal of ``flowledger chat ARGV`` (exit 2, usage first, no traceback)."""
    with pytest.raises(SystemExit) as exited:
        main(["chat", "what is in it?", "--url", "http://127.0.0.1:9", "--token", "t", *argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert err.startswith("usage: flowledger chat") and "Traceback" not in err
    return err.strip().splitlines()[-1]


# ---- the request body -----------------------------------------------------------------------------


def test_no_source_option_sends_what_chat_always_sent() -> None:
    assert body_of() == {"query": "what is in it?"}
    assert body_of("--session", "ses_1") == {"query": "what is in it?", "session_id": "ses_1"}


def test_select_twice_sends_both_ids_in_order_as_an_explicit_selection() -> None:
    assert body_of("--select", B, "--select", A) == {
        "query": "what is in it?",
        "selection_mode": "selected",
        "document_ids": [B, A],
    }


def test_all_history_action_and_include_prior_become_their_fields() -> None:
    assert body_of("--all")["selection_mode"] == "all"
    assert body_of("--history", "--session", "ses_1")["selection_mode"] == "history"
    assert body_of("--all", "--action", "analyze")["action_mode"] == "analyze"
    prior = body_of("--select", A, "--include-prior", "--session", "ses_1")
    assert (prior["document_ids"], prior["include_prior"]) == ([A], True)


def test_compare_sends_its_source_and_targets_and_no_selection_mode() -> None:
    assert body_of("--action", "compare", "--source", A, "--target", B, "--target", C) == {
        "query": "what is in it?",
        "action_mode": "compare",
        "source": A,
        "targets": [B, C],
    }


# ---- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--select", A, "--all"], "argument --all: not allowed with argument --select"),
        (["--history", "--select", A], "argument --select: not allowed with argument --history"),
        (["--all", "--history"], "argument --history: not allowed with argument --all"),
        (["--action", "summarise"], "argument --action: invalid choice: 'summarise'"),
        (["--include-prior"], "--include-prior adds the previous turn's sources to an explicit selection"),
        (["--all", "--include-prior"], "use it with --select"),
        (["--source", A, "--target", B], "--source and --target go with --action compare"),
        (["--action", "analyze", "--target", B], "--source and --target go with --action compare"),
        (["--action", "compare", "--source", A], "--action compare needs --source DOC and at least one --target"),
        (["--action", "compare", "--target", B], "--action compare needs --source DOC"),
        (["--action", "compare", "--all", "--source", A, "--target", B], "takes only --source and --target"),
        (["--action", "compare", "--select", C, "--source", A, "--target", B], "takes only --source and --target"),
        (["--select", A, "--select", A], f"--select names {A} twice"),
        (["--action", "compare", "--source", A, "--target", A], "cannot be both the --source and a --target"),
    ],
)
def test_contradictory_options_are_refused_before_any_connection(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # --url points at a closed port: reaching it would be a different error (exit 2, no usage line).
    line = refused(capsys, *argv)
    assert line.startswith("flowledger chat: error: ") and message in line, line


def test_every_source_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["chat", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for option in ("--select DOCUMENT_ID", "--all", "--history", "--action", "--source DOC", "--target DOC"):
        assert option in out
    assert "selection_mode selected" in out and "--include-prior with --select" in out


# ---- the sources line -----------------------------------------------------------------------------


def use(name: str, how: str, outcome: str, engine: str | None = None, version: int | None = 1) -> dict[str, Any]:
    return {"document_id": A, "file_name": name, "version": version, "how": how, "engine": engine, "outcome": outcome}


def test_the_sources_line_names_each_source_and_the_decision() -> None:
    context = {
        "decision": "tabular",
        "engines": ["tabular"],
        "sources": [use("demo-sales.csv", "selected", "read", "tabular")],
    }
    assert sources_line(context) == "  sources: demo-sales.csv v1 (selected, tabular, read) · decision tabular"


def test_revoked_stale_and_partial_sources_are_visible() -> None:
    revoked = use("refunds.md", "history", "revoked", version=None)
    history = use("sales.csv", "history", "reused", "history")
    partial = {**use("big.csv", "all", "read", "tabular", version=3), "evidence_status": "partial", "coverage": 0.4}
    changed = use("prices.csv", "history", "changed", "tabular", version=2)
    context = {"decision": "both", "engines": ["tabular"], "sources": [revoked, history, partial, changed]}
    assert sources_line(context) == (
        "  sources: refunds.md (history, revoked), sales.csv v1 (history, reused),"
        " big.csv v3 (all, tabular, read, partial, coverage 40%), prices.csv v2 (history, tabular, changed)"
        " · decision both"
    )


def test_many_sources_stay_on_one_line_with_the_rest_counted() -> None:
    context = {"decision": "narrative", "sources": [use(f"d{i}.md", "all", "read", "narrative") for i in range(8)]}
    line = sources_line(context)
    assert "\n" not in line and "d4.md" in line and "d5.md" not in line and "+3 more" in line


def content_stream(content: dict[str, Any]) -> list[str]:
    frames = [("content", {"content": content}), ("done", {"status": "SUCCESS", "intent": "K", "model": "m"})]
    return [line for kind, data in frames for line in (f"event: {kind}", f"data: {json.dumps(data)}", "")]


def test_the_sources_line_follows_the_references_and_references_carry_their_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    context = {"decision": "tabular", "engines": ["tabular"], "sources": [use("t.csv", "selected", "read", "tabular")]}
    content = {
        "text": "north 15",
        "references": [{"document_id": A, "title": "t.csv", "version": 2}, {"document_id": B, "title": "kb"}],
        "source_context": context,
    }
    assert print_chat_stream(content_stream(content)) == 0
    out, err = capsys.readouterr()
    assert out == f"north 15\n  [{A} v2] t.csv\n  [{B}] kb\n"
    assert err.splitlines()[0] == "  sources: t.csv v1 (selected, tabular, read) · decision tabular"


def test_an_answer_without_a_source_context_prints_no_sources_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert print_chat_stream(content_stream({"text": "hello", "references": []})) == 0
    assert "sources:" not in capsys.readouterr().err


# ---- the dev server's continuity default and the demo table ----------------------------------------


@pytest.mark.usefixtures("clean_environment")
def test_continuity_is_on_locally_for_the_chat_app_and_the_function_workers() -> None:
    settings = load_settings(**local_continuity_default({}))
    assert settings.enable_mixed_source_conversation_continuity is True
    assert _function_environment(settings)[CONTINUITY_VARIABLE] == "true"


@pytest.mark.usefixtures("clean_environment")
@pytest.mark.parametrize("name", [CONTINUITY_VARIABLE, CONTINUITY_VARIABLE.lower()])
def test_the_environment_variable_wins_over_the_local_default(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "false")
    environ = {name: "false"}
    assert local_continuity_default(environ) == {}
    settings = load_settings(**local_continuity_default(environ))
    assert settings.enable_mixed_source_conversation_continuity is False
    assert settings_environment(settings)[CONTINUITY_VARIABLE] == "false"


def test_the_demo_table_is_forty_deterministic_sales_rows() -> None:
    assert demo_sales_csv() == demo_sales_csv()
    rows = list(csv.DictReader(io.StringIO(demo_sales_csv().decode())))
    assert len(rows) == 40 and list(rows[0]) == ["region", "store", "month", "amount"]
    assert {r["region"] for r in rows} == {"north", "south", "east", "west"}
    assert len({(r["store"], r["month"]) for r in rows}) == 40  # one row per store and month
    assert all(float(r["amount"]) > 0 for r in rows)
