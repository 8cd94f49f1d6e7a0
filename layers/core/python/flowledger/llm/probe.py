"""``flowledger model probe``: what an OpenAI-compatible endpoint does with each request the chat sends.

One bounded call per check (small ``max_tokens``, a timeout, no SDK retries), built and read with the chat's
own helpers (``llm/output_modes.py`` and the adapter's wire format), so the probe asks what the chat asks:

- ``models list`` and ``plain chat``: without both, no turn can run;
- each structured-output mode down the ladder, asked for an object no model writes unprompted (an enum and an
  integer, for a poem): a server may accept a ``response_format`` and ignore it, so a mode counts as
  ``enforced`` only when the answer validates against the schema here;
- tools with ``tool_choice: auto``, and with ``parallel_tool_calls``: did a native tool call come back;
- the next-action schema (tools offered as structured output) in the structured mode chosen;
- ``max_tokens`` honoured (finish_reason ``length``, no more tokens than asked) and streaming usage.

The modes chosen: structured output, the strictest mode whose answer was valid (else the strictest whose answer
was a JSON object, else the strictest accepted); tool calling ``native`` only when a native call came back.
The endpoint is usable when the models list and a plain chat answer and some mode gives a JSON object.
:func:`model_banner` is the cheap part (models list, a one-token chat, ~2 s at most) ``flowledger serve`` runs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from flowledger.errors import FlowledgerError
from flowledger.llm.endpoint import model_endpoint_for
from flowledger.llm.openai_adapter import OpenAIChatModel, error_message, parse_reply, wire_message, wire_tool
from flowledger.llm.output_checks import STOP_SEQUENCES
from flowledger.llm.output_modes import (
    LADDER,
    PROMPTED,
    STRUCTURED_SETTINGS,
    StructuredOutput,
    ToolCalling,
    next_action_instruction,
    next_action_schema,
    parse_next_action,
    response_format,
    schema_instruction,
)
from flowledger.llm.ports import JsonSchema, Message, ModelInvalidOutput, Reply, ToolSpec

if TYPE_CHECKING:
    from flowledger.config import Settings
    from flowledger.llm.endpoint import ModelEndpoint

DEFAULT_TIMEOUT_SECONDS = 30
BANNER_BUDGET_SECONDS = 2.0  # `flowledger serve` waits this long at most for the models list and a 1-token chat
CHAT_MAX_TOKENS = 16
TOOL_MAX_TOKENS = 64
# An enforced object with a 16-digit integer (llama.cpp's grammar allows that many) and the grammar's
# whitespace took 50 tokens from SmolLM2; the parallel calls need room for two.
STRUCTURED_MAX_TOKENS = 96
# A next action may be the final answer, a string no schema bounds: SmolLM2's ran to 129 and 142 tokens in 25 tries.
NEXT_ACTION_MAX_TOKENS = 192
CUT_MAX_TOKENS = 8  # the max_tokens check: a long answer asked for, this many tokens allowed
MAX_DETAIL_CHARS = 160
MAX_LISTED_MODELS = 5

PROBE_SCHEMA = JsonSchema(
    "probe_answer",
    {
        "type": "object",
        "properties": {
            "colour": {"type": "string", "enum": ["amber", "teal", "violet"]},
            "count": {"type": "integer"},
        },
        "required": ["colour", "count"],
        "additionalProperties": False,
    },
)
UNRELATED = "Write a short poem about the sea."  # nothing in it asks for a colour and a count
WEATHER = ToolSpec(
    "get_weather",
    "The current weather in one city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
ASK_WEATHER = "What is the weather in Paris right now? Use the get_weather tool."
ASK_TWO_CITIES = "What is the weather in Paris and in Rome? Call get_weather once for each city."
SCHEMA_CARRIED = (StructuredOutput.JSON_SCHEMA, StructuredOutput.JSON_OBJECT_SCHEMA)

# Results of a structured-output check, best first.
VALID = frozenset({"enforced", "obeyed"})  # valid against the schema (carried as a field / in the prompt)
PARSED = VALID | {"not enforced", "not obeyed"}  # a JSON object, not valid against the schema
ACCEPTED = PARSED | {"not JSON", "cut"}  # answered 200, but no JSON object (or cut at max_tokens before its end)
LISTED = frozenset({"ok", "not listed"})  # the models list answered


Judge = Callable[[Reply], tuple[str, str]]


@dataclass(frozen=True)
class Check:
    """One row of the table: what was asked, what came of it, and why."""

    check: str
    result: str
    detail: str
    seconds: float | None = None


@dataclass
class ProbeReport:
    base_url: str
    model: str
    checks: list[Check]
    structured_output: str | None  # the mode chosen; None when no mode was accepted
    structured_output_reason: str
    tool_calling: str | None  # the mode chosen; None when the tools were not checked
    tool_calling_reason: str
    chat_uses: dict[str, str]  # what the chat does with this endpoint under the current settings
    notes: list[str] = field(default_factory=list)
    usable: bool = False
    problem: str | None = None  # why Flowledger cannot work with the endpoint

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The table (check | result | detail), then the modes chosen and the verdict."""
        rows = [("check", "result", "detail"), *((c.check, c.result, _with_seconds(c)) for c in self.checks)]
        widths = [max(len(row[i]) for row in rows) for i in range(2)]
        table = [f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in rows]
        modes = [
            f"endpoint           {self.base_url}, model {self.model}",
            f"structured output  {self.structured_output or 'none'}: {self.structured_output_reason}",
            f"tool calling       {self.tool_calling or 'none'}: {self.tool_calling_reason}",
            *(f"note               {note}" for note in self.notes),
        ]
        verdict = "usable" if self.usable else f"NOT usable: {self.problem}"
        return [*table, "", *modes, f"verdict            {verdict}"]


