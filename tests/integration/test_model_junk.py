"""No model junk reaches a user: template tokens and loops refused in every executor, through both
adapters (SSE and JSON); a free-text answer the token limit cut is published only with that said.

The model is the real OpenAI adapter against the scripted OpenAI-compatible server, answering with
outputs recorded from real small models (tests/fixtures/model_junk).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flowledger.chat.executors import CUT_ANSWER_LIMITATION, SYSTEM_CHAT_LIMITATION
from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.llm.output_checks import STOP_SEQUENCES, template_token
from flowledger.services import Services
from tests.integration.test_chat_use_case import Harness, route
from tests.integration.test_chat_use_case import services as services  # the fixture: two indexed documents
from tests.unit.test_output_checks import recorded

pytestmark = pytest.mark.anyio
JUNK = [sample["content"] for _, sample in recorded()]


@pytest.fixture
def harness(services: Services, scripted_openai: Any) -> Harness:
    return Harness(services, scripted_openai)


def published(outcome: dict[str, Any]) -> str:
    """Every text of the outcome a client is shown."""
    content = outcome.get("content") or {}
    return json.dumps(content) + json.dumps(outcome.get("error") or {})


@pytest.mark.parametrize("junk", JUNK, ids=[f"recorded-{n}" for n in range(len(JUNK))])
async def test_small_talk_junk_is_refused_twice_and_the_run_says_why(harness: Harness, via: str, junk: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": junk}, {"text": junk}]
    outcome = await harness.ask(via, "hello")
    assert outcome["error"]["code"] == "EXECUTION_FAILED" and "content" not in outcome
    assert template_token(published(outcome)) is None and junk[:40] not in published(outcome)
    run = harness.run(outcome)
    assert (run.status, run.reason_code) == ("FAILED", "model_degenerate_output")
    assert run.budget_usage["model_calls"] == 3  # routing, the junk, and one more sample


async def test_nothing_of_a_refused_answer_is_streamed(harness: Harness) -> None:
    junk = "Hi!<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n" * 8
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": junk}, {"text": junk}]
    async with harness.client() as client:
        response = await client.post("/api/chat", json={"query": "hello"})
    assert "<|im_" not in response.text and "Hello!" not in response.text
    assert '"EXECUTION_FAILED"' in response.text


async def test_a_second_sample_without_junk_is_published(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hi!<|im_end|><|im_start|>user"}, {"text": "Hello!"}]
    outcome = await harness.ask(via, "hello")
    assert outcome["content"]["text"] == "Hello!"
    assert harness.run(outcome).reason_code is None


async def test_a_small_talk_answer_cut_by_the_token_limit_says_so(harness: Harness, via: str) -> None:
    harness.scripted.script = [
        route("SYSTEM_CHAT"),
        {"text": "I can help with documents and", "finish_reason": "length"},
    ]
    outcome = await harness.ask(via, "what can you do?")
    assert outcome["content"]["text"] == "I can help with documents and"
    assert outcome["content"]["limitations"] == f"{SYSTEM_CHAT_LIMITATION} {CUT_ANSWER_LIMITATION}"
    run = harness.run(outcome)
    assert (run.status, run.reason_code) == ("SUCCESS", "model_degenerate_output")


async def test_a_knowledge_answer_with_junk_in_an_item_is_refused(harness: Harness, via: str) -> None:
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        payload = json.loads(request["messages"][-1]["content"])
        document = payload["documents"][0]["document_id"]
        item = {"text": "Checkpoints every five minutes.<|eot_id|>", "invocation_id": payload["invocation_id"]}
        return {"json": {"answer_items": [{**item, "document_ids": [document]}], "limitations": ""}}

    harness.scripted.script = [route("KNOWLEDGE_QUERY"), answer, answer]
    outcome = await harness.ask(via, "How often does the ledger checkpoint?")
    assert outcome["error"]["code"] == "EXECUTION_FAILED" and "content" not in outcome
    assert harness.run(outcome).reason_code == "model_degenerate_output"


async def test_a_looping_knowledge_answer_is_refused(harness: Harness, via: str) -> None:
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        payload = json.loads(request["messages"][-1]["content"])
        document = payload["documents"][0]["document_id"]
        text = "The ledger checkpoints. " * 12
        item = {"text": text, "invocation_id": payload["invocation_id"], "document_ids": [document]}
        return {"json": {"answer_items": [item], "limitations": ""}}

    harness.scripted.script = [route("KNOWLEDGE_QUERY"), answer, answer]
    outcome = await harness.ask(via, "How often does the ledger checkpoint?")
    assert outcome["error"]["code"] == "EXECUTION_FAILED"
    assert harness.run(outcome).reason_code == "model_degenerate_output"


async def test_template_tokens_are_stop_sequences_on_servers_other_than_openai(harness: Harness) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hello!"}]
    await harness.ask("json", "hello")
    assert all(request["stop"] == list(STOP_SEQUENCES) for request in harness.scripted.requests)
    # OpenAI's own models never write these, and its API takes four stop sequences at most.
    assert not OpenAIChatModel("gpt-4o-mini", "sk-test", "https://api.openai.com/v1")._send_stops


async def test_a_server_refusing_stop_sequences_is_asked_again_without_them(harness: Harness, via: str) -> None:
    refused = {"status": 400, "message": "'stop' is not supported by this model"}
    harness.scripted.script = [refused, route("SYSTEM_CHAT"), {"text": "Hello!"}]
    outcome = await harness.ask(via, "hello")
    assert outcome["content"]["text"] == "Hello!"
    first, *rest = harness.scripted.requests
    assert "stop" in first and all("stop" not in request for request in rest)
    assert first["response_format"] == rest[0]["response_format"]  # the refusal named stop, not the schema
