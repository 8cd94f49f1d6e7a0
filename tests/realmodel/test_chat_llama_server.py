"""The chat through `flowledger serve` on llama.cpp's llama-server and SmolLM2, with the settings' defaults.

``auto`` modes: llama-server takes a strict json_schema, so nothing steps down; tools go as the next-action
schema (SmolLM2's template drops native tools). Every turn is checked by ``chat_stack.check_turn``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any, get_args

import httpx
import pytest

from flowledger.chat.models import ReasonCode
from flowledger.diagnosis.demo_incident import DEMO_QUESTION
from tests.realmodel.chat_stack import ChatStack, check_call, start_stack
from tests.realmodel.servers import ModelServer

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def stack(llama_server: ModelServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChatStack]:
    running = start_stack(llama_server, tmp_path_factory.mktemp("real-llama-server") / "data")
    mark = llama_server.log_mark()
    yield running
    running.stop()
    assert llama_server.refusals(mark) == []  # the server's own log agrees: nothing it refused


def demo_table_id(stack: ChatStack) -> str:
    found = re.findall(r"demo table\s+demo-sales\.csv (dc_[0-9A-Z]{26})", stack.serve.output())
    assert found, stack.serve.output()
    return str(found[-1])


def test_a_system_turn_streams_and_says_it_was_checked_against_nothing(stack: ChatStack) -> None:
    turn = stack.ask({"query": "hello, who are you?"}, stream=True)
    assert [type(e).__name__ for e in turn.events][:2] == ["StartEvent", "StatusEvent"]
    routing = turn.calls[0].request
    # The router's call: a strict schema the server enforces, and a small bound.
    assert routing["response_format"]["type"] == "json_schema" and routing["max_tokens"] <= 64
    if turn.outcome.get("intent") == "SYSTEM_CHAT" and turn.outcome["status"] == "SUCCESS":
        assert turn.outcome["content"]["limitations"].startswith("Not checked against any document")
    assert stack.run(turn.outcome)["model_modes"] == {"structured_output": "json_schema", "tool_calling": "structured"}


def test_a_knowledge_turn_publishes_only_references_it_was_given(stack: ChatStack) -> None:
    turn = stack.ask({"query": "What does the checkout incident runbook say to do first?"})
    run = stack.run(turn.outcome)
    if "error" in turn.outcome:  # a weak model's turn failed: the stored run says so and why, for the operator
        assert run["status"] == "FAILED", (run, turn.outcome)
        # A model failure names its kind; a turn the budget or a guard ended has none (the public code says).
        assert run.get("reason_code") in {None, *get_args(ReasonCode)}, run
    else:
        assert run["status"] == turn.outcome["status"]


def test_a_diagnosis_offers_its_tools_as_one_next_action_schema(stack: ChatStack) -> None:
    turn = stack.ask({"query": DEMO_QUESTION}, stream=True)
    with_tools = [c for c in turn.calls if "next" in str(c.request.get("response_format", {}))]
    if turn.outcome.get("intent") == "DIAGNOSIS":
        assert with_tools, "the diagnosis step offered no tools"
        for call in with_tools:
            assert "tools" not in call.request  # the server would drop them; the schema carries them
            alternatives = call.request["response_format"]["json_schema"]["schema"]["properties"]["next"]["anyOf"]
            names = [a["properties"]["action"]["enum"][0] for a in alternatives]
            assert "final_answer" in names and len(names) >= 2
    assert len(turn.calls) <= 1 + 3 + 1  # router, at most 3 diagnosis calls, a knowledge answer at most


def test_a_table_turn_and_its_follow_up_read_the_selected_table(stack: ChatStack) -> None:
    table = demo_table_id(stack)
    first = stack.ask({"query": "total amount by month", "selection_mode": "selected", "document_ids": [table]})
    # An explicit selection is never answered by small talk.
    assert first.outcome.get("intent") in {"KNOWLEDGE_QUERY", "DIAGNOSIS", None}
    routing = first.calls[0].request["response_format"]["json_schema"]["schema"]
    assert routing["properties"]["intent"]["enum"] == ["KNOWLEDGE_QUERY", "DIAGNOSIS"]
    follow = stack.ask({"query": "now break that down by region", "session_id": first.outcome["session_id"]})
    assert follow.outcome["session_id"] == first.outcome["session_id"]


def test_a_cancelled_turn_tells_one_story(stack: ChatStack) -> None:
    """Cancel through the API while the model works: the stream and the stored run agree."""
    started = threading.Event()
    events: list[dict[str, Any]] = []

    def stream() -> None:
        url = f"{stack.serve.base_url}/api/chat"
        with httpx.stream("POST", url, json={"query": DEMO_QUESTION}, headers=stack.headers, timeout=600) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line.removeprefix("data: ")))
                    started.set()

    reader = threading.Thread(target=stream)
    reader.start()
    assert started.wait(120), events
    start = events[0]
    assert start["type"] == "start"
    cancelled = httpx.post(f"{stack.serve.base_url}/api/chat/runs/{start['run_id']}/cancel", headers=stack.headers)
    reader.join(600)
    stored = stack.run(start)
    if cancelled.status_code == 200:  # the cancel won: the stream ends cancelled, never another outcome
        assert (events[-1]["type"], events[-1]["code"]) == ("error", "CANCELLED"), events[-1]
        assert stored["status"] == "CANCELLED"
    else:  # the turn had already ended: 409, and the stream ended as the run did
        assert cancelled.status_code == 409, cancelled.text
        assert stored["status"] != "CANCELLED"
    assert not any(e["type"] == "content" for e in events) or stored["status"] == "SUCCESS"


def test_the_cli_chats_with_the_real_model(stack: ChatStack) -> None:
    mark = stack.proxy.mark()
    done = stack.serve.cli("chat", "--data-dir", str(stack.serve.data_dir.path), "hello there")
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    calls = stack.proxy.completions(mark)
    assert calls
    for call in calls:  # the CLI's turn went through the same bounded, accepted calls
        check_call(call)
    if "SYSTEM_CHAT" in done.stderr and done.returncode == 0:  # small talk always shows its limitation
        assert "Not checked against any document" in done.stdout, done.stdout