def _with_seconds(check: Check) -> str:
    return check.detail if check.seconds is None else f"{check.detail} ({check.seconds:.2f} s)"


class _Prober:
    """The calls, on one client: the SDK's retries off, every call given a timeout and a token bound."""

    def __init__(self, endpoint: ModelEndpoint, timeout: float) -> None:
        import openai  # loaded only where a model is called

        self._openai = openai
        self.client = openai.OpenAI(
            api_key=endpoint.api_key or "not-needed", base_url=endpoint.base_url, max_retries=0, timeout=timeout
        )
        self.model = endpoint.model
        self.timeout = timeout
        # As the adapter asks: OpenAI's own API wants max_completion_tokens, other servers max_tokens.
        openai_proper = endpoint.base_url is None or urlsplit(str(self.client.base_url)).netloc == "api.openai.com"
        self.tokens_field = "max_completion_tokens" if openai_proper else "max_tokens"
        # As the adapter asks: chat-template tokens as stop sequences, but on OpenAI's own API.
        self.stops: dict[str, Any] = {} if openai_proper else {"stop": list(STOP_SEQUENCES)}
        self.skip: str | None = None  # why the checks from here on are not made

    def run(self, name: str, call: Callable[[], Any], judge: Callable[[Any], tuple[str, str]]) -> Check:
        """``call()`` timed and judged; an error becomes the row's result (``refused`` or ``failed``), never raised."""
        if self.skip is not None:
            return Check(name, "skipped", self.skip)
        started = time.monotonic()
        try:
            answer = call()
            result, detail = judge(answer)
        except self._openai.APIStatusError as exc:
            said = error_message(exc).strip()
            result, detail = "refused", f"{exc.status_code}: {said}" if said else f"{exc.status_code}"
        except self._openai.APITimeoutError:
            result, detail = "failed", f"no answer within {self.timeout:g} s"
        except self._openai.APIConnectionError as exc:
            result, detail = "failed", f"cannot connect: {_root_cause(exc)}"
        except Exception as exc:  # a server answering something else: the row says what, the probe goes on
            result, detail = "failed", f"{type(exc).__name__}: {exc}"
        return Check(name, result, _one_line(detail), round(time.monotonic() - started, 2))

    def chat(self, messages: list[Message], max_tokens: int, timeout: float | None = None, **fields: Any) -> Any:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [wire_message(m) for m in messages],
            "timeout": timeout or self.timeout,
            self.tokens_field: max_tokens,
            **self.stops,
            **fields,
        }
        try:
            return self.client.chat.completions.create(**request)
        except self._openai.APIStatusError as exc:
            # A server that refuses stop sequences is asked again without them, for good, as the adapter does.
            if not self.stops or exc.status_code not in (400, 422) or "stop" not in error_message(exc).lower():
                raise
            self.stops = {}
            request.pop("stop")
            return self.client.chat.completions.create(**request)

    def models(self) -> Check:
        def judge(page: Any) -> tuple[str, str]:
            ids = [str(m.id) for m in page.data]
            if self.model in ids:
                return "ok", f"{len(ids)} model{'s' if len(ids) != 1 else ''}, {self.model} among them"
            shown = ", ".join(ids[:MAX_LISTED_MODELS]) + (", ..." if len(ids) > MAX_LISTED_MODELS else "")
            return "not listed", f"{self.model} is not among {shown or 'no models'} (one-model servers take any name)"

        return self.run("models list", lambda: self.client.models.list(timeout=self.timeout), judge)

    def plain_chat(self, max_tokens: int = CHAT_MAX_TOKENS, timeout: float | None = None) -> Check:
        def judge(completion: Any) -> tuple[str, str]:
            reply = parse_reply(completion, None, lenient=False, prompt_chars=0)
            said = f": {_quoted(reply.text)}" if reply.text else ", no text"
            return "ok", f"finish_reason {reply.finish_reason}, {_tokens(completion)}{said}"

        ask = [Message("user", "Say hello in one short sentence.")]
        return self.run("plain chat", lambda: self.chat(ask, max_tokens, timeout), judge)

    def structured(
        self,
        name: str,
        mode: StructuredOutput,
        schema: JsonSchema,
        prefix: list[Message],
        ask: str,
        judge: Judge,
        max_tokens: int = STRUCTURED_MAX_TOKENS,
    ) -> Check:
        """One call in ``mode`` as the adapter makes it; ``judge`` gets the reply with ``data`` read as it reads it.

        A 200 whose answer is no JSON object is the result ``not JSON`` (``cut`` when max_tokens ended it), not a
        failure.
        """
        messages = [*prefix, *([schema_instruction(schema)] if mode in PROMPTED else []), Message("user", ask)]
        shape = response_format(mode, schema)

        def judged(completion: Any) -> tuple[str, str]:
            try:
                reply = parse_reply(completion, schema, lenient=mode in PROMPTED, prompt_chars=0)
            except ModelInvalidOutput as exc:
                choice = completion.choices[0] if completion.choices else None
                content = (choice.message.content if choice else None) or ""
                text = _quoted(content)
                if choice is not None and choice.finish_reason == "length" and "{" in content:
                    return "cut", f"max_tokens {max_tokens} ended the answer before its JSON did: {text}"
                return "not JSON", f"{exc}: {text}"
            return judge(reply)

        fields: dict[str, Any] = {"response_format": shape} if shape else {}
        return self.run(name, lambda: self.chat(messages, max_tokens, **fields), judged)

    def structured_output(self, mode: StructuredOutput) -> Check:
        carried = mode in SCHEMA_CARRIED

        def judge(reply: Reply) -> tuple[str, str]:
            problem = _schema_problem(reply.data, PROBE_SCHEMA.schema, "the answer")
            if problem is None:
                return ("enforced" if carried else "obeyed"), f"valid: {_json(reply.data)}"
            return ("not enforced" if carried else "not obeyed"), f"{problem}: {_quoted(reply.text)}"

        return self.structured(f"structured {mode.value}", mode, PROBE_SCHEMA, [], UNRELATED, judge)

    def native_tools(self, parallel: bool) -> Check:
        def judge(completion: Any) -> tuple[str, str]:
            reply = parse_reply(completion, None, lenient=False, prompt_chars=0)
            calls = reply.tool_calls
            if not calls:
                said = _quoted(reply.text) if reply.text else "empty content"
                return "no call", f"finish_reason {reply.finish_reason}, {said}"
            shown = "; ".join(f"{c.name} {_json(c.arguments)}" for c in calls)
            problems = [p for c in calls if (p := _schema_problem(c.arguments, WEATHER.parameters, "arguments"))]
            suffix = f" ({problems[0]})" if problems else ""
            if not parallel:
                return "called", shown + suffix
            return ("parallel" if len(calls) > 1 else "one call"), f"{len(calls)}: {shown}{suffix}"

        fields: dict[str, Any] = {"tools": [wire_tool(WEATHER)], "tool_choice": "auto"}
        if parallel:
            fields["parallel_tool_calls"] = True
        ask, tokens = (ASK_TWO_CITIES, STRUCTURED_MAX_TOKENS) if parallel else (ASK_WEATHER, TOOL_MAX_TOKENS)
        name = "parallel tool calls" if parallel else "tools, tool_choice auto"
        return self.run(name, lambda: self.chat([Message("user", ask)], tokens, **fields), judge)

    def next_action(self, mode: StructuredOutput | None) -> Check:
        if mode is None:
            return Check(
                "next action (structured tools)", "skipped", self.skip or "no structured-output mode was accepted"
            )
        tools = [WEATHER]
        schema = next_action_schema(tools, None)

        def judge(reply: Reply) -> tuple[str, str]:
            problem = _schema_problem(reply.data, schema.schema, "the next action")
            if problem is not None or reply.data is None:
                return "invalid", f"in {mode.value}: {problem}: {_quoted(reply.text)}"
            call, answer = parse_next_action(reply.data, tools)
            step = f"{call.name} {_json(call.arguments)}" if call else f"final answer {_quoted(str(answer))}"
            return "valid", f"in {mode.value}: {step}"

        prefix = [next_action_instruction(tools)]
        name = "next action (structured tools)"
        return self.structured(name, mode, schema, prefix, ASK_WEATHER, judge, NEXT_ACTION_MAX_TOKENS)

    def max_tokens(self) -> Check:
        def judge(completion: Any) -> tuple[str, str]:
            finish = completion.choices[0].finish_reason if completion.choices else None
            used = getattr(completion.usage, "completion_tokens", None)
            detail = f"finish_reason {finish}, {_tokens(completion)}"
            if used is not None and used > CUT_MAX_TOKENS:
                return "not honoured", f"{detail} for a bound of {CUT_MAX_TOKENS}"
            return ("honoured" if finish == "length" else "unclear"), detail

        ask = [Message("user", "Tell me a long story about a cat.")]
        return self.run(f"max_tokens {CUT_MAX_TOKENS}", lambda: self.chat(ask, CUT_MAX_TOKENS), judge)

    def streaming_usage(self) -> Check:
        def streamed() -> tuple[int, Any]:
            ask = [Message("user", "Say hello.")]
            stream = self.chat(ask, CUT_MAX_TOKENS, stream=True, stream_options={"include_usage": True})
            chunks, usage = 0, None
            with stream:
                for chunk in stream:
                    chunks += 1
                    usage = chunk.usage or usage
            return chunks, usage

        def judge(answer: tuple[int, Any]) -> tuple[str, str]:
            chunks, usage = answer
            if usage is None:
                return "no usage", f"{chunks} chunks, none with usage"
            tokens = f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens"
            return "usage", f"{chunks} chunks, one with {tokens}"

        return self.run("streaming usage", streamed, judge)


