"""``ChatModel`` on the ``openai`` SDK: OpenAI or any OpenAI-compatible server (llama.cpp, Ollama, vLLM).

The SDK's own retries are off: retrying is the job of ``llm/retry.py``, so every attempt is visible.
Every call is bounded (``max_tokens``, a timeout). Structured output and tools are asked for in the mode
the endpoint takes (``llm/output_modes.py``): ``auto`` steps down once per refusal of a mode and keeps
the new mode for the process. A refusal of anything else is a :class:`ModelRefused`, never retried. The
parsed object is still checked by the caller against its own model, whatever the mode.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlsplit

from flowledger.llm.output_checks import STOP_SEQUENCES, checked_reply
from flowledger.llm.output_modes import (
    MEMORY,
    PROMPTED,
    STRUCTURED_SETTINGS,
    StructuredOutput,
    ToolCalling,
    as_plain_messages,
    json_object_in,
    next_action_instruction,
    next_action_schema,
    next_structured,
    parse_next_action,
    response_format,
    schema_instruction,
)
from flowledger.llm.ports import (
    DEFAULT_MAX_TOKENS,
    JsonSchema,
    Message,
    ModelError,
    ModelInvalidOutput,
    ModelRefused,
    ModelTimeout,
    ModelTransportError,
    Reply,
    ToolCall,
    ToolSpec,
    Usage,
)

logger = logging.getLogger("flowledger.llm")
MAX_LOGGED_ERROR_CHARS = 300
CHARS_PER_TOKEN = 4  # the estimate when a server reports no usage


class OpenAIChatModel:
    """One endpoint and model; ``structured_output`` and ``tool_calling`` are the settings' values."""

    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str | None,
        *,
        structured_output: str = "auto",
        tool_calling: str = "auto",
        max_tokens_cap: int | None = None,
    ) -> None:
        import openai  # only functions that talk to a model load the SDK

        self._openai = openai
        self._client = openai.OpenAI(api_key=api_key or "not-needed", base_url=base_url, max_retries=0)
        self._model = model
        self._host = urlsplit(str(self._client.base_url)).netloc
        # OpenAI's own API: strict schemas and native tools, max_completion_tokens, parallel_tool_calls.
        self._openai_proper = base_url is None or self._host == "api.openai.com"
        self._structured_setting = structured_output
        self._tool_setting = tool_calling
        self._max_tokens_cap = max_tokens_cap
        # Chat-template tokens as stop sequences, on servers other than OpenAI's (whose models never write them,
        # and which takes four at most); dropped for good if a server refuses the field.
        self._send_stops = not self._openai_proper

    @property
    def name(self) -> str:
        return self._model

    @property
    def offline(self) -> bool:
        return False

    @property
    def structured_output(self) -> StructuredOutput:
        """The structured-output mode the next call uses."""
        if self._structured_setting != "auto":
            return STRUCTURED_SETTINGS[self._structured_setting]
        return StructuredOutput(
            MEMORY.get("structured_output", self._host, self._model, StructuredOutput.JSON_SCHEMA.value)
        )

    @property
    def tool_calling(self) -> ToolCalling:
        """How tools are offered: natively on OpenAI's API, as a next-action schema elsewhere unless set.

        A server may accept ``tools`` and drop them silently (a chat template without tools), which no
        single answer reveals; ``flowledger model probe`` shows whether native calls happen at all.
        """
        if self._tool_setting != "auto":
            return ToolCalling(self._tool_setting)
        default = ToolCalling.NATIVE if self._openai_proper else ToolCalling.STRUCTURED
        return ToolCalling(MEMORY.get("tool_calling", self._host, self._model, default.value))

    @property
    def modes(self) -> dict[str, str]:
        """The modes in use, as a run records them."""
        return {"structured_output": self.structured_output.value, "tool_calling": self.tool_calling.value}

    def complete(
        self,
        messages: list[Message],
        *,
        schema: JsonSchema | None = None,
        tools: list[ToolSpec] | None = None,
        timeout_seconds: float,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> Reply:
        """One bounded call; a refused mode steps down (``auto``) and the call is made again in the next.

        Every reply passes the output checks (``output_checks.checked_reply``): a template token or a loop in
        it raises :class:`ModelDegenerateOutput`, so no caller reads junk as an answer.
        """
        if self._max_tokens_cap is not None:
            max_tokens = min(max_tokens, self._max_tokens_cap)
        while True:
            structured, tooling = self.structured_output, self.tool_calling
            try:
                reply = self._call(messages, schema, tools or [], timeout_seconds, max_tokens, structured, tooling)
            except _ModeRefused as refused:
                if not self._step_down(refused, structured, tooling):
                    raise ModelRefused(refused.status_code) from None
                continue
            return checked_reply(reply)

    def _step_down(self, refused: _ModeRefused, structured: StructuredOutput, tooling: ToolCalling) -> bool:
        if refused.field == "stop" and self._send_stops:
            self._send_stops = False
            return True
        if refused.field == "tools" and self._tool_setting == "auto" and tooling is ToolCalling.NATIVE:
            MEMORY.step_down(
                "tool_calling",
                self._host,
                self._model,
                tooling.value,
                ToolCalling.STRUCTURED.value,
                refused.status_code,
            )
            return True
        lower = next_structured(structured)
        if refused.field == "response_format" and self._structured_setting == "auto" and lower is not None:
            MEMORY.step_down(
                "structured_output", self._host, self._model, structured.value, lower.value, refused.status_code
            )
            return True
        return False

    def _call(
        self,
        messages: list[Message],
        schema: JsonSchema | None,
        tools: list[ToolSpec],
        timeout: float,
        max_tokens: int,
        structured: StructuredOutput,
        tooling: ToolCalling,
    ) -> Reply:
        emulated = bool(tools) and tooling is ToolCalling.STRUCTURED
        wanted = next_action_schema(tools, schema) if emulated else schema
        wire = as_plain_messages(messages) if emulated else list(messages)
        prefix = [next_action_instruction(tools)] if emulated else []
        lenient = structured in PROMPTED
        if wanted is not None and lenient:
            prefix.append(schema_instruction(wanted))
        request: dict[str, Any] = {
            "model": self._model,
            "messages": [wire_message(m) for m in prefix + wire],
            "timeout": timeout,
            ("max_completion_tokens" if self._openai_proper else "max_tokens"): max_tokens,
        }
        if wanted is not None and (shape := response_format(structured, wanted)) is not None:
            request["response_format"] = shape
        if self._send_stops:
            request["stop"] = list(STOP_SEQUENCES)
        if tools and not emulated:
            request["tools"] = [wire_tool(t) for t in tools]
            request["tool_choice"] = "auto"
            if self._openai_proper:  # other servers ignore it or refuse it; the agent takes a batch either way
                request["parallel_tool_calls"] = True
        try:
            completion = self._client.chat.completions.create(**request)
        except self._openai.APITimeoutError as exc:
            self._log_failure("timed out", None, f"after {timeout:.1f}s")
            raise ModelTimeout(f"model call timed out after {timeout}s") from exc
        except self._openai.APIConnectionError as exc:
            self._log_failure("could not be reached", None, type(exc).__name__)
            raise ModelTransportError("could not reach the model server") from exc
        except self._openai.APIStatusError as exc:
            message = error_message(exc)
            self._log_failure("answered an error", exc.status_code, message)
            raise _status_error(exc.status_code, message, request) from exc
        prompt_chars = sum(len(m["content"] or "") for m in request["messages"])
        reply = parse_reply(completion, wanted, lenient=lenient, prompt_chars=prompt_chars)
        if not emulated or reply.data is None:
            return reply
        call, answer = parse_next_action(reply.data, tools)
        if call is not None:
            return Reply(None, None, (call,), reply.usage, reply.model, "tool_calls")
        if schema is None:
            return Reply(str(answer), None, (), reply.usage, reply.model, reply.finish_reason)
        if not isinstance(answer, dict):
            raise ModelInvalidOutput("the final answer is not a JSON object")
        return Reply(json.dumps(answer), answer, (), reply.usage, reply.model, reply.finish_reason)

    def _log_failure(self, what: str, status: int | None, detail: str) -> None:
        # Host, model, status and the server's own words: never the request body or any user text.
        logger.warning(
            "model endpoint %s (model %s) %s%s: %s",
            self._host,
            self._model,
            what,
            f" {status}" if status is not None else "",
            detail[:MAX_LOGGED_ERROR_CHARS],
        )


class _ModeRefused(ModelError):
    """The endpoint refused a field a mode sends: the caller may step that mode down and ask again."""

    def __init__(self, status_code: int, field: str) -> None:
        super().__init__(f"model server refused {field} ({status_code})")
        self.status_code = status_code
        self.field = field


def _status_error(status_code: int, message: str, request: dict[str, Any]) -> ModelError:
    """The port's error for an HTTP status; a refusal that names a mode's field is a :class:`_ModeRefused`."""
    if status_code == 408:
        return ModelTimeout("model server answered 408")
    if status_code in (409, 429):
        return ModelTransportError(f"model server answered {status_code}")
    lowered = message.lower()
    refusal = status_code in (400, 422) or (status_code == 500 and ("response_format" in lowered or "tool" in lowered))
    if refusal and "tools" in request and "tool" in lowered:
        return _ModeRefused(status_code, "tools")
    if refusal and "stop" in request and "stop" in lowered and "response_format" not in lowered:
        return _ModeRefused(status_code, "stop")
    if refusal and "response_format" in request:
        return _ModeRefused(status_code, "response_format")
    if status_code >= 500:
        return ModelTransportError(f"model server answered {status_code}")
    return ModelRefused(status_code)


def error_message(exc: Any) -> str:
    """The server's own words for a failed call (its error message, else the body): what the log line quotes."""
    body = exc.body
    if isinstance(body, dict):
        detail = body.get("error", body)
        if isinstance(detail, dict):
            return str(detail.get("message") or detail)
        return str(detail)
    return str(body if body is not None else exc.message)


def wire_message(message: Message) -> dict[str, Any]:
    """One message as the Chat Completions API takes it."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def wire_tool(tool: ToolSpec) -> dict[str, Any]:
    """One tool as a strict function definition."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters, "strict": True},
    }


