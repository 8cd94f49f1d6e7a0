"""The chat through `flowledger serve` on llama-cpp-python's server and SmolLM2, and ``auto`` stepping down.

This server answers a json_schema response_format with 500 and enforces ``json_object`` with a ``schema``
by grammar; it applies native tools only when ``tool_choice`` names one. The stack runs as the README's
compatibility table says to configure it (``FLOWLEDGER_STRUCTURED_OUTPUT=json_object``), with native tools
to prove they are offered with ``tool_choice``; ``test_auto_modes_real`` shows ``auto`` finding the mode itself.
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
    running = start_stack(
        llama_cpp_server, data, FLOWLEDGER_STRUCTURED_OUTPUT="json_object", FLOWLEDGER_TOOL_CALLING="native"
    )
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
        "tool_calling": "native",
    }


def test_a_diagnosis_offers_native_tools_with_tool_choice(stack: ChatStack) -> None:
    turn = stack.ask({"query": DEMO_QUESTION})
    if turn.outcome.get("intent") == "DIAGNOSIS":
        offered = [c.request for c in turn.calls if "tools" in c.request]
        assert offered and all(r["tool_choice"] == "auto" for r in offered)
        assert all("parallel_tool_calls" not in r for r in offered)  # this server is not sent it
