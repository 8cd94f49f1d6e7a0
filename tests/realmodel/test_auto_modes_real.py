"""``auto`` structured output against llama-cpp-python's server: one refusal, one step down, kept for the process."""

from __future__ import annotations

import logging

import pytest

from flowledger.chat.router import SCHEMA, IntentRouter
from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.llm.ports import Message
from flowledger.llm.retry import HarnessRetryPolicies
from tests.realmodel.servers import ModelServer

pytestmark = pytest.mark.realmodel


def test_auto_finds_the_dialect_after_one_refusal_and_keeps_it(
    llama_cpp_server: ModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    model = OpenAIChatModel(llama_cpp_server.model, None, llama_cpp_server.base_url)
    router = IntentRouter(model, HarnessRetryPolicies.intent_router(), 60)
    mark = llama_cpp_server.log_mark()
    with caplog.at_level(logging.WARNING, "flowledger.llm"):
        first = router.route("why did checkout fail last night?", None, None)
        second = model.complete([Message("user", "hi")], schema=SCHEMA, timeout_seconds=60, max_tokens=32)
    assert first.attempts == 1  # the refusal stepped down inside one attempt: not a retry of the same request
    assert second.data is not None and set(second.data) == {"intent"}
    refused = [line for line in llama_cpp_server.refusals(mark) if "HTTP/" in line]
    assert len(refused) == 1  # json_schema, once; never again in this process
    said = [r.getMessage() for r in caplog.records if "from now on" in r.getMessage()]
    assert len(said) == 1 and "json_object_schema" in said[0]
    assert model.structured_output.value == "json_object_schema"