def _usage(completion: Any, messages_chars: int, answer_chars: int) -> Usage:
    prompt = getattr(completion.usage, "prompt_tokens", 0) or 0
    generated = getattr(completion.usage, "completion_tokens", 0) or 0
    if not prompt and not generated:  # no usage reported: estimated, so the budget still counts the call
        return Usage(messages_chars // CHARS_PER_TOKEN, answer_chars // CHARS_PER_TOKEN + 1, estimated=True)
    return Usage(prompt, generated)


def parse_reply(completion: Any, schema: JsonSchema | None, *, lenient: bool, prompt_chars: int) -> Reply:
    """The port's reply from a completion; the object parsed when a schema was asked (leniently in prompt modes)."""
    if not completion.choices:
        raise ModelInvalidOutput("the model returned no choice")
    choice = completion.choices[0]
    message = choice.message
    usage = _usage(completion, prompt_chars, len(message.content or ""))
    calls = []
    for call in message.tool_calls or ():
        try:
            calls.append(ToolCall(call.id, call.function.name, json.loads(call.function.arguments or "{}")))
        except json.JSONDecodeError:
            raise ModelInvalidOutput(f"tool call {call.function.name} has arguments that are not JSON") from None
    data = None
    if schema is not None and not calls:  # a turn that calls tools answers with them, not with the object
        data = json_object_in(message.content or "") if lenient else _strict_json(message.content or "")
    return Reply(
        text=message.content,
        data=data,
        tool_calls=tuple(calls),
        usage=usage,
        model=completion.model or "",
        finish_reason=getattr(choice, "finish_reason", None),
    )


def _strict_json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ModelInvalidOutput("the model's answer is not JSON") from None
    if not isinstance(data, dict):
        raise ModelInvalidOutput("the model's answer is not a JSON object")
    return data