def probe(
    endpoint: ModelEndpoint,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    structured_setting: str = "auto",
    tool_setting: str = "auto",
) -> ProbeReport:
    """Every check against ``endpoint``; the settings say what the chat would do, for the report's notes."""
    prober = _Prober(endpoint, timeout)
    checks = [prober.models()]
    if checks[0].result == "failed":
        prober.skip = "the endpoint did not answer"
    checks.append(prober.plain_chat())
    if checks[1].result != "ok":
        prober.skip = prober.skip or "a plain chat failed"
    modes = {mode: prober.structured_output(mode) for mode in LADDER}
    structured, structured_reason = choose_structured(modes)
    native = prober.native_tools(parallel=False)
    checks += [
        *modes.values(),
        native,
        prober.native_tools(parallel=True),
        prober.next_action(structured),
        prober.max_tokens(),
        prober.streaming_usage(),
    ]
    # What the chat sends is one step with tool_choice auto: only that check decides (a call that comes back
    # only when two are asked for, as llama-cpp-python's does, is not what a diagnosis step will get).
    called = native.result in ("called", "parallel", "one call")
    chat = _chat_model(endpoint, structured_setting, tool_setting)
    # auto starts at the top and steps down past each refused mode
    reached = next((m for m in LADDER if modes[m].result != "refused"), None)
    chat_structured = chat.structured_output if structured_setting != "auto" else reached
    report = ProbeReport(
        base_url=str(prober.client.base_url).rstrip("/"),
        model=endpoint.model,
        checks=checks,
        structured_output=structured.value if structured else None,
        structured_output_reason=structured_reason,
        tool_calling=None if prober.skip else (ToolCalling.NATIVE if called else ToolCalling.STRUCTURED).value,
        tool_calling_reason=("not checked" if prober.skip else f"{'a' if called else 'no'} native tool call came back"),
        chat_uses={
            "structured_output": chat_structured.value if chat_structured else "none",
            "tool_calling": chat.tool_calling.value,
        },
    )
    report.notes = _notes(report, structured_setting, tool_setting)
    report.problem = _problem(checks, modes)
    report.usable = report.problem is None
    return report


