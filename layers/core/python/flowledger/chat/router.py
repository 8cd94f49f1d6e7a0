"""The minimal, isolated intent router: one direct model call, no tools, no memory.

Its input is only the unchanged query and the optional last intent and last user query; its
output must be one value of a fixed enum. Timeouts, transport errors and invalid output are
retried once with identical input; a second failure is ROUTING_UNAVAILABLE. Any other model error
(the server refusing the request, e.g. a 4xx) is not retried: it is ROUTING_UNAVAILABLE at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from flowledger.chat.executors import within_deadline
from flowledger.chat.models import Intent
from flowledger.errors import FlowledgerError
from flowledger.llm.ports import ChatModel, JsonSchema, Message, ModelError, ModelInvalidOutput, reason_code
from flowledger.llm.retry import RetryPolicy


def _schema(intents: list[Intent]) -> JsonSchema:
    return JsonSchema(
        "intent_route",
        {
            "type": "object",
            "properties": {"intent": {"type": "string", "enum": [intent.value for intent in intents]}},
            "required": ["intent"],
            "additionalProperties": False,
        },
    )


SCHEMA = _schema(list(Intent))
# A turn that asked for its sources to be read (a selection, all documents, the prior sources) is never
# small talk: its route is chosen among the executors that read them.
GROUNDED_INTENTS = [Intent.KNOWLEDGE_QUERY, Intent.DIAGNOSIS]
GROUNDED_SCHEMA = _schema(GROUNDED_INTENTS)
ROUTER_MAX_TOKENS = 64  # {"intent": "KNOWLEDGE_QUERY"} is about 10 tokens; room for a server's whitespace
INSTRUCTIONS = (
    "Classify the user's query into exactly one intent. SYSTEM_CHAT: greetings, small talk, questions about "
    "this assistant. KNOWLEDGE_QUERY: questions answered from documents. DIAGNOSIS: investigating a failure, "
    "an error or degraded behaviour. The previous intent and query are optional context only: a new topic "
    "in the current query wins. Answer with the JSON object only."
)

# Worked examples the model sees before the query, as earlier turns of the same exchange: fixed text of our
# own, never a user's, so the router stays isolated (its only input from the turn is still the query and the
# optional last intent and query). None of them is a card turn: the card measures what they teach.
EXAMPLES: tuple[tuple[str, Intent], ...] = (
    ("hi, nice to meet you", Intent.SYSTEM_CHAT),
    ("what can you do?", Intent.SYSTEM_CHAT),
    ("What does the travel policy document say about hotel costs?", Intent.KNOWLEDGE_QUERY),
    ("How many orders are in the Q3 spreadsheet?", Intent.KNOWLEDGE_QUERY),
    ("The orders service returns 500 errors since this morning, find out why.", Intent.DIAGNOSIS),
    ("Why is the login page timing out?", Intent.DIAGNOSIS),
)


def _example_messages() -> tuple[Message, ...]:
    shown: list[Message] = []
    for query, intent in EXAMPLES:
        shown.append(Message("user", json.dumps({"query": query, "last_intent": None, "last_user_query": None})))
        shown.append(Message("assistant", json.dumps({"intent": intent.value})))
    return tuple(shown)


EXAMPLE_MESSAGES = _example_messages()  # the same for every turn: made once


class RoutingUnavailable(FlowledgerError):
    code = "ROUTING_UNAVAILABLE"

    def __init__(self, message: str, attempts: int, reason: str) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.reason = reason  # the last failure's reason code, for operators


@dataclass(frozen=True)
class Routing:
    intent: Intent
    attempts: int
    tokens: int


class IntentRouter:
    def __init__(self, model: ChatModel, policy: RetryPolicy, timeout_seconds: float) -> None:
        self._model = model
        self._policy = policy
        self._timeout = timeout_seconds

    def route(
        self,
        query: str,
        last_intent: Intent | None,
        last_user_query: str | None,
        remaining: float | None = None,
        *,
        grounded: bool = False,
    ) -> Routing:
        """The intent of ``query`` and what routing cost; :class:`RoutingUnavailable` when the policy gives up.

        ``remaining``: seconds left of the turn; no call waits past them. ``grounded``: the turn asked for
        its sources, so only a grounded executor may answer it (the enum the model chooses from is narrower).
        """
        schema, allowed = (GROUNDED_SCHEMA, set(GROUNDED_INTENTS)) if grounded else (SCHEMA, set(Intent))
        timeout = within_deadline(self._timeout, remaining)
        payload = {
            "query": query,
            "last_intent": last_intent.value if last_intent else None,
            "last_user_query": last_user_query,
        }
        messages = [Message("system", INSTRUCTIONS), *EXAMPLE_MESSAGES, Message("user", json.dumps(payload))]

        tokens = 0
        attempts = 0

        def attempt() -> Intent:
            nonlocal tokens, attempts
            attempts += 1
            reply = self._model.complete(messages, schema=schema, timeout_seconds=timeout, max_tokens=ROUTER_MAX_TOKENS)
            tokens += reply.usage.total
            data = reply.data or {}
            value = data.get("intent")
            if not isinstance(value, str) or value not in allowed or set(data) != {"intent"}:
                raise ModelInvalidOutput("the router's answer is not one supported intent")
            return Intent(value)

        try:
            intent, _ = self._policy.run(attempt)
        except ModelError as exc:  # the policy gave up, or the failure is not one it retries
            raise RoutingUnavailable(f"routing failed: {type(exc).__name__}", attempts, reason_code(exc)) from None
        return Routing(intent, attempts, tokens)
