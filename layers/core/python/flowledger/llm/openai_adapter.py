"""``ChatModel`` on the ``openai`` SDK: OpenAI or any OpenAI-compatible server (Ollama, vLLM, llama.cpp).

The SDK's own retries are off: retrying is the job of ``llm/retry.py``, so every attempt is visible.
Structured outputs use ``response_format`` with ``strict: true``; the parsed object is still checked
by the caller against its own model, since compatible servers do not all enforce the schema.
"""

from __future__ import annotations

import json
from typing import Any

from flowledger.llm.ports import (
    JsonSchema,
    Message,
    ModelInvalidOutput,
    ModelTimeout,
    ModelTransportError,
    Reply,
    ToolCall,
    ToolSpec,
    Usage,
)


class OpenAIChatModel:
    def __init__(self, model: str, api_key: str | None, base_url: str | None) -> None:
        import openai  # only functions that talk to a model load the SDK

        self._openai = openai
        self._client = openai.OpenAI(api_key=api_key or "not-needed", base_url=base_url, max_retries=0)
        self._model = model

    @property
    def name(self) -> str:
        return self._model

    @property
    def offline(self) -> bool:
        return False

    def complete(
        self,
        messages: list[Message],
        *,
        schema: JsonSchema | None = None,
        tools: list[ToolSpec] | None = None,
        timeout_seconds: float,
    ) -> Reply:
        request: dict[str, Any] = {
            "model": self._model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "timeout": timeout_seconds,
        }
        if schema is not None:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.name, "schema": schema.schema, "strict": True},
            }
        if tools:
            request["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                        "strict": True,
                    },
                }
                for t in tools
            ]
        try:
            completion = self._client.chat.completions.create(**request)
        except self._openai.APITimeoutError as exc:
            raise ModelTimeout(f"model call timed out after {timeout_seconds}s") from exc
        except self._openai.APIConnectionError as exc:
            raise ModelTransportError("could not reach the model server") from exc
        except self._openai.APIStatusError as exc:
            if exc.status_code >= 500 or exc.status_code == 429:
                raise ModelTransportError(f"model server answered {exc.status_code}") from exc
            raise
        return _reply(completion, schema)


def _reply(completion: Any, schema: JsonSchema | None) -> Reply:
    if not completion.choices:
        raise ModelInvalidOutput("the model returned no choice")
    message = completion.choices[0].message
    usage = Usage(
        getattr(completion.usage, "prompt_tokens", 0) or 0, getattr(completion.usage, "completion_tokens", 0) or 0
    )
    calls = []
    for call in message.tool_calls or ():
        try:
            calls.append(ToolCall(call.id, call.function.name, json.loads(call.function.arguments or "{}")))
        except json.JSONDecodeError:
            raise ModelInvalidOutput(f"tool call {call.function.name} has arguments that are not JSON") from None
    data = None
    if schema is not None:
        try:
            data = json.loads(message.content or "")
        except json.JSONDecodeError:
            raise ModelInvalidOutput("the model's answer is not JSON") from None
        if not isinstance(data, dict):
            raise ModelInvalidOutput("the model's answer is not a JSON object")
    return Reply(text=message.content, data=data, tool_calls=tuple(calls), usage=usage, model=completion.model or "")