def _chat_model(endpoint: ModelEndpoint, structured_setting: str, tool_setting: str) -> OpenAIChatModel:
    """The chat's own adapter for ``endpoint``: what it does under these settings is its answer, not a guess."""
    return OpenAIChatModel(
        endpoint.model,
        endpoint.api_key,
        endpoint.base_url,
        structured_output=structured_setting,
        tool_calling=tool_setting,
    )


def choose_structured(modes: dict[StructuredOutput, Check]) -> tuple[StructuredOutput | None, str]:
    """The strictest mode whose answer was valid, else whose answer was JSON, else that was accepted."""
    for results, reason in (
        (VALID, "the strictest mode accepted and enforced"),
        (PARSED, "the strictest mode giving JSON, though not valid against the schema"),
        (ACCEPTED, "the strictest mode accepted, though its answer was not JSON"),
    ):
        for mode in LADDER:
            if mode in modes and modes[mode].result in results:
                return mode, reason
    skipped = all(check.result == "skipped" for check in modes.values())
    return None, "not checked" if skipped else "no mode was accepted"


def _notes(report: ProbeReport, structured_setting: str, tool_setting: str) -> list[str]:
    """Where the chat, with the current settings, would do other than the probe chose."""
    notes = []
    uses = report.chat_uses
    chosen = report.structured_output
    if chosen and uses["structured_output"] != chosen:
        setting = next((name for name, mode in STRUCTURED_SETTINGS.items() if mode.value == chosen), None)
        how = f"FLOWLEDGER_STRUCTURED_OUTPUT={structured_setting}"
        fix = f"; FLOWLEDGER_STRUCTURED_OUTPUT={setting} would use {chosen}" if setting else ""
        notes.append(f"with {how} the chat uses {uses['structured_output']}{fix}")
    if report.tool_calling and uses["tool_calling"] != report.tool_calling:
        notes.append(
            f"with FLOWLEDGER_TOOL_CALLING={tool_setting} the chat offers tools {uses['tool_calling']};"
            f" FLOWLEDGER_TOOL_CALLING={report.tool_calling} would match what the server did"
        )
    return notes


