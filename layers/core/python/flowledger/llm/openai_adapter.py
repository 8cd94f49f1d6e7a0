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
    ModelError,
    ModelInvalidOutput,
    ModelTimeout,
    ModelTransportError,
    Reply,
    ToolCall,
    ToolSpec,
    Usage,
)


class ModelRejected(ModelError):
    """The model server refused the request itself (a 4xx other than 408, 409 or 429).

    The same request would be refused again, so no retry policy retries it: a bad key (401), a model
    that does not exist (404), a schema the server does not support (400, 422).
    """

    def __init__(self, status_code: int) -> None:
        super().__init__(f"model server refused the request ({status_code})")
        self.status_code = status_code


def _status_error(status_code: int) -> ModelError:
    """The port's error for an HTTP status, with the SDK's own idea of which ones are worth retrying."""
    if status_code == 408:
        return ModelTimeout("model server answered 408")
    if status_code >= 500 or status_code in (409, 429):
        return ModelTransportError(f"model server answered {status_code}")
    return ModelRejected(status_code)


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
            "messages": [_message(m) for m in messages],
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
            raise _status_error(exc.status_code) from exc
        return _reply(completion, schema)


def _message(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


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
    if schema is not None and not calls:  # a turn that calls tools answers with them, not with the object
        try:
            data = json.loads(message.content or "")
        except json.JSONDecodeError:
            raise ModelInvalidOutput("the model's answer is not JSON") from None
        if not isinstance(data, dict):
            raise ModelInvalidOutput("the model's answer is not a JSON object")
    return Reply(text=message.content, data=data, tool_calls=tuple(calls), usage=usage, model=completion.model or "")
