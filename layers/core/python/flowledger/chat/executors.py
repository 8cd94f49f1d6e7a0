"""The three fixed, isolated executors. None calls another, and none rewrites the query.

Each is a generator: it yields the fixed status codes of its stages and returns an
``Execution`` (what to publish and how the run ends).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from flowledger.chat.models import PublicContent, Reference, ReleaseOutcome, StatusCode
from flowledger.chat.previous_turn import PreviousTurn
from flowledger.chat.public_text import public_text
from flowledger.errors import FlowledgerError
from flowledger.ids import new_id
from flowledger.knowledge.index import LookupResult
from flowledger.llm.ports import ChatModel, JsonSchema, Message, ModelError, reason_code
from flowledger.llm.retry import RetryPolicy
from flowledger.reasoning.step_evidence import model_call_outputs

NO_EVIDENCE_ANSWER = PublicContent(
    text="I could not find anything about this in the knowledge base.",
    limitations="No document matched the question; nothing was inferred beyond that.",
)
MAX_EXCERPT_CHARS = 1500
MAX_ANSWER_CHARS = 4000
MAX_LIMITATIONS_CHARS = 1000
INVALID = "model_invalid_output"  # the reason code of an answer that failed its checks
# Every small-talk answer says what it is: the model's own words, read against nothing.
SYSTEM_CHAT_LIMITATION = "Not checked against any document: this is a conversational answer, not a sourced one."
# A free-text answer the token limit cut is published only with this said (and the run's reason code).
CUT_ANSWER_LIMITATION = "The model stopped at its length limit, so this answer may end mid-thought."
DEGENERATE = "model_degenerate_output"
# Generated tokens per call (max_tokens), sized to what each answer needs; the turn's budget caps them too.
SYSTEM_CHAT_MAX_TOKENS = 512
KNOWLEDGE_ANSWER_MAX_TOKENS = 1024
MIN_CALL_TOKENS = 16


class ExecutionFailed(FlowledgerError):
    """An executor could not produce a publishable result; the run fails closed.

    ``reason``: what the run records for operators beside the public code (a model failure's reason code).
    """

    code = "EXECUTION_FAILED"

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


class BudgetExhausted(FlowledgerError):
    """A hard limit of the run's budget would be crossed by the next action, which therefore does not run."""

    code = "BUDGET_EXHAUSTED"

    def __init__(self, limit: str) -> None:
        super().__init__(f"the {limit} budget is spent")
        self.limit = limit


def within_deadline(timeout: float, remaining: float | None) -> float:
    """A call's timeout, never past the run's deadline (at least a token amount, so the call can fail fast)."""
    return timeout if remaining is None else max(0.1, min(timeout, remaining))


@dataclass
class Budget:
    """What a run may spend: model calls, tool calls, tokens and wall-clock time (a monotonic deadline).

    Every limit is checked *before* the action that would spend it, so a run never overshoots.
    """

    max_model_calls: int = 8
    max_tool_calls: int = 6
    max_tokens: int = 60_000
    deadline: float | None = None  # time.monotonic() value after which no new action starts
    model_calls: int = 0
    tool_calls: int = 0
    tokens: int = 0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def usage(self) -> dict[str, int]:
        return {"model_calls": self.model_calls, "tool_calls": self.tool_calls, "tokens": self.tokens}

    def remaining_seconds(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock()

    def check_time(self) -> None:
        remaining = self.remaining_seconds()
        if remaining is not None and remaining <= 0:
            raise BudgetExhausted("time")

    def check_model_call(self, reserve: int = 0) -> None:
        """Raise :class:`BudgetExhausted` unless one more model call (keeping ``reserve`` spare) fits."""
        if self.model_calls + 1 + reserve > self.max_model_calls:
            raise BudgetExhausted("model_calls")
        if self.tokens >= self.max_tokens:
            raise BudgetExhausted("tokens")
        self.check_time()

    def call_bounds(self, timeout: float, max_tokens: int) -> tuple[float, int]:
        """One model call's timeout and ``max_tokens``: its own sizes, never past the deadline or the tokens left.

        The timeout keeps a token amount so a call past the deadline fails fast rather than not at all.
        """
        bounded_timeout = within_deadline(timeout, self.remaining_seconds())
        return bounded_timeout, max(MIN_CALL_TOKENS, min(max_tokens, self.max_tokens - self.tokens))

    def check_tool_calls(self, count: int) -> None:
        """Raise :class:`BudgetExhausted` unless ``count`` more tool calls fit: a batch runs whole or not at all."""
        if self.tool_calls + count > self.max_tool_calls:
            raise BudgetExhausted("tool_calls")
        self.check_time()


@dataclass
class TurnContext:
    """What an executor gets: the original query, the budget, and (diagnosis only) the PreviousTurn."""

    query: str
    budget: Budget
    previous_turn: PreviousTurn | None = None
    cancelled: Any = None  # a callable returning True once the run is cancelled
    run_id: str = ""
    flow: Any = None  # the turn's FlowHandle, for executors that record their own steps
    routing_step: str | None = None  # the routing step's id: the first parent of an executor's steps
    # Conversation continuity (when on, knowledge and diagnosis turns): the turn's evidence, already
    # gathered by the engines the follow-up needed (a ``continuity.grounding.Grounding``).
    grounding: Any = None


class RunCancelled(FlowledgerError):
    """The run was cancelled while an executor worked; it stops at its next check and ends CANCELLED."""

    code = "CANCELLED"


@dataclass
class Execution:
    content: PublicContent | None
    release: ReleaseOutcome
    published_result: dict[str, Any] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None  # why a fallback was published (a model failure's reason code), for operators


ExecutorRun = Generator[StatusCode, None, Execution]


class Executor(Protocol):
    def execute(self, context: TurnContext) -> ExecutorRun: ...


def _answer(
    model: ChatModel,
    messages: list[Message],
    context: TurnContext,
    policy: RetryPolicy,
    timeout: float,
    max_tokens: int,
    schema: JsonSchema | None = None,
) -> Any:
    def attempt() -> Any:
        context.budget.model_calls += 1
        bounded_timeout, bounded_tokens = context.budget.call_bounds(timeout, max_tokens)
        reply = model.complete(messages, schema=schema, timeout_seconds=bounded_timeout, max_tokens=bounded_tokens)
        context.budget.tokens += reply.usage.total
        return reply

    try:
        reply, _ = policy.run(attempt)
    except ModelError as exc:
        raise ExecutionFailed(f"the answer model failed: {type(exc).__name__}", reason_code(exc)) from None
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
            SYSTEM_CHAT_MAX_TOKENS,
        )
        text = public_text(reply.text or "", MAX_ANSWER_CHARS)
        if not text:
            raise ExecutionFailed("the model returned an empty answer", "model_invalid_output")
        cut = reply.finish_reason == "length"
        return Execution(
            PublicContent(
                text=text,
                limitations=f"{SYSTEM_CHAT_LIMITATION} {CUT_ANSWER_LIMITATION}" if cut else SYSTEM_CHAT_LIMITATION,
            ),
            ReleaseOutcome.SUCCESS,
            notes={"model_call": model_call_outputs(reply)},  # for the flow's step
            reason=DEGENERATE if cut else None,
        )


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
        invocation_id = new_id("call_")
        if context.grounding is not None:
            # Continuity gathered the evidence already (or decided that history answers): no second lookup.
            documents = [
                {"document_id": d.document_id, "title": d.title, "text": d.text, "kind": d.kind}
                for d in context.grounding.evidence
            ]
        else:
            yield StatusCode.LOOKING_UP_KNOWLEDGE
            context.budget.tool_calls += 1
            try:
                result = self._index.lookup(context.query)
            except FlowledgerError as exc:
                raise ExecutionFailed(f"lookup_knowledge failed: {exc.code}") from None
            if result.status != "READY":
                raise ExecutionFailed("the knowledge lookup is not ready")
            documents = [
                {"document_id": d.document_id, "title": d.title, "text": d.excerpt[:MAX_EXCERPT_CHARS]}
                for d in result.documents
            ]
        if not documents:
            return Execution(NO_EVIDENCE_ANSWER, ReleaseOutcome.SUCCESS, notes={"evidence": "NO_EVIDENCE"})
        yield StatusCode.COMPOSING_ANSWER
        payload = {"query": context.query, "invocation_id": invocation_id, "documents": documents}
        reply = _answer(
            self._model,
            [Message("system", self.INSTRUCTIONS), Message("user", json.dumps(payload))],
            context,
            self._policy,
            self._timeout,
            KNOWLEDGE_ANSWER_MAX_TOKENS,
            ANSWER_SCHEMA,
        )
        content = verified_answer(reply.data or {}, invocation_id, {d["document_id"]: d["title"] for d in documents})
        notes = {
            "retrieved_document_ids": [d["document_id"] for d in documents],
            "model_call": model_call_outputs(reply),
        }
        return Execution(content, ReleaseOutcome.SUCCESS, notes=notes)  # notes: for the flow's step


def verified_answer(data: dict[str, Any], invocation_id: str, returned: dict[str, str]) -> PublicContent:
    """Public content from a model answer whose every item cites this invocation and returned documents.

    Anything else (another call id, an unknown document, an uncited item, no item list) fails closed:
    nothing of the answer is published. An empty item list is the fixed no-evidence answer. Each
    document is referenced once, in order of first citation; tool-call ids are scrubbed from the
    text and limitations, which are bounded.
    """
    answer_items = data.get("answer_items")
    if answer_items == []:
        # An empty list is a well-formed answer that claims nothing: the model read the documents and
        # found none of them answers the query (the offline model says so when only headings matched).
        # Publishing the fixed no-evidence text fabricates nothing, while failing would turn an honest
        # "not in the knowledge base" into an error the user retries forever. Fail-closed is for claims
        # that cannot be verified, and there are none here; a malformed answer still fails below.
        return NO_EVIDENCE_ANSWER
    if not isinstance(answer_items, list):
        raise ExecutionFailed("the knowledge answer has no item list", INVALID)
    texts: list[str] = []
    cited: list[str] = []
    for item in answer_items:
        if not isinstance(item, dict) or item.get("invocation_id") != invocation_id:
            raise ExecutionFailed("a knowledge answer item cites another tool invocation", INVALID)
        ids = item.get("document_ids")
        if not isinstance(ids, list) or not ids or any(i not in returned for i in ids):
            raise ExecutionFailed("a knowledge answer item cites a document the lookup did not return", INVALID)
        text = item.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ExecutionFailed("a knowledge answer item is empty", INVALID)
        texts.append(text.strip())
        for document_id in ids:  # one reference per document, however often it is cited
            if document_id not in cited:
                cited.append(document_id)
    limitations = data.get("limitations")
    limitations = public_text(limitations, MAX_LIMITATIONS_CHARS) if isinstance(limitations, str) else ""
    return PublicContent(
        text=public_text("\n\n".join(texts), MAX_ANSWER_CHARS),
        references=[Reference(document_id=i, title=returned[i]) for i in cited],
        limitations=limitations or None,
    )
