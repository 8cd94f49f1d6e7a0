"""The real OpenAI adapter against a scripted OpenAI-compatible server: outputs and failures."""

from __future__ import annotations

from typing import Any

import pytest

from flowledger.chat.models import Intent
from flowledger.chat.router import SCHEMA, IntentRouter, RoutingUnavailable
from flowledger.llm.openai_adapter import ModelRejected, OpenAIChatModel
from flowledger.llm.ports import Message, ModelInvalidOutput, ModelTimeout, ModelTransportError
from flowledger.llm.retry import HarnessRetryPolicies


@pytest.fixture
def model(scripted_openai: Any) -> OpenAIChatModel:
    return OpenAIChatModel("scripted-model", "sk-test", scripted_openai.base_url)


def test_a_strict_schema_is_requested_and_the_object_parsed(model: OpenAIChatModel, scripted_openai: Any) -> None:
    scripted_openai.script = [{"json": {"intent": "DIAGNOSIS"}}]
    reply = model.complete([Message("user", "q")], schema=SCHEMA, timeout_seconds=5)
    assert reply.data == {"intent": "DIAGNOSIS"} and reply.usage.total == 18
    sent = scripted_openai.requests[0]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["strict"] is True
    assert sent["json_schema"]["schema"]["properties"]["intent"]["enum"] == [i.value for i in Intent]


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ({"raw": "DIAGNOSIS, probably"}, ModelInvalidOutput),
        ({"json": ["DIAGNOSIS"]}, ModelInvalidOutput),
        ({"delay": 1.5, "json": {"intent": "DIAGNOSIS"}}, ModelTimeout),
        ({"drop": True}, ModelTransportError),
        ({"status": 503}, ModelTransportError),
        ({"status": 429}, ModelTransportError),
        ({"status": 409}, ModelTransportError),
        ({"status": 408}, ModelTimeout),
        ({"status": 400}, ModelRejected),
        ({"status": 401}, ModelRejected),
        ({"status": 404}, ModelRejected),
        ({"status": 422}, ModelRejected),
    ],
)
def test_failures_map_to_the_ports_errors(
    model: OpenAIChatModel, scripted_openai: Any, entry: dict[str, Any], error: type[Exception]
) -> None:
    scripted_openai.script = [entry]
    with pytest.raises(error):
        model.complete([Message("user", "q")], schema=SCHEMA, timeout_seconds=0.5)


@pytest.mark.parametrize(
    "first",
    [
        {"json": {"intent": "WEATHER"}},
        {"delay": 1.5, "json": {"intent": "X"}},
        {"drop": True},
        {"status": 500},
        {"json": {"intent": "DIAGNOSIS", "why": "x"}},
    ],
)
def test_router_retries_once_with_identical_input(
    model: OpenAIChatModel, scripted_openai: Any, first: dict[str, Any]
) -> None:
    scripted_openai.script = [first, {"json": {"intent": "KNOWLEDGE_QUERY"}}]
    router = IntentRouter(model, HarnessRetryPolicies.intent_router(), 0.5)
    routing = router.route("what is the ledger?", None, None)
    assert (routing.intent, routing.attempts) == (Intent.KNOWLEDGE_QUERY, 2)
    first_input, second_input = (r["messages"] for r in scripted_openai.requests)
    assert first_input == second_input


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_router_does_not_retry_a_refused_request(model: OpenAIChatModel, scripted_openai: Any, status: int) -> None:
    scripted_openai.script = [{"status": status}, {"json": {"intent": "DIAGNOSIS"}}]
    with pytest.raises(RoutingUnavailable) as refused:
        IntentRouter(model, HarnessRetryPolicies.intent_router(), 0.5).route("q", None, None)
    assert len(scripted_openai.requests) == 1 and refused.value.attempts == 1


def test_router_gives_up_after_two_failures(model: OpenAIChatModel, scripted_openai: Any) -> None:
    scripted_openai.script = [{"json": {"intent": "NOPE"}}, {"raw": "nope"}, {"json": {"intent": "DIAGNOSIS"}}]
    with pytest.raises(RoutingUnavailable) as gave_up:
        IntentRouter(model, HarnessRetryPolicies.intent_router(), 0.5).route("q", None, None)
    assert len(scripted_openai.requests) == 2 and gave_up.value.attempts == 2


def test_tool_calls_come_back_parsed(model: OpenAIChatModel, scripted_openai: Any) -> None:
    from flowledger.llm.ports import ToolSpec

    call = {"id": "call_1", "type": "function", "function": {"name": "query_logs", "arguments": '{"service": "pay"}'}}
    scripted_openai.script = [{"tool_calls": [call]}]
    tool = ToolSpec(
        "query_logs",
        "Search the logs",
        {
            "type": "object",
            "properties": {"service": {"type": "string"}},
            "required": ["service"],
            "additionalProperties": False,
        },
    )
    reply = model.complete([Message("user", "q")], tools=[tool], timeout_seconds=5)
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("call_1", "query_logs", {"service": "pay"})]
    assert scripted_openai.requests[0]["tools"][0]["function"]["strict"] is True
    scripted_openai.script = [{"tool_calls": [{**call, "function": {"name": "query_logs", "arguments": "{oops"}}]}]
    with pytest.raises(ModelInvalidOutput):
        model.complete([Message("user", "q")], tools=[tool], timeout_seconds=5)