def _problem(checks: list[Check], modes: dict[StructuredOutput, Check]) -> str | None:
    """Why Flowledger cannot work with the endpoint, or None when it can."""
    listing, chat = checks[0], checks[1]
    if listing.result not in LISTED:
        return f"the models list {listing.result}: {listing.detail}"
    if chat.result != "ok":
        return f"a plain chat {chat.result}: {chat.detail}"
    if not any(check.result in PARSED for check in modes.values()):
        return "no structured-output mode gave a JSON object"
    return None


def model_banner(settings: Settings, budget_seconds: float = BANNER_BUDGET_SECONDS) -> str:
    """``flowledger serve``'s line for a configured model: the models list and a 1-token chat, within the budget."""
    try:
        endpoint = model_endpoint_for(settings)
    except FlowledgerError as exc:
        return f"{settings.chat_model}: {exc.message}; chat turns will fail until it can be read"
    where = urlsplit(endpoint.base_url).netloc if endpoint.base_url else "the OpenAI API"
    started = time.monotonic()
    prober = _Prober(endpoint, budget_seconds)
    listing = prober.models()
    state = None
    if listing.result not in LISTED:
        state = "unreachable" if listing.result == "failed" else "refused the models list"
        state = f"{state} ({listing.detail})"
    elif (left := budget_seconds - (time.monotonic() - started)) > 0.1:
        chat = prober.plain_chat(max_tokens=1, timeout=left)
        if chat.result != "ok":
            state = f"a 1-token chat {chat.result} ({chat.detail})"
    if state is not None:
        return f"{endpoint.model} at {where} — {state}; chat turns will fail until it answers"
    chat_model = _chat_model(endpoint, settings.structured_output, settings.tool_calling)
    listed = "reachable" if listing.result == "ok" else f"reachable, though it does not list {endpoint.model}"
    return (
        f"{endpoint.model} at {where} — {listed}, structured output {settings.structured_output},"
        f" tools {chat_model.tool_calling.value} (`flowledger model probe` checks each mode)"
    )


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _schema_problem(value: Any, schema: dict[str, Any], where: str) -> str | None:
    """Why ``value`` is not valid against ``schema`` (the keywords the probe's schemas use), or None."""
    if "anyOf" in schema:
        if all(_schema_problem(value, option, where) for option in schema["anyOf"]):
            return f"{where} matches none of its alternatives"
        return None
    kind = schema.get("type")
    if isinstance(kind, str) and not _TYPES.get(kind, lambda _: True)(value):
        return f"{where} is not {'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} is {json.dumps(value)[:40]}, not one of {', '.join(map(str, schema['enum']))}"
    if not isinstance(value, dict):
        return None
    properties: dict[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", ()) if name not in value]
    if missing:
        return f"{where} lacks {', '.join(missing)}"
    extra = [name for name in value if name not in properties]
    if extra and schema.get("additionalProperties") is False:
        return f"{where} has {', '.join(extra)}, which the schema does not allow"
    for name, inner in properties.items():
        if name in value and (problem := _schema_problem(value[name], inner, name)):
            return problem
    return None


def _root_cause(exc: BaseException) -> str:
    """The innermost cause's words (``connection refused``, ``name or service not known``)."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    words = re.sub(r"^\[Errno -?\d+\]\s*", "", str(exc)) or type(exc).__name__
    return words[0].lower() + words[1:]


def _tokens(completion: Any) -> str:
    """The completion tokens the server reported (never the adapter's estimate)."""
    used = getattr(completion.usage, "completion_tokens", None)
    return "no usage reported" if used is None else f"{used} completion tokens"


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_DETAIL_CHARS else flat[: MAX_DETAIL_CHARS - 3] + "..."


def _quoted(text: str | None, limit: int = 60) -> str:
    """A model's words, on one line, quoted and cut."""
    flat = " ".join((text or "").split())
    return json.dumps(flat if len(flat) <= limit else flat[: limit - 3] + "...", ensure_ascii=False)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
