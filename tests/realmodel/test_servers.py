"""The real-model harness works, and what Flowledger relies on from each server holds (over plain HTTP).

Each test is a fact ../shared/llm/README.md records for SmolLM2-135M at temperature 0: should a rebuilt server
or another model change one, this says which.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import jsonschema
import pytest

from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.llm.output_checks import STOP_SEQUENCES, template_token
from flowledger.llm.ports import Message
from tests.realmodel.servers import ModelServer

SERVERS = ["llama_server", "llama_cpp_server"]
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Tell me about Paris."}]


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> ModelServer:
    running: ModelServer = request.getfixturevalue(request.param)
    return running


def chat(server: ModelServer, **body: Any) -> httpx.Response:
    """POST /v1/chat/completions, deterministic and short unless the body says otherwise."""
    request = {"model": server.model, "messages": ASK, "temperature": 0, "max_tokens": 48, **body}
    return httpx.post(f"{server.base_url}/chat/completions", json=request, timeout=120)


def test_the_server_lists_the_model_by_its_alias(server: ModelServer) -> None:
    mark = server.log_mark()
    answer = httpx.get(f"{server.base_url}/models", timeout=30)
    assert answer.status_code == 200
    assert [model["id"] for model in answer.json()["data"]] == ["smollm2"]
    assert server.refusals(mark) == []


def test_max_tokens_cuts_the_reply_with_finish_reason_length(server: ModelServer) -> None:
    mark = server.log_mark()
    answer = chat(server, messages=[{"role": "user", "content": "Tell me a long story about a cat."}], max_tokens=16)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert 0 < body["usage"]["completion_tokens"] <= 16
    assert body["choices"][0]["message"]["content"]
    assert server.refusals(mark) == []


def test_llama_server_enforces_a_json_schema_response_format(llama_server: ModelServer) -> None:
    mark = llama_server.log_mark()
    response_format = {"type": "json_schema", "json_schema": {"name": "city", "strict": True, "schema": CITY}}
    # With --special the end-of-turn token after the object fails llama-server's own output parser (a 500,
    # "does not match the expected peg-native format"); the stop sequences the chat sends end the answer first.
    unstopped = chat(llama_server, response_format=response_format, max_tokens=64)
    assert unstopped.status_code == 500 and "peg-native format" in unstopped.text, unstopped.text
    # The server logs the exception after it answers: wait for that line, so the next mark starts after it.
    deadline = time.monotonic() + 10
    while not llama_server.refusals(mark) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert llama_server.refusals(mark), "llama-server's log does not show the 500 it answered"
    mark = llama_server.log_mark()
    answer = chat(llama_server, response_format=response_format, max_tokens=64, stop=list(STOP_SEQUENCES))
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), CITY)
    assert llama_server.refusals(mark) == []


def test_llama_cpp_server_refuses_json_schema_and_enforces_json_object_with_a_schema(
    llama_cpp_server: ModelServer,
) -> None:
    mark = llama_cpp_server.log_mark()
    response_format = {"type": "json_schema", "json_schema": {"name": "city", "strict": True, "schema": CITY}}
    refused = chat(llama_cpp_server, response_format=response_format)
    # Its request model allows only 'text' and 'json_object'; the validation error comes back as a 500.
    assert refused.status_code == 500
    assert "json_object" in refused.json()["error"]["message"]
    assert len(llama_cpp_server.refusals(mark)) >= 1  # the log shows it, as a test scanning for refusals needs

    answer = chat(llama_cpp_server, response_format={"type": "json_object", "schema": CITY}, max_tokens=64)
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), CITY)


def test_llama_server_gives_each_of_its_two_slots_half_the_context(llama_server: ModelServer) -> None:
    (model,) = httpx.get(f"{llama_server.base_url}/models", timeout=30).json()["data"]
    assert model["meta"]["n_ctx"] == 2048  # -c 4096 -np 2: a request longer than 2048 tokens is refused


@pytest.mark.parametrize(("server_name", "usage_chunk"), [("llama_server", True), ("llama_cpp_server", False)])
def test_a_stream_ends_with_a_usage_chunk_on_llama_server_only(
    request: pytest.FixtureRequest, server_name: str, usage_chunk: bool
) -> None:
    server: ModelServer = request.getfixturevalue(server_name)
    mark = server.log_mark()
    body = {
        "model": server.model, "messages": ASK, "temperature": 0, "max_tokens": 8,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body, timeout=120) as answer:
        assert answer.status_code == 200
        events = [line.removeprefix("data: ") for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    usage = [chunk["usage"] for chunk in chunks if chunk.get("usage")]
    if usage_chunk:
        assert chunks[-1]["choices"] == [] and usage == [chunks[-1]["usage"]]
        assert usage[0]["completion_tokens"] <= 8
    else:
        assert usage == []
    assert server.refusals(mark) == []


def test_a_model_step_records_the_servers_usage_and_finish_reason(server: ModelServer) -> None:
    from flowledger.llm.openai_adapter import OpenAIChatModel
    from flowledger.llm.ports import Message
    from flowledger.reasoning.step_evidence import model_call_outputs

    model = OpenAIChatModel(server.model, None, server.base_url)
    reply = model.complete([Message("user", "Tell me a long story about a cat.")], timeout_seconds=120, max_tokens=16)
    recorded = model_call_outputs(reply)  # what a flow's model step holds
    assert (recorded["usage_source"], recorded["finish_reason"]) == ("server", "length")
    assert 0 < recorded["completion_tokens"] <= 16 and recorded["prompt_tokens"] > 0


def test_llama_server_writes_the_end_of_turn_token_and_the_chats_stop_sequences_end_there(
    llama_server: ModelServer,
) -> None:
    """With --special (as a server whose chat template does not fit its model behaves), the answer's end-of-turn
    token comes back as text, which the output checks refuse; the stop sequences the chat sends end it there."""
    thanks = [{"role": "user", "content": "thanks!"}]
    bare = chat(llama_server, messages=thanks).json()["choices"][0]["message"]["content"]
    assert template_token(bare) == "<|im_end|>", bare
    stopped = chat(llama_server, messages=thanks, stop=list(STOP_SEQUENCES)).json()["choices"][0]["message"]
    assert template_token(stopped["content"]) is None and stopped["content"].strip(), stopped
    model = OpenAIChatModel(llama_server.model, None, llama_server.base_url)
    reply = model.complete([Message("user", "thanks!")], timeout_seconds=60, max_tokens=48)
    assert reply.text and template_token(reply.text) is None
