"""An OpenTelemetry span read as a flow step: its kind, agent, model, latency and token usage, a summary made
only of safe facts, and every message content, tool argument and result set apart to be sealed.

Four vocabularies are read, in this order of precedence for the step's kind:

- Flowledger's own export (``flowledger.step.kind``, ``flowledger.step.latency_ms``): ``flows otel-export``
  and this module are inverses, so a flow exported and ingested again keeps its kinds and latencies;
- the GenAI semantic conventions (``gen_ai.operation.name``: chat, text_completion, generate_content,
  execute_tool, invoke_agent, create_agent, retrieval, embeddings, invoke_workflow), with the older
  ``gen_ai.prompt.*`` / ``gen_ai.completion.*`` and ``gen_ai.usage.prompt_tokens`` shapes that released
  instrumentations still emit;
- OpenInference (``openinference.span.kind``: LLM, TOOL, AGENT, CHAIN, RETRIEVER, EMBEDDING, RERANKER,
  GUARDRAIL, EVALUATOR; ``llm.*``, ``tool.*``, ``input.value``, ``output.value``, ``retrieval.documents.*``);
- OpenLLMetry (``traceloop.span.kind``: workflow, task, agent, tool; ``traceloop.entity.*``).

A span none of them describes is still a step (kind ``span``), its attribute names listed as unmapped, never
dropped. Attribute values are read only where this module names them: a name or a count becomes a fact, a
content becomes a sealed input or output, anything else is listed by name alone. A span that cannot be a step
(no ids, ids of the wrong length, an end before its start) is refused alone, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from flowledger.reasoning.guard import check_summary
from flowledger.reasoning.otel import span_id_of

# Attribute values too long to be a name or a count are never facts.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:/@+-]{0,63}$")
_KIND = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_LATENCY_MS = 86_400_000

# The GenAI operation, the OpenInference kind and the OpenLLMetry kind, each to a step kind.
GENAI_KINDS = {
    "chat": "model_call",
    "text_completion": "model_call",
    "generate_content": "model_call",
    "execute_tool": "tool_call",
    "invoke_agent": "agent_invocation",
    "create_agent": "agent_creation",
    "retrieval": "retrieval",
    "embeddings": "embedding",
    "invoke_workflow": "workflow",
}
OPENINFERENCE_KINDS = {
    "LLM": "model_call",
    "TOOL": "tool_call",
    "AGENT": "agent_invocation",
    "CHAIN": "chain",
    "RETRIEVER": "retrieval",
    "EMBEDDING": "embedding",
    "RERANKER": "rerank",
    "GUARDRAIL": "guardrail",
    "EVALUATOR": "evaluation",
}
TRACELOOP_KINDS = {"workflow": "workflow", "task": "task", "agent": "agent_invocation", "tool": "tool_call"}
GENERIC_KIND = "span"

# Contents: sealed, whatever shape they come in (a key, or every key under it: gen_ai.prompt.0.content...).
SEALED_INPUTS = (
    "gen_ai.input.messages",
    "gen_ai.system_instructions",
    "gen_ai.prompt",
    "gen_ai.tool.call.arguments",
    "input.value",
    "llm.input_messages",
    "llm.prompts",
    "llm.prompt_template",
    "tool.parameters",
    "traceloop.entity.input",
)
SEALED_OUTPUTS = (
    "gen_ai.output.messages",
    "gen_ai.completion",
    "gen_ai.tool.call.result",
    "output.value",
    "llm.output_messages",
    "retrieval.documents",
    "reranker.input_documents",
    "reranker.output_documents",
    "traceloop.entity.output",
)
# Names and counts read as facts; everything else outside the sealed prefixes is listed as unmapped.
MAPPED = frozenset(
    {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.system",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.response.id",
        "gen_ai.response.finish_reasons",
        "gen_ai.request.max_tokens",
        "gen_ai.request.temperature",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.prompt_tokens",
        "gen_ai.usage.completion_tokens",
        "gen_ai.agent.name",
        "agent.name",  # OpenInference's
        "gen_ai.agent.id",
        "gen_ai.tool.name",
        "gen_ai.tool.type",
        "gen_ai.tool.call.id",
        "gen_ai.conversation.id",
        "gen_ai.output.type",
        "error.type",
        "openinference.span.kind",
        "llm.model_name",
        "llm.provider",
        "llm.system",
        "llm.token_count.prompt",
        "llm.token_count.completion",
        "llm.token_count.total",
        "tool.name",
        "session.id",
        "traceloop.span.kind",
        "traceloop.entity.name",
        "traceloop.workflow.name",
        "llm.request.type",
        "flowledger.step.kind",
        "flowledger.step.id",
        "flowledger.step.latency_ms",
        "flowledger.step.parent_step_ids",
        "flowledger.step.confidence",
        "flowledger.step.timing",
        "flowledger.step.summary_hidden",
        "flowledger.step.back_refs",
        "flowledger.flow.id",
        "flowledger.patient_id",
    }
)


class SpanRefused(ValueError):
    """This span cannot be a step; ``reason`` says why (never a value of the span)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SpanStep:
    """What one span says, ready to be written as a step."""

    trace_id: str  # hex, 32 digits
    span_id: str  # hex, 16 digits
    parent_span_id: str | None
    linked_span_ids: tuple[str, ...]  # links within the same trace: more edges of the DAG
    kind: str
    agent: str
    summary: str  # safe facts only; passes the summary guard
    model: str | None = None
    tool: str | None = None  # the tool a tool call ran, when the span names it
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: int | None = None
    failed: bool = False
    inputs: dict[str, Any] = field(default_factory=dict)  # sealed, every key
    outputs: dict[str, Any] = field(default_factory=dict)  # sealed, every key
    unmapped: tuple[str, ...] = ()  # attribute names read as nothing
    facts: dict[str, Any] = field(default_factory=dict)  # more safe facts (an evaluation's name, score, label)


