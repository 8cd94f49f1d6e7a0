"""The ``ChatModel`` port: messages in; text, a strict JSON-schema object or tool calls out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class JsonSchema:
    """A strict output schema: the model must answer with one object that validates against it."""

    name: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    """One chat message. An assistant turn that called tools carries them; a tool result names its call."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # True when the server reported no usage and the counts are estimated from the characters sent and received.
    estimated: bool = False

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Reply:
    text: str | None = None
    data: dict[str, Any] | None = None  # the parsed object when a schema was asked for
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None  # "stop", "length", "tool_calls", ... as the server said


# Every call is bounded: a caller that says nothing gets this many tokens at most.
DEFAULT_MAX_TOKENS = 512


class ModelError(Exception):
    """A model call failed in a way a retry policy may retry."""


class ModelTimeout(ModelError):
    pass


class ModelTransportError(ModelError):
    pass


class ModelInvalidOutput(ModelError):
    """The model answered, but not in the shape that was asked for."""


class ModelDegenerateOutput(ModelInvalidOutput):
    """The model answered with junk: a chat-template token inside the answer, or a repetition loop
    (``flowledger.llm.output_checks``). Nothing of it is published."""


class ModelRefused(ModelError):
    """The model server refused the request itself (a 4xx other than 408, 409 or 429, or a 500 naming a field).

    The same request would be refused again, so no retry policy retries it: a bad key (401), a model
    that does not exist (404), a field or schema the server does not support (400, 422).
    """

    def __init__(self, status_code: int) -> None:
        super().__init__(f"model server refused the request ({status_code})")
        self.status_code = status_code


REASON_CODES: dict[type[ModelError], str] = {  # a subclass before its base: the first match is the code
    ModelDegenerateOutput: "model_degenerate_output",
    ModelRefused: "model_refused_request",
    ModelTimeout: "model_timeout",
    ModelTransportError: "model_transport",
    ModelInvalidOutput: "model_invalid_output",
}


def reason_code(error: ModelError) -> str:
    """The run's reason code for a model failure (beside the public outcome, for operators)."""
    for kind, code in REASON_CODES.items():
        if isinstance(error, kind):
            return code
    return "model_error"


class ChatModel(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def offline(self) -> bool: ...

    def complete(
        self,
        messages: list[Message],
        *,
        schema: JsonSchema | None = None,
        tools: list[ToolSpec] | None = None,
        timeout_seconds: float,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> Reply: ...
