"""How a structured answer and tool use are asked of a model server, and what each mode sends.

"OpenAI-compatible" servers differ exactly here. Structured output steps down a ladder, from the
strictest form a server may refuse to a prompt every server takes:

- ``json_schema``: ``response_format: {type: json_schema, strict: true}`` (OpenAI, vLLM, llama-server);
- ``json_object_schema``: ``{type: json_object, schema: ...}`` (llama-cpp-python enforces it by grammar);
- ``json_object``: ``{type: json_object}`` with the schema written into the prompt;
- ``prompt``: the schema in the prompt only.

Tools are offered ``native`` (``tools`` and ``tool_choice``) or ``structured``: one strict "next action"
schema whose alternatives are each offered tool with its own argument schema, or the final answer.
Servers whose chat template drops tools silently still enforce a schema, so ``structured`` works
wherever structured output does. Whatever the mode, the caller validates the answer the same way.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from enum import StrEnum
from typing import Any

from flowledger.llm.ports import JsonSchema, Message, ModelInvalidOutput, ToolCall, ToolSpec

logger = logging.getLogger("flowledger.llm")
FINAL_ACTION = "final_answer"  # the structured alternative that answers instead of calling a tool


class StructuredOutput(StrEnum):
    JSON_SCHEMA = "json_schema"
    JSON_OBJECT_SCHEMA = "json_object_schema"
    JSON_OBJECT = "json_object"
    PROMPT = "prompt"


LADDER = tuple(StructuredOutput)
# The modes whose schema travels in the prompt: their answers are read leniently (the first object in the text).
PROMPTED = (StructuredOutput.JSON_OBJECT, StructuredOutput.PROMPT)
# FLOWLEDGER_STRUCTURED_OUTPUT: "auto" starts at the top and steps down on a refusal; any other value is
# the one mode used (``json_object`` is the llama-cpp-python dialect: json_object with the schema).
STRUCTURED_SETTINGS = {
    "json_schema": StructuredOutput.JSON_SCHEMA,
    "json_object": StructuredOutput.JSON_OBJECT_SCHEMA,
    "prompt": StructuredOutput.PROMPT,
}


class ToolCalling(StrEnum):
    NATIVE = "native"
    STRUCTURED = "structured"


class ModeMemory:
    """The mode each (endpoint, model) ended up with, for the life of the process; thread-safe."""

    def __init__(self) -> None:
        self._modes: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()

    def get(self, kind: str, endpoint: str, model: str, default: str) -> str:
        with self._lock:
            return self._modes.get((kind, endpoint, model), default)

    def step_down(self, kind: str, endpoint: str, model: str, refused: str, to: str, status: int) -> None:
        """Remember ``to`` in place of ``refused`` and say so once (a concurrent call may have moved on already)."""
        with self._lock:
            key = (kind, endpoint, model)
            if self._modes.get(key, refused) != refused:
                return
            self._modes[key] = to
        logger.warning(
            "model endpoint %s (model %s) refused %s mode %s (%s); using %s from now on",
            endpoint,
            model,
            kind,
            refused,
            status,
            to,
        )

    def clear(self) -> None:
        with self._lock:
            self._modes.clear()


MEMORY = ModeMemory()


def next_structured(mode: StructuredOutput) -> StructuredOutput | None:
    """The next rung down the ladder; None below ``prompt``."""
    index = LADDER.index(mode)
    return LADDER[index + 1] if index + 1 < len(LADDER) else None


def response_format(mode: StructuredOutput, schema: JsonSchema) -> dict[str, Any] | None:
    """What ``response_format`` carries in ``mode`` (None: the field is not sent)."""
    if mode is StructuredOutput.JSON_SCHEMA:
        return {"type": "json_schema", "json_schema": {"name": schema.name, "schema": schema.schema, "strict": True}}
    if mode is StructuredOutput.JSON_OBJECT_SCHEMA:
        return {"type": "json_object", "schema": schema.schema}
    if mode is StructuredOutput.JSON_OBJECT:
        return {"type": "json_object"}
    return None


def schema_instruction(schema: JsonSchema) -> Message:
    """The system message that carries the schema where the server does not take it as a field."""
    return Message(
        "system",
        "Answer with one JSON object only, no other text. It must be valid against this JSON schema: "
        + json.dumps(schema.schema, separators=(",", ":")),
    )


def next_action_schema(tools: list[ToolSpec], answer: JsonSchema | None) -> JsonSchema:
    """One strict schema: call one of ``tools`` (with its own argument schema), or give the final answer."""
    alternatives: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {"action": {"type": "string", "enum": [tool.name]}, "arguments": tool.parameters},
            "required": ["action", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    alternatives.append(
        {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": [FINAL_ACTION]},
                "answer": answer.schema if answer is not None else {"type": "string"},
            },
            "required": ["action", "answer"],
            "additionalProperties": False,
        }
    )
    return JsonSchema(
        "next_action",
        {
            "type": "object",
            "properties": {"next": {"anyOf": alternatives}},
            "required": ["next"],
            "additionalProperties": False,
        },
    )


def next_action_instruction(tools: list[ToolSpec]) -> Message:
    """Tells the model what the next-action object means; the server never sees ``tools`` in this mode."""
    listed = "\n".join(
        f"- {tool.name}: {tool.description} Arguments: {json.dumps(tool.parameters, separators=(',', ':'))}"
        for tool in tools
    )
    return Message(
        "system",
        'Take one step per answer, as a JSON object {"next": ...}. To use a tool: '
        '{"next": {"action": "<tool name>", "arguments": {...}}}. When you have what you need: '
        f'{{"next": {{"action": "{FINAL_ACTION}", "answer": ...}}}}. Tools:\n{listed}',
    )


def as_plain_messages(messages: list[Message]) -> list[Message]:
    """The conversation without native tool messages, for a server that is not given ``tools``.

    An assistant turn that called a tool becomes the next-action object it answered with; a tool's
    result becomes a user message naming its call, so any chat template can render it.
    """
    plain: list[Message] = []
    for message in messages:
        if message.tool_calls:
            actions = [{"next": {"action": c.name, "arguments": c.arguments}} for c in message.tool_calls]
            plain.append(Message("assistant", json.dumps(actions[0] if len(actions) == 1 else actions)))
        elif message.role == "tool":
            plain.append(Message("user", f"Result of {message.tool_call_id}: {message.content}"))
        else:
            plain.append(message)
    return plain


def parse_next_action(data: dict[str, Any], tools: list[ToolSpec]) -> tuple[ToolCall | None, Any]:
    """The tool call the object asks for, or (None, the final answer); :class:`ModelInvalidOutput` otherwise."""
    step = data.get("next")
    if not isinstance(step, dict) or set(data) != {"next"}:
        raise ModelInvalidOutput("the next-action answer has no single 'next' object")
    action = step.get("action")
    if action == FINAL_ACTION and set(step) == {"action", "answer"}:
        return None, step["answer"]
    offered = {tool.name for tool in tools}
    arguments = step.get("arguments")
    if action in offered and isinstance(arguments, dict) and set(step) == {"action", "arguments"}:
        return ToolCall(f"call_{secrets.token_hex(8)}", str(action), arguments), None
    raise ModelInvalidOutput("the next-action answer names no offered tool and no final answer")


def json_object_in(text: str) -> dict[str, Any]:
    """The first JSON object in ``text`` (a prompt-mode answer may wrap it in a code fence or words)."""
    start = text.find("{")
    if start < 0:
        raise ModelInvalidOutput("the model's answer is not JSON")
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError:
        raise ModelInvalidOutput("the model's answer is not JSON") from None
    if not isinstance(data, dict):
        raise ModelInvalidOutput("the model's answer is not a JSON object")
    return data