def value_of(value: AnyValue) -> Any:
    """An OTLP attribute value as plain data (bytes as hex)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    """Attributes as a dict (a key sent twice keeps its last value, as the SDKs do)."""
    return {kv.key: value_of(kv.value) for kv in pairs}


def is_flow_span(span: Span) -> bool:
    """Whether ``span`` is a flow's own span from ``flows otel-export`` (its flow id, no step kind): it is the
    flow the trace becomes, not one of its steps."""
    keys = {item.key for item in span.attributes}
    return "flowledger.flow.id" in keys and "flowledger.step.kind" not in keys


def span_step(span: Span, resource: Mapping[str, Any]) -> SpanStep:
    """The step ``span`` is; :class:`SpanRefused` when it cannot be one."""
    trace_id, span_id = _id(span.trace_id, 16, "trace_id"), _id(span.span_id, 8, "span_id")
    parent = _id(span.parent_span_id, 8, "parent_span_id") if span.parent_span_id else None
    if parent == span_id:
        raise SpanRefused("the span is its own parent")
    attrs = attributes(span.attributes)
    exported_from = attrs.get("flowledger.flow.id")
    if isinstance(exported_from, str) and parent == span_id_of(exported_from).hex():
        parent = None  # under its flow's own span: a step without parents (flows otel-export's structure)
    if span.end_time_unix_nano and span.end_time_unix_nano < span.start_time_unix_nano:
        raise SpanRefused("the span ends before it starts")
    links = tuple(
        link.span_id.hex() for link in span.links if link.trace_id == span.trace_id and len(link.span_id) == 8
    )
    inputs, outputs, unmapped = sorted_out(attrs)
    kind = _kind(attrs)
    agent = agent_of(attrs, resource)
    model = _name(attrs, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
    tokens_in = _count(attrs, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
    tokens_out = _count(
        attrs, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion"
    )
    failed = span.status.code == Status.STATUS_CODE_ERROR or "error.type" in attrs
    return SpanStep(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        linked_span_ids=links,
        kind=kind,
        agent=agent,
        summary=summary_of(kind, span.name, attrs, model, tokens_in, tokens_out, failed),
        model=model,
        tool=_name(attrs, "gen_ai.tool.name", "tool.name") if kind == "tool_call" else None,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        latency_ms=_latency(span, attrs),
        failed=failed,
        inputs=inputs,
        outputs=outputs,
        unmapped=unmapped,
    )


def summary_of(
    kind: str,
    span_name: str,
    attrs: Mapping[str, Any],
    model: str | None,
    tokens_in: int | None,
    tokens_out: int | None,
    failed: bool,
) -> str:
    """The step's summary from safe facts only: kind, model, tool or agent name, counts, failure."""
    tool = _name(attrs, "gen_ai.tool.name", "tool.name")
    agent = _name(attrs, "gen_ai.agent.name", "agent.name")
    named = safe_name(span_name)
    if kind == "model_call":
        text = f"Model call to {model}" if model else "Model call"
        if tokens_in is not None and tokens_out is not None:
            text += f", {tokens_in} \u2192 {tokens_out} tokens"
    elif kind == "tool_call":
        text = f"Tool {tool}" if tool else "Tool call"
    elif kind in ("agent_invocation", "agent_creation"):
        verb = "invoked" if kind == "agent_invocation" else "created"
        text = f"Agent {agent} {verb}" if agent else f"Agent {verb}"
    elif kind == "retrieval":
        documents = _count_prefixed(attrs, "retrieval.documents.")
        text = f"Retrieval, {documents} documents" if documents else "Retrieval"
    elif kind == "embedding":
        text = f"Embeddings with {model}" if model else "Embeddings"
    elif kind == "workflow":
        workflow = _name(attrs, "traceloop.workflow.name") or named
        text = f"Workflow {workflow}" if workflow else "Workflow"
    elif kind == GENERIC_KIND:
        text = f"Span {named}" if named else "Span"
    else:
        label = kind.replace("_", " ").capitalize()
        text = f"{label} {named}" if named else label
    if failed:
        text += ", failed"
    if check_summary(text).safe:
        return text
    return kind.replace("_", " ").capitalize() + (", failed" if failed else "")  # a name the guard refused


