"""The real OpenAI adapter against a scripted OpenAI-compatible server: outputs, modes and failures."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from flowledger.chat.models import Intent
from flowledger.chat.router import SCHEMA, IntentRouter, RoutingUnavailable
from flowledger.llm.offline import OfflineChatModel
from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.llm.ports import (
    Message,
    ModelInvalidOutput,
    ModelRefused,
    ModelTimeout,
    ModelTransportError,
    ToolCall,
    ToolSpec,
)
from flowledger.llm.retry import HarnessRetryPolicies
from flowledger.reasoning.step_evidence import model_call_outputs

TOOL = ToolSpec(
    "query_logs",
    "Search the logs",
    {
        "type": "object",
        "properties": {"service": {"type": "string"}},
        "required": ["service"],
        "additionalProperties": False,
    },
)
# llama-cpp-python 0.3.36's answer to a json_schema response_format (its pydantic model allows two types).
REFUSED_JSON_SCHEMA = (
    "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should be 'text' or "
    "'json_object' [type=literal_error, input_value='json_schema', input_type=str]"
)


@pytest.fixture
def model(scripted_openai: Any) -> OpenAIChatModel:
    return OpenAIChatModel("scripted-model", "sk-test", scripted_openai.base_url)


def test_a_strict_schema_is_requested_and_the_object_parsed(model: OpenAIChatModel, scripted_openai: Any) -> None:
    scripted_openai.script = [{"json": {"intent": "DIAGNOSIS"}}]
    reply = model.complete([Message("user", "q")], schema=SCHEMA, timeout_seconds=5, max_tokens=64)
    assert reply.data == {"intent": "DIAGNOSIS"} and reply.usage.total == 18
    sent = scripted_openai.requests[0]
    assert sent["response_format"]["type"] == "json_schema" and sent["response_format"]["json_schema"]["strict"]
    assert sent["response_format"]["json_schema"]["schema"]["properties"]["intent"]["enum"] == [i.value for i in Intent]
    # Every call is bounded; a server that is not OpenAI's own API gets the classic field name.
    assert sent["max_tokens"] == 64 and "max_completion_tokens" not in sent


def test_a_call_without_a_size_is_still_bounded(model: OpenAIChatModel, scripted_openai: Any) -> None:
    scripted_openai.script = [{"text": "hi"}]
    model.complete([Message("user", "q")], timeout_seconds=5)
    assert 0 < scripted_openai.requests[0]["max_tokens"] <= 1024


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
        ({"status": 500, "message": "CUDA out of memory"}, ModelTransportError),
        ({"status": 400}, ModelRefused),
        ({"status": 401}, ModelRefused),
        ({"status": 404}, ModelRefused),
        ({"status": 422}, ModelRefused),
        ({"status": 500, "message": REFUSED_JSON_SCHEMA}, ModelRefused),
    ],
)
def test_failures_map_to_the_ports_errors(scripted_openai: Any, entry: dict[str, Any], error: type[Exception]) -> None:
    # The mode pinned, as FLOWLEDGER_STRUCTURED_OUTPUT=json_schema does: a refusal is final.
    model = OpenAIChatModel("scripted-model", "sk-test", scripted_openai.base_url, structured_output="json_schema")
    scripted_openai.script = [entry]
    with pytest.raises(error):
        model.complete([Message("user", "q")], schema=SCHEMA, timeout_seconds=0.5)
    assert len(scripted_openai.requests) == 1


def test_auto_steps_down_once_when_the_endpoint_refuses_json_schema(
    model: OpenAIChatModel, scripted_openai: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scripted_openai.script = [
        {"status": 500, "message": REFUSED_JSON_SCHEMA},
        {"json": {"intent": "DIAGNOSIS"}},
        {"json": {"intent": "SYSTEM_CHAT"}},
    ]
    with caplog.at_level(logging.WARNING, "flowledger.llm"):
        first = model.complete([Message("user", "q")], schema=SCHEMA, timeout_seconds=5)
        second = model.complete([Message("user", "q")], schema=SCHEMA, timeout_seconds=5)
    assert (first.data, second.data) == ({"intent": "DIAGNOSIS"}, {"intent": "SYSTEM_CHAT"})
    refused, stepped, remembered = (r["response_format"] for r in scripted_openai.requests)
    assert refused["type"] == "json_schema"
    # The llama-cpp-python dialect: json_object carrying the schema, which it enforces by grammar.
    assert stepped == remembered == {"type": "json_object", "schema": SCHEMA.schema}
    assert model.modes == {"structured_output": "json_object_schema", "tool_calling": "structured"}
    said = [r.getMessage() for r in caplog.records if "from now on" in r.getMessage()]
    assert len(said) == 1 and "json_schema" in said[0] and "json_object_schema" in said[0]


def test_the_ladder_ends_with_the_schema_in_the_prompt(model: OpenAIChatModel, scripted_openai: Any) -> None:
    scripted_openai.script = [
        {"status": 400},
        {"status": 422},
        {"status": 400},
        {"text": 'Sure:\n```json\n{"intent": "KNOWLEDGE_QUERY"}\n```'},
    ]
    reply = model.complete([Message("user", "q")], schema=SCHEMA, timeout_seconds=5)
    assert reply.data == {"intent": "KNOWLEDGE_QUERY"}
    sent = scripted_openai.requests
    assert [r.get("response_format", {}).get("type") for r in sent] == [
        "json_schema",
        "json_object",
        "json_object",
        None,
    ]
    assert "schema" in sent[1]["response_format"] and "schema" not in sent[2]["response_format"]
    instruction = sent[3]["messages"][0]
    assert (
        instruction["role"] == "system" and json.dumps(SCHEMA.schema, separators=(",", ":")) in instruction["content"]
    )
    # At the bottom of the ladder a refusal is final.
    scripted_openai.script = [{"status": 400}]
    with pytest.raises(ModelRefused):
        model.complete([Message("user", "q")], schema=SCHEMA, timeout_seconds=5)


def test_a_prompt_mode_answer_that_is_not_json_is_invalid_output(scripted_openai: Any) -> None:
    model = OpenAIChatModel("scripted-model", None, scripted_openai.base_url, structured_output="prompt")
    scripted_openai.script = [{"text": "KNOWLEDGE_QUERY"}, {"text": '["KNOWLEDGE_QUERY"]'}]
    for _ in range(2):
        with pytest.raises(ModelInvalidOutput):
            model.complete([Message("user", "q")], schema=SCHEMA, timeout_seconds=5)
    assert all("response_format" not in r for r in scripted_openai.requests)


def test_a_refusal_logs_one_line_an_operator_can_act_on(
    model: OpenAIChatModel, scripted_openai: Any, caplog: pytest.LogCaptureFixture
) -> None:
    scripted_openai.script = [{"status": 401, "message": "Incorrect API key provided. " + "x" * 400}]
    with caplog.at_level(logging.WARNING, "flowledger.llm"), pytest.raises(ModelRefused):
        model.complete([Message("user", "my card number is 4111 1111")], timeout_seconds=5)
    lines = [r.getMessage() for r in caplog.records]
    host = scripted_openai.base_url.split("//")[1].split("/")[0]
    assert len(lines) == 1 and host in lines[0] and "scripted-model" in lines[0] and " 401" in lines[0]
    assert "Incorrect API key provided" in lines[0] and "x" * 301 not in lines[0]
    assert "4111" not in lines[0]


def test_usage_is_estimated_when_the_server_sends_none(model: OpenAIChatModel, scripted_openai: Any) -> None:
    scripted_openai.script = [{"text": "a" * 400, "no_usage": True}]
    reply = model.complete([Message("user", "b" * 800)], timeout_seconds=5)
    assert reply.usage.prompt_tokens >= 200 and reply.usage.completion_tokens >= 100
    # A flow's model step says the counts are estimated, and what the server said of how it finished.
    recorded = model_call_outputs(reply)
    assert (recorded["usage_source"], recorded["finish_reason"], recorded["model"]) == ("estimated", "stop", "scripted")


def test_a_model_step_records_the_usage_and_finish_reason_the_server_reported(
    model: OpenAIChatModel, scripted_openai: Any
) -> None:
    scripted_openai.script = [{"text": "hello"}]
    reply = model.complete([Message("user", "hi")], timeout_seconds=5)
    assert model_call_outputs(reply) == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
        "usage_source": "server",
        "finish_reason": "stop",
        "model": "scripted",
    }


@pytest.mark.parametrize(
    ("schema", "tools", "finish_reason"),
    [(None, None, "stop"), (SCHEMA, None, "stop"), (None, "tools", "tool_calls")],
)
def test_the_offline_model_says_how_it_finished_and_counts_no_tokens(
    schema: Any, tools: Any, finish_reason: str
) -> None:
    from flowledger.diagnosis.tool_knowledge import LookupKnowledgeTool

    offered = [LookupKnowledgeTool(None).spec] if tools else None  # type: ignore[arg-type]
    content = json.dumps({"query": "Why did checkout fail?"}) if schema or tools else "hello"
    reply = OfflineChatModel().complete([Message("user", content)], schema=schema, tools=offered, timeout_seconds=5)
    recorded = model_call_outputs(reply)
    assert (recorded["finish_reason"], recorded["usage_source"], recorded["total_tokens"]) == (finish_reason, "none", 0)


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
def test_router_does_not_retry_a_refused_request(scripted_openai: Any, status: int) -> None:
    model = OpenAIChatModel("scripted-model", "sk-test", scripted_openai.base_url, structured_output="json_schema")
    scripted_openai.script = [{"status": status}, {"json": {"intent": "DIAGNOSIS"}}]
    with pytest.raises(RoutingUnavailable) as refused:
        IntentRouter(model, HarnessRetryPolicies.intent_router(), 0.5).route("q", None, None)
    assert len(scripted_openai.requests) == 1 and refused.value.attempts == 1
    assert refused.value.reason == "model_refused_request"


def test_router_gives_up_after_two_failures(model: OpenAIChatModel, scripted_openai: Any) -> None:
    scripted_openai.script = [{"json": {"intent": "NOPE"}}, {"raw": "nope"}, {"json": {"intent": "DIAGNOSIS"}}]
    with pytest.raises(RoutingUnavailable) as gave_up:
        IntentRouter(model, HarnessRetryPolicies.intent_router(), 0.5).route("q", None, None)
    assert len(scripted_openai.requests) == 2 and gave_up.value.attempts == 2
    assert gave_up.value.reason == "model_invalid_output"


def test_native_tool_calls_are_offered_with_tool_choice_and_come_back_parsed(scripted_openai: Any) -> None:
    model = OpenAIChatModel("scripted-model", "sk-test", scripted_openai.base_url, tool_calling="native")
    call = {"id": "call_1", "type": "function", "function": {"name": "query_logs", "arguments": '{"service": "pay"}'}}
    scripted_openai.script = [{"tool_calls": [call]}]
    reply = model.complete([Message("user", "q")], tools=[TOOL], timeout_seconds=5)
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("call_1", "query_logs", {"service": "pay"})]
    sent = scripted_openai.requests[0]
    assert sent["tools"][0]["function"]["strict"] is True and sent["tool_choice"] == "auto"
    assert "parallel_tool_calls" not in sent  # only OpenAI's own API is sent it
    scripted_openai.script = [{"tool_calls": [{**call, "function": {"name": "query_logs", "arguments": "{oops"}}]}]
    with pytest.raises(ModelInvalidOutput):
        model.complete([Message("user", "q")], tools=[TOOL], timeout_seconds=5)


def test_structured_tools_offer_one_next_action_schema(model: OpenAIChatModel, scripted_openai: Any) -> None:
    # The default away from OpenAI's API: servers may drop `tools` silently, but they enforce a schema.
    scripted_openai.script = [
        {"json": {"next": {"action": "query_logs", "arguments": {"service": "pay"}}}},
        {"json": {"next": {"action": "final_answer", "answer": {"intent": "DIAGNOSIS"}}}},
    ]
    reply = model.complete([Message("user", "q")], schema=SCHEMA, tools=[TOOL], timeout_seconds=5)
    (call,) = reply.tool_calls
    assert (call.name, call.arguments, reply.finish_reason) == ("query_logs", {"service": "pay"}, "tool_calls")
    sent = scripted_openai.requests[0]
    assert "tools" not in sent and "tool_choice" not in sent
    alternatives = sent["response_format"]["json_schema"]["schema"]["properties"]["next"]["anyOf"]
    assert [a["properties"]["action"]["enum"] for a in alternatives] == [["query_logs"], ["final_answer"]]
    assert alternatives[0]["properties"]["arguments"] == TOOL.parameters
    assert alternatives[1]["properties"]["answer"] == SCHEMA.schema
    history = [
        Message("user", "q"),
        Message("assistant", "", tool_calls=(ToolCall(call.id, call.name, call.arguments),)),
        Message("tool", '{"rows": 1}', tool_call_id=call.id),
    ]
    final = model.complete(history, schema=SCHEMA, tools=[TOOL], timeout_seconds=5)
    assert final.data == {"intent": "DIAGNOSIS"} and not final.tool_calls
    # Any chat template can render the history: no tool roles, no tool_calls fields.
    wire = scripted_openai.requests[1]["messages"]
    assert {m["role"] for m in wire} <= {"system", "user", "assistant"} and not any("tool_calls" in m for m in wire)
    assert any(m["role"] == "user" and call.id in m["content"] for m in wire)


@pytest.mark.parametrize(
    "answer",
    [
        {"next": {"action": "drop_tables", "arguments": {}}},
        {"next": {"action": "query_logs"}},
        {"next": {"action": "final_answer", "answer": "not an object"}},
        {"next": {"action": "final_answer", "answer": {"intent": "X"}}, "extra": 1},
    ],
)
def test_a_next_action_outside_what_was_offered_is_invalid_output(
    model: OpenAIChatModel, scripted_openai: Any, answer: dict[str, Any]
) -> None:
    scripted_openai.script = [{"json": answer}]
    with pytest.raises(ModelInvalidOutput):
        model.complete([Message("user", "q")], schema=SCHEMA, tools=[TOOL], timeout_seconds=5)


def test_native_tools_step_down_to_structured_when_refused(scripted_openai: Any) -> None:
    model = OpenAIChatModel("scripted-model", None, scripted_openai.base_url)
    native = OpenAIChatModel("scripted-model", None, scripted_openai.base_url, tool_calling="native")
    scripted_openai.script = [{"status": 400, "message": "tool_choice is not supported"}]
    with pytest.raises(ModelRefused):  # pinned to native: the refusal is final
        native.complete([Message("user", "q")], tools=[TOOL], timeout_seconds=5)
    assert model.tool_calling.value == "structured"


def test_openai_itself_gets_max_completion_tokens_native_tools_and_parallel_calls(scripted_openai: Any) -> None:
    import openai

    model = OpenAIChatModel("gpt-4o-mini", "sk-test", "https://api.openai.com/v1")
    # The requests OpenAI's API would get, caught on loopback: only the transport is swapped.
    model._client = openai.OpenAI(api_key="sk-test", base_url=scripted_openai.base_url, max_retries=0)
    assert model.modes == {"structured_output": "json_schema", "tool_calling": "native"}
    scripted_openai.script = [{"json": {"intent": "DIAGNOSIS"}}]
    model.complete([Message("user", "q")], schema=SCHEMA, tools=[TOOL], timeout_seconds=5, max_tokens=300)
    sent = scripted_openai.requests[0]
    assert sent["max_completion_tokens"] == 300 and "max_tokens" not in sent
    assert sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is True


def test_the_settings_cap_lowers_every_calls_max_tokens(scripted_openai: Any) -> None:
    from flowledger.config import Settings
    from flowledger.llm.factory import chat_model_for

    settings = Settings.model_validate(
        {"OPENAI_BASE_URL": scripted_openai.base_url, "FLOWLEDGER_MODEL_MAX_TOKENS": "100"}
    )
    model = chat_model_for(settings)
    scripted_openai.script = [{"text": "a"}, {"text": "b"}]
    model.complete([Message("user", "q")], timeout_seconds=5, max_tokens=1024)
    model.complete([Message("user", "q")], timeout_seconds=5, max_tokens=64)
    assert [r["max_tokens"] for r in scripted_openai.requests] == [100, 64]
