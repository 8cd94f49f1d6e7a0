"""The three fixed, isolated executors. None calls another, and none rewrites the query.

Each is a generator: it yields the fixed status codes of its stages and returns an
``Execution`` (what to publish and how the run ends).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from flowledger.chat.models import PublicContent, Reference, ReleaseOutcome, StatusCode
from flowledger.chat.previous_turn import PreviousTurn
from flowledger.errors import FlowledgerError
from flowledger.ids import new_id
from flowledger.knowledge.index import LookupResult
from flowledger.llm.ports import ChatModel, JsonSchema, Message, ModelError
from flowledger.llm.retry import RetryPolicy

NO_EVIDENCE_ANSWER = PublicContent(
    text="I could not find anything about this in the knowledge base.",
    limitations="No document matched the question; nothing was inferred beyond that.",
)
MAX_EXCERPT_CHARS = 1500
MAX_ANSWER_CHARS = 4000


class ExecutionFailed(FlowledgerError):
    """An executor could not produce a publishable result; the run fails closed."""

    code = "EXECUTION_FAILED"


@dataclass
class Budget:
    """What a run may spend: model calls and tokens (the diagnosis agent also counts tool calls)."""

    max_model_calls: int = 8
    max_tool_calls: int = 6
    model_calls: int = 0
    tool_calls: int = 0
    tokens: int = 0

    def usage(self) -> dict[str, int]:
        return {"model_calls": self.model_calls, "tool_calls": self.tool_calls, "tokens": self.tokens}


@dataclass
class TurnContext:
    """What an executor gets: the original query, the budget, and (diagnosis only) the PreviousTurn."""

    query: str
    budget: Budget
    previous_turn: PreviousTurn | None = None
    cancelled: Any = None  # a callable returning True once the run is cancelled


@dataclass
class Execution:
    content: PublicContent | None
    release: ReleaseOutcome
    published_result: dict[str, Any] | None = None
    notes: dict[str, Any] = field(default_factory=dict)


ExecutorRun = Generator[StatusCode, None, Execution]


class Executor(Protocol):
    def execute(self, context: TurnContext) -> ExecutorRun: ...


def _answer(
    model: ChatModel,
    messages: list[Message],
    context: TurnContext,
    policy: RetryPolicy,
    timeout: float,
    schema: JsonSchema | None = None,
) -> Any:
    def attempt() -> Any:
        context.budget.model_calls += 1
        reply = model.complete(messages, schema=schema, timeout_seconds=timeout)
        context.budget.tokens += reply.usage.total
        return reply

    try:
        reply, _ = policy.run(attempt)
    except ModelError as exc:
        raise ExecutionFailed(f"the answer model failed: {type(exc).__name__}") from None
    return reply


class SystemChatExecutor:
    """One no-tool model response; no evidence tool, agent or guard runs."""

    INSTRUCTIONS = (
        "You are Flowledger's assistant. Answer briefly. You can answer questions from the "
        "knowledge base with citations and diagnose problems; do not invent facts about documents."
    )

    def __init__(self, model: ChatModel, policy: RetryPolicy, timeout: float) -> None:
        self._model, self._policy, self._timeout = model, policy, timeout

    def execute(self, context: TurnContext) -> ExecutorRun:
        yield StatusCode.COMPOSING_ANSWER
        reply = _answer(
            self._model,
            [Message("system", self.INSTRUCTIONS), Message("user", context.query)],
            context,
            self._policy,
            self._timeout,
        )
        text = (reply.text or "").strip()[:MAX_ANSWER_CHARS]
        if not text:
            raise ExecutionFailed("the model returned an empty answer")
        return Execution(PublicContent(text=text), ReleaseOutcome.SUCCESS)


class KnowledgeLookup(Protocol):
    def lookup(self, query: str, limit: int = 4) -> LookupResult: ...


ANSWER_SCHEMA = JsonSchema(
    "knowledge_answer",
    {
        "type": "object",
        "properties": {
            "answer_items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string"},
                        "invocation_id": {"type": "string"},
                        "document_ids": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["text", "invocation_id", "document_ids"],
                    "additionalProperties": False,
                },
            },
            "limitations": {"type": "string"},
        },
        "required": ["answer_items", "limitations"],
        "additionalProperties": False,
    },
)


class KnowledgeExecutor:
    """Exactly one ``lookup_knowledge`` invocation and one bounded answer call, references verified."""

    INSTRUCTIONS = (
        "Answer the query only from the documents given. Every answer item must carry the "
        "invocation_id given and the document_ids it relies on, chosen only from those given. "
        "State limitations plainly. Answer with the JSON object only."
    )

    def __init__(self, model: ChatModel, index: KnowledgeLookup, policy: RetryPolicy, timeout: float) -> None:
        self._model, self._index, self._policy, self._timeout = model, index, policy, timeout

    def execute(self, context: TurnContext) -> ExecutorRun:
        yield StatusCode.LOOKING_UP_KNOWLEDGE
        invocation_id = new_id("call_")
        context.budget.tool_calls += 1
        try:
            result = self._index.lookup(context.query)
        except FlowledgerError as exc:
            raise ExecutionFailed(f"lookup_knowledge failed: {exc.code}") from None
        if result.status != "READY":
            raise ExecutionFailed("the knowledge lookup is not ready")
        if result.evidence == "NO_EVIDENCE":
            return Execution(NO_EVIDENCE_ANSWER, ReleaseOutcome.SUCCESS, notes={"evidence": "NO_EVIDENCE"})
        yield StatusCode.COMPOSING_ANSWER
        documents = [
            {"document_id": d.document_id, "title": d.title, "text": d.excerpt[:MAX_EXCERPT_CHARS]}
            for d in result.documents
        ]
        payload = {"query": context.query, "invocation_id": invocation_id, "documents": documents}
        reply = _answer(
            self._model,
            [Message("system", self.INSTRUCTIONS), Message("user", json.dumps(payload))],
            context,
            self._policy,
            self._timeout,
            ANSWER_SCHEMA,
        )
        content = verified_answer(reply.data or {}, invocation_id, {d.document_id: d.title for d in result.documents})
        return Execution(content, ReleaseOutcome.SUCCESS)


def verified_answer(data: dict[str, Any], invocation_id: str, returned: dict[str, str]) -> PublicContent:
    """Public content from a model answer whose every item cites this invocation and returned documents.

    Anything else (another call id, an unknown document, an uncited item) fails closed: nothing
    of the answer is published. Tool-call ids never reach the public content.
    """
    answer_items = data.get("answer_items")
    if not isinstance(answer_items, list) or not answer_items:
        raise ExecutionFailed("the knowledge answer has no items")
    texts, cited = [], []
    for item in answer_items:
        if not isinstance(item, dict) or item.get("invocation_id") != invocation_id:
            raise ExecutionFailed("a knowledge answer item cites another tool invocation")
        ids = item.get("document_ids")
        if not isinstance(ids, list) or not ids or any(i not in returned for i in ids):
            raise ExecutionFailed("a knowledge answer item cites a document the lookup did not return")
        text = item.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ExecutionFailed("a knowledge answer item is empty")
        texts.append(text.strip())
        cited += [i for i in ids if i not in cited]
    limitations = data.get("limitations")
    return PublicContent(
        text="\n\n".join(texts)[:MAX_ANSWER_CHARS],
        references=[Reference(document_id=i, title=returned[i]) for i in cited],
        limitations=limitations if isinstance(limitations, str) and limitations else None,
    )


# ---- diagnosis: the port, a minimal agent, and the release boundary -----------------------------------


@dataclass(frozen=True)
class Draft:
    """What the diagnosis agent hands to release. Raw evidence stays here, never in public content."""

    conclusion: str | None
    scope: str
    limitations: str
    observations: int  # canonical safe observations made
    stopped_by: str | None = None  # "saturated", "missing_context", "budget" or None
    documents: tuple[dict[str, str], ...] = ()


class DiagnosisAgent(Protocol):
    def diagnose(self, context: TurnContext) -> Draft: ...


class UnconfiguredDiagnosisAgent:
    """Until the diagnosis agent lands: no tools to observe with, so it stops for missing context."""

    def diagnose(self, context: TurnContext) -> Draft:
        return Draft(
            conclusion=None,
            scope="no diagnosis tools are configured",
            limitations="",
            observations=0,
            stopped_by="missing_context",
        )


class DiagnosisRelease:
    """The only way a diagnosis is published: a PublishedResult, or a bounded SafeFallback."""

    FALLBACK = PublicContent(
        text="I could not reach a safe conclusion for this diagnosis. Nothing was published as a finding.",
        limitations="The diagnosis stopped before it had enough evidence.",
    )

    def release(self, query: str, draft: Draft) -> Execution:
        if draft.conclusion and draft.stopped_by is None:
            published = {
                "query": query,
                "conclusion": draft.conclusion,
                "scope": draft.scope,
                "limitations": draft.limitations,
                "documents": list(draft.documents),
            }
            return Execution(
                PublicContent(text=draft.conclusion, limitations=draft.limitations or None),
                ReleaseOutcome.SUCCESS,
                published_result=published,
            )
        if draft.stopped_by == "budget" and draft.observations == 0:
            raise ExecutionFailed("the diagnosis budget ran out before any safe observation")
        return Execution(self.FALLBACK, ReleaseOutcome.FALLBACK, notes={"stopped_by": draft.stopped_by or "none"})


class DiagnosisExecutor:
    def __init__(self, agent: DiagnosisAgent, release: DiagnosisRelease) -> None:
        self._agent, self._release = agent, release

    def execute(self, context: TurnContext) -> ExecutorRun:
        yield StatusCode.DIAGNOSING
        draft = self._agent.diagnose(context)
        yield StatusCode.RELEASING
        return self._release.release(context.query, draft)