def _id(raw: bytes, size: int, what: str) -> str:
    if len(raw) != size:
        raise SpanRefused(f"its {what} is {len(raw)} bytes, not {size}")
    if not any(raw):
        raise SpanRefused(f"its {what} is all zeros")
    return raw.hex()


def _kind(attrs: Mapping[str, Any]) -> str:
    own = attrs.get("flowledger.step.kind")
    if isinstance(own, str) and _KIND.match(own):
        return own
    for key, table in (
        ("gen_ai.operation.name", GENAI_KINDS),
        ("openinference.span.kind", OPENINFERENCE_KINDS),
        ("traceloop.span.kind", TRACELOOP_KINDS),
    ):
        value = attrs.get(key)
        if isinstance(value, str) and value in table:
            return table[value]
    return GENERIC_KIND


def agent_of(attrs: Mapping[str, Any], resource: Mapping[str, Any]) -> str:
    """A step's agent as a step may name it (lower case, ``[a-z0-9_.-]``): the span's agent, else the service."""
    for value in (attrs.get("gen_ai.agent.name"), attrs.get("agent.name"), resource.get("service.name")):
        if isinstance(value, str):
            slug = re.sub(r"[^a-z0-9_.-]+", "_", value.strip().lower()).strip("_.-")[:64]
            if slug and slug[0].isalpha():
                return slug
    return "otel"


def _name(attrs: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        found = safe_name(attrs.get(key))
        if found:
            return found
    return None


def safe_name(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and _NAME.match(value.strip()) else None


def _count(attrs: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53:
            return value
    return None


def _count_prefixed(attrs: Mapping[str, Any], prefix: str) -> int:
    """How many items an OpenInference flattened list holds (``retrieval.documents.3.document.id`` -> 4)."""
    indexes = {key[len(prefix) :].split(".", 1)[0] for key in attrs if key.startswith(prefix)}
    return len({i for i in indexes if i.isdigit()})


def _latency(span: Span, attrs: Mapping[str, Any]) -> int | None:
    own = _count(attrs, "flowledger.step.latency_ms")
    if own is not None:
        return min(own, MAX_LATENCY_MS)
    if attrs.get("flowledger.step.timing") == "estimated":
        return None  # flows otel-export laid an unmeasured step out in time: its span's length was never measured
    if not span.start_time_unix_nano or not span.end_time_unix_nano:
        return None
    return min((span.end_time_unix_nano - span.start_time_unix_nano) // 1_000_000, MAX_LATENCY_MS)


def sorted_out(attrs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]:
    """The attributes as sealed inputs, sealed outputs, and the names of those read as nothing.

    A content keeps its convention's name; one flattened over many keys (``gen_ai.prompt.0.content``,
    ``retrieval.documents.3.document.id``) is gathered under its prefix, keyed by the rest, so a step has a
    few sealed fields however long the conversation.
    """
    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    unmapped: list[str] = []
    for key, value in attrs.items():
        input_prefix = _prefix(key, SEALED_INPUTS)
        prefix, side = (input_prefix, inputs) if input_prefix else (_prefix(key, SEALED_OUTPUTS), outputs)
        if prefix is None:
            if key not in MAPPED:
                unmapped.append(key)
        elif key == prefix:
            side[prefix] = value
        else:
            gathered = side.setdefault(prefix, {})
            if not isinstance(gathered, dict):  # the flat key came first: keep it beside the flattened ones
                gathered = side[prefix] = {"": gathered}
            gathered[key[len(prefix) + 1 :]] = value
    return inputs, outputs, tuple(sorted(unmapped))


def _prefix(key: str, prefixes: tuple[str, ...]) -> str | None:
    return next((prefix for prefix in prefixes if key == prefix or key.startswith(prefix + ".")), None)
