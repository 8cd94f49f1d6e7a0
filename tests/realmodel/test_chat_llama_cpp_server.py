"""The chat through `flowledger serve` on llama-cpp-python's server and SmolLM2, and ``auto`` stepping down.

This server answers a json_schema response_format with 500 and enforces ``json_object`` with a ``schema``
by grammar. Its native tool calling (chatml-function-calling) generates a call's arguments with no token limit,
whatever ``max_tokens`` says (576 tokens came back under max_tokens 384), so tools go as the next-action
schema, as ``auto`` does away from OpenAI. The stack runs as the README's compatibility table says to
configure it (``FLOWLEDGER_STRUCTURED_OUTPUT=json_object``); ``test_auto_modes_real`` shows ``auto`` finding
the mode itself, and ``test_native_tools_real`` native tools offered with ``tool_choice``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flowledger.chat.router import SCHEMA
from flowledger.diagnosis.demo_incident import DEMO_QUESTION
from tests.realmodel.chat_stack import ChatStack, start_stack
from tests.realmodel.servers import ModelServer

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def stack(llama_cpp_server: ModelServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChatStack]:
    data = tmp_path_factory.mktemp("real-llama-cpp") / "data"
    mark = llama_cpp_server.log_mark()
    running = start_stack(llama_cpp_server, data, FLOWLEDGER_STRUCTURED_OUTPUT="json_object")
    yield running
    running.stop()
    assert llama_cpp_server.refusals(mark) == []


def test_turns_use_the_json_object_dialect_and_nothing_is_refused(stack: ChatStack) -> None:
    system = stack.ask({"query": "hello"}, stream=True)
    knowledge = stack.ask({"query": "What does the on-call runbook say about paging?"})
    for turn in (system, knowledge):
        routing = turn.calls[0].request
        assert routing["response_format"] == {"type": "json_object", "schema": SCHEMA.schema}
    assert stack.run(system.outcome)["model_modes"] == {
        "structured_output": "json_object_schema",
        "tool_calling": "structured",
    }


def test_a_diagnosis_offers_its_tools_as_a_next_action_in_the_json_object_dialect(stack: ChatStack) -> None:
    turn = stack.ask({"query": DEMO_QUESTION})
    if turn.outcome.get("intent") == "DIAGNOSIS":
        steps = [c.request for c in turn.calls if "next" in str(c.request.get("response_format", {}))]
        assert steps and all("tools" not in r for r in steps)
        assert all(r["response_format"]["type"] == "json_object" for r in steps)
