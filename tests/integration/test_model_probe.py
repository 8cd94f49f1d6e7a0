"""`flowledger model probe` and serve's model line against the scripted OpenAI-compatible server.

Each scripted server answers by the shape of the request (what ``response_format``, ``tools`` and ``stream`` it
carries), as a real server's dialect would: the probe must tell "accepted" from "enforced", pick the mode the
chat can use, and say plainly when it can use none.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from flowledger.cli import main
from flowledger.config import load_settings
from flowledger.llm.output_checks import STOP_SEQUENCES
from flowledger.llm.probe import BANNER_BUDGET_SECONDS, NEXT_ACTION_MAX_TOKENS, model_banner
from tests.integration.conftest import ScriptedOpenAI

VALID = {"colour": "teal", "count": 3}
NEXT_ACTION = {"next": {"action": "get_weather", "arguments": {"city": "Paris"}}}
REFUSE_JSON_SCHEMA = "1 validation error: ('body', 'response_format', 'type') Input should be 'text' or 'json_object'"
Answer = Callable[[dict[str, Any]], dict[str, Any]]


def dialect(*, json_schema: str, json_object_schema: str, tool_calls: bool = False) -> Answer:
    """A server's answer by request shape; ``json_schema`` and ``json_object_schema`` are ``refuse``,
    ``enforce`` (a valid object) or ``ignore`` (JSON of the model's own shape)."""

    def shaped(how: str, body: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
        if how == "refuse":
            return {"status": 500, "message": REFUSE_JSON_SCHEMA}
        if how == "ignore":
            return {"json": {"poem": "waves"}}
        return {"json": NEXT_ACTION if "next" in schema.get("properties", {}) else VALID}

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        shape = body.get("response_format") or {}
        if shape.get("type") == "json_schema":
            return shaped(json_schema, body, shape["json_schema"]["schema"])
        if shape.get("type") == "json_object" and "schema" in shape:
            return shaped(json_object_schema, body, shape["schema"])
        if shape.get("type") == "json_object":
            return {"text": '{"poem": "waves"}'}
        if "tools" in body and tool_calls:
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
            return {"tool_calls": [call]}
        return {"text": "Hello there, I am a scripted model with a lot to say about the sea and the sky."}

    return answer


@pytest.fixture
def server(scripted_openai: ScriptedOpenAI, clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> ScriptedOpenAI:
    """The scripted server, with the models list a real one serves (it answers only POSTs by itself)."""

    def do_GET(handler: Any) -> None:
        handler._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "test"}]})

    monkeypatch.setattr(scripted_openai.server.RequestHandlerClass, "do_GET", do_GET, raising=False)
    return scripted_openai


def probe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["model", "probe", *args])
    out, err = capsys.readouterr()
    return status, out, err


def probe_json(capsys: pytest.CaptureFixture[str], server: ScriptedOpenAI, *args: str) -> tuple[int, dict[str, Any]]:
    status, out, err = probe(capsys, "--base-url", server.base_url, "--model", "scripted", "--json", *args)
    assert "Traceback" not in err
    return status, json.loads(out)


def results(report: dict[str, Any]) -> dict[str, str]:
    return {check["check"]: check["result"] for check in report["checks"]}


