"""The minimal, isolated intent router: one direct model call, no tools, no memory.

Its input is only the unchanged query and the optional last intent and last user query; its
output must be one value of a fixed enum. Timeouts, transport errors and invalid output are
retried once with identical input; a second failure is ROUTING_UNAVAILABLE. Any other model error
(the server refusing the request, e.g. a 4xx) is not retried: it is ROUTING_UNAVAILABLE at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from flowledger.chat.models import Intent
from flowledger.errors import FlowledgerError
from flowledger.llm.ports import ChatModel, JsonSchema, Message, ModelError, ModelInvalidOutput
from flowledger.llm.retry import RetryPolicy

SCHEMA = JsonSchema(
    "intent_route",
    {
        "type": "object",
        "properties": {"intent": {"type": "string", "enum": [intent.value for intent in Intent]}},
        "required": ["intent"],
        "additionalProperties": False,
    },
)
INSTRUCTIONS = (
    "Classify the user's query into exactly one intent. SYSTEM_CHAT: greetings, small talk, questions about "
    "this assistant. KNOWLEDGE_QUERY: questions answered from documents. DIAGNOSIS: investigating a failure, "
    "an error or degraded behaviour. The previous intent and query are optional context only: a new topic "
    "in the current query wins. Answer with the JSON object only."
)


class RoutingUnavailable(FlowledgerError):
    code = "ROUTING_UNAVAILABLE"

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


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

    def route(self, query: str, last_intent: Intent | None, last_user_query: str | None) -> Routing:
        """The intent of ``query`` and what routing cost; :class:`RoutingUnavailable` when the policy gives up."""
        payload = {
            "query": query,
            "last_intent": last_intent.value if last_intent else None,
            "last_user_query": last_user_query,
        }
        messages = [Message("system", INSTRUCTIONS), Message("user", json.dumps(payload))]

        tokens = 0
        attempts = 0

        def attempt() -> Intent:
            nonlocal tokens, attempts
            attempts += 1
            reply = self._model.complete(messages, schema=SCHEMA, timeout_seconds=self._timeout)
            tokens += reply.usage.total
            data = reply.data or {}
            value = data.get("intent")
            if not isinstance(value, str) or value not in Intent.__members__ or set(data) != {"intent"}:
                raise ModelInvalidOutput("the router's answer is not one supported intent")
            return Intent(value)

        try:
            intent, _ = self._policy.run(attempt)
        except ModelError as exc:  # the policy gave up, or the failure is not one it retries
            raise RoutingUnavailable(f"routing failed: {type(exc).__name__}", attempts) from None
        return Routing(intent, attempts, tokens)