def test_a_server_refusing_json_schema_but_enforcing_json_object_with_a_schema_gets_json_object_schema(
    server: ScriptedOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script = [dialect(json_schema="refuse", json_object_schema="enforce")] * 20
    status, out, err = probe(capsys, "--base-url", server.base_url, "--model", "scripted")
    assert status == 0, out + err
    rows = {line.split()[0] + " " + line.split()[1]: line for line in out.splitlines() if len(line.split()) > 2}
    assert "refused" in rows["structured json_schema"] and "500: 1 validation error" in rows["structured json_schema"]
    assert "enforced" in rows["structured json_object_schema"]
    assert "not obeyed" in rows["structured json_object"]  # JSON, but of the model's own shape
    assert "structured output  json_object_schema: the strictest mode accepted and enforced" in out
    assert "tool calling       structured: no native tool call came back" in out
    assert out.rstrip().endswith("verdict            usable")
    assert "note" not in out  # auto steps down past the refusal to the same mode; tools structured off OpenAI
    # Every call bounded; tools offered with tool_choice auto; every structured mode asked for as output_modes says.
    assert all(0 < r["max_tokens"] <= NEXT_ACTION_MAX_TOKENS for r in server.requests), server.requests
    assert all(r["tool_choice"] == "auto" for r in server.requests if "tools" in r)
    shapes = [r["response_format"]["type"] for r in server.requests if "response_format" in r]
    assert shapes == ["json_schema", "json_object", "json_object", "json_object"]  # the 4th: the next action
    assert next(r for r in server.requests if r.get("stream"))["stream_options"] == {"include_usage": True}


def test_json_gives_the_same_results(server: ScriptedOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    server.script = [dialect(json_schema="refuse", json_object_schema="enforce")] * 20
    status, report = probe_json(capsys, server)
    assert status == 0
    assert report["structured_output"] == "json_object_schema"
    assert report["tool_calling"] == "structured"
    assert report["usable"] is True and report["problem"] is None
    assert report["chat_uses"] == {"structured_output": "json_object_schema", "tool_calling": "structured"}
    assert results(report) == {
        "models list": "ok",
        "plain chat": "ok",
        "structured json_schema": "refused",
        "structured json_object_schema": "enforced",
        "structured json_object": "not obeyed",
        "structured prompt": "not JSON",
        "tools, tool_choice auto": "no call",
        "parallel tool calls": "no call",
        "next action (structured tools)": "valid",
        # The scripted server always says finish_reason stop and streams nothing.
        "max_tokens 8": "unclear",
        "streaming usage": "no usage",
    }


def test_a_schema_accepted_but_not_enforced_is_not_chosen_and_the_note_says_how_to_choose_the_enforced_one(
    server: ScriptedOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script = [dialect(json_schema="ignore", json_object_schema="enforce")] * 20
    status, report = probe_json(capsys, server)
    assert status == 0
    assert results(report)["structured json_schema"] == "not enforced"
    assert report["structured_output"] == "json_object_schema"
    # auto keeps a mode the server accepts: the chat would stay at json_schema unless told.
    assert report["chat_uses"]["structured_output"] == "json_schema"
    assert report["notes"] == [
        "with FLOWLEDGER_STRUCTURED_OUTPUT=auto the chat uses json_schema;"
        " FLOWLEDGER_STRUCTURED_OUTPUT=json_object would use json_object_schema"
    ]


def test_native_tool_calls_that_come_back_choose_native(
    server: ScriptedOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script = [dialect(json_schema="enforce", json_object_schema="enforce", tool_calls=True)] * 20
    status, report = probe_json(capsys, server)
    assert status == 0
    assert results(report)["tools, tool_choice auto"] == "called"
    assert results(report)["parallel tool calls"] == "one call"
    assert report["structured_output"] == "json_schema"
    assert report["tool_calling"] == "native"
    assert any("FLOWLEDGER_TOOL_CALLING=native would match" in note for note in report["notes"])


def test_no_mode_giving_json_exits_1(server: ScriptedOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    server.script = [lambda body: {"text": "Waves, waves and more waves."}] * 20
    status, out, err = probe(capsys, "--base-url", server.base_url, "--model", "scripted")
    assert status == 1
    assert "verdict            NOT usable: no structured-output mode gave a JSON object" in out
    assert "structured output  json_schema: the strictest mode accepted, though its answer was not JSON" in out
    assert "Traceback" not in err


def test_a_refused_plain_chat_exits_1_and_skips_the_rest(
    server: ScriptedOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script = [{"status": 404, "message": "model 'nope' not found"}]
    status, report = probe_json(capsys, server)
    assert status == 1
    assert report["problem"] == "a plain chat refused: 404: model 'nope' not found"
    assert len(server.requests) == 1  # nothing more was asked
    assert set(list(results(report).values())[2:]) == {"skipped"}


def test_an_unreachable_endpoint_exits_1_with_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    started = time.monotonic()
    status, out, err = probe(capsys, "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m")
    assert status == 1
    assert time.monotonic() - started < 5  # nothing more is tried once the endpoint does not answer
    assert "Traceback" not in out + err
    assert "models list                     failed   cannot connect: connection refused" in out
    assert "verdict            NOT usable: the models list failed: cannot connect: connection refused" in out


def test_the_defaults_are_the_chats_own_settings(
    server: ScriptedOpenAI, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("FLOWLEDGER_CHAT_MODEL", "scripted")
    server.script = [dialect(json_schema="enforce", json_object_schema="enforce")] * 20
    status, out, _ = probe(capsys)
    assert status == 0
    assert f"endpoint           {server.base_url}, model scripted" in out
    assert {r["model"] for r in server.requests} == {"scripted"}


def test_no_endpoint_configured_exits_2(clean_environment: None, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = probe(capsys)
    assert status == 2
    assert out == ""
    assert err.startswith("flowledger: error: no model endpoint is configured") and err.count("\n") == 1, err


# ---- the line `flowledger serve` prints for a configured model ----


@pytest.fixture
def banner(clean_environment: None) -> Iterator[Callable[..., str]]:
    def line(base_url: str, **settings: Any) -> str:
        return model_banner(load_settings(openai_base_url=base_url, chat_model="scripted", **settings))

    yield line


def test_serve_says_a_reachable_model_and_the_modes_the_chat_starts_with(
    server: ScriptedOpenAI, banner: Callable[..., str]
) -> None:
    server.script = [{"text": "Hi"}, {"text": "Hi"}]
    host = server.base_url.split("/")[2]
    assert banner(server.base_url) == (
        f"scripted at {host} — reachable, structured output auto, tools structured"
        " (`flowledger model probe` checks each mode)"
    )
    assert [r["max_tokens"] for r in server.requests] == [1]  # one token, to see the model answer at all
    assert banner(server.base_url, structured_output="json_object", tool_calling="native").startswith(
        f"scripted at {host} — reachable, structured output json_object, tools native"
    )


def test_serve_says_an_unreachable_model_will_fail_turns(banner: Callable[..., str]) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert banner(f"http://127.0.0.1:{port}/v1") == (
        f"scripted at 127.0.0.1:{port} — unreachable (cannot connect: connection refused);"
        " chat turns will fail until it answers"
    )


def test_serve_waits_for_a_slow_model_no_longer_than_its_budget(
    server: ScriptedOpenAI, banner: Callable[..., str]
) -> None:
    server.script = [{"text": "Hi", "delay": BANNER_BUDGET_SECONDS + 1}]
    started = time.monotonic()
    line = banner(server.base_url)
    assert time.monotonic() - started < BANNER_BUDGET_SECONDS + 0.5
    assert "— a 1-token chat failed (no answer within" in line
    assert line.endswith("; chat turns will fail until it answers")


def test_the_probe_sends_the_chats_stop_sequences_and_goes_on_without_them_where_refused(
    server: ScriptedOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = dialect(json_schema="enforce", json_object_schema="enforce")

    def no_stops(body: dict[str, Any]) -> dict[str, Any]:
        return {"status": 400, "message": "'stop' is not supported"} if "stop" in body else answer(body)

    server.script = [no_stops] * 20
    status, report = probe_json(capsys, server)
    assert status == 0 and report["usable"] is True
    assert results(report)["plain chat"] == "ok"
    first, second, *rest = [r for r in server.requests if "messages" in r]
    assert first["stop"] == list(STOP_SEQUENCES) and "stop" not in second  # refused once, then never sent
    assert all("stop" not in r for r in rest)
