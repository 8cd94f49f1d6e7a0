"""The offline model routes the demo's questions right: a table of phrasings per intent.

Each row goes through ``OfflineChatModel.complete`` exactly as the intent router sends it (the
strict ``intent_route`` schema, the query inside the JSON payload), so the table pins what a user
of the offline default sees, not a helper. The rules themselves are stated in
``flowledger.llm.offline_routing``.
"""

from __future__ import annotations

import json

import pytest

from flowledger.chat.models import Intent
from flowledger.chat.router import EXAMPLES, INSTRUCTIONS, SCHEMA
from flowledger.llm.offline import OfflineChatModel
from flowledger.llm.ports import Message
from flowledger.modelcard.turns import builtin_turns

DIAGNOSIS = [
    # the demo's own questions
    "Why did checkout fail last night?",
    "Users report checkout hangs",
    "Why is the payments service unavailable?",
    # symptoms
    "Checkout is stuck on the payment step",
    "The payments API is down",
    "We have an outage on checkout",
    "Error rate spike on payments-api",
    "Checkout is degraded for EU users",
    "Seeing 5xx from the orders endpoint",
    "Lots of 503s from the gateway since 23:05",
    "payments-api is failing health checks",
    "Checkout keeps timing out",
    "Orders are slow to confirm",
    "The worker crashed again",
    "Login page is broken",
    "Payment attempts are being rejected with PAYMENT_TIMEOUT",
    "DB_POOL_EXHAUSTED errors in the payments logs",
    "Latency is really high on checkout",
    "p99 latency jumped after the deploy",
    "CPU on the payments hosts this morning",
    "hi, checkout is hanging for everyone",
    # investigations
    "Can you diagnose the checkout incident?",
    "Please investigate the payment timeouts",
    "Help me troubleshoot the orders queue",
    "What caused the checkout failures?",
    "What's wrong with payments?",
    "What happened to checkout last night?",
    "How come the cart empties on refresh?",
    "Why did the deploy roll back?",
    "Why was the order table locked?",
    "Why are orders not arriving in the warehouse?",
    "Why does the checkout service return 404?",
    "Customers can't log in",
    "The site is not loading",
    "Find the root cause of the pool exhaustion",
    "Why has the consumer stopped?",
    "Which deploy broke checkout?",
    "Why is checkout returning empty carts?",
    "The payments API is unavailable to mobile users",
    "What changed in payments-api yesterday?",
    "The runbook says restart, but checkout still hangs",  # a report, not a question about the runbook
    "Why did checkout fail even though we followed the runbook?",
]

KNOWLEDGE = [
    # what a document says, even when it names a symptom
    "What does the on-call runbook say about latency?",
    "now break that down by region",  # a regrouping of figures: "down" is no symptom here
    "Break it down by store and explain the refund policy",
    "What does the runbook say to do when checkout hangs?",
    "According to the incident policy, who do we page for an outage?",
    "Is there a runbook for 5xx spikes?",
    "Does the on-call guide cover payment timeouts?",
    "Show me the playbook for a database failover",
    "What's in the runbook about DynamoDB throttling?",
    "Which document describes the error budget?",
    "Summarize the postmortem of the checkout outage",
    "What do the docs recommend when latency rises?",
    "Do we have a policy on restarting failing functions?",
    "Why does the runbook say restarting rarely helps?",
    # procedures and definitions, even with a symptom word
    "How do we handle a payments outage?",
    "How should I escalate a 5xx spike?",
    "Who do we page when checkout is down?",
    "What is an incident?",
    "What counts as a degraded service?",
    "What is our latency SLO for checkout?",
    "What is the error budget for payments?",
    "What does DB_POOL_EXHAUSTED mean?",
    "How do I declare a sev1?",
    # plain knowledge questions
    "How does the audit ledger work?",
    "How often does the ledger checkpoint?",
    "What must a patient do before reading a narrative?",
    "when are checkpoints taken?",
    "Tell me about the runbook",
    "Why is consent required before reading narratives?",
    "Why did we choose five-minute checkpoints?",
    "Who owns the payments service?",
    "Who is on call this week?",
    "What is the retention period for audit events?",
    "Can you explain the consent policy?",
    "Hi, how often does the ledger checkpoint into S3?",
    "What tables does Flowledger use?",
    "What is the latency of the ledger checkpoint job?",
    "quantum gravity",
    "Why are checkpoints stored in S3?",
    "Explain what the runbook says about restarts",
    "Help with the runbook",
]

SYSTEM = [
    "hello",
    "Hi!",
    "hey there",
    "Hello, how are you?",
    "Good morning",
    "Good evening!",
    "thanks",
    "Thank you so much",
    "cheers",
    "bye",
    "Who are you?",
    "What are you?",
    "What can you do?",
    "What do you do?",
    "How do you work?",
    "Are you a bot?",
    "What's your name?",
    "Tell me about yourself",
    "What are your capabilities?",
    "help",
    "Can you help me?",
    "How can you help?",
    "What kind of questions can I ask you?",
    "Which model are you running on?",
    "Are you running offline?",
    "Who built you?",
    "hi, what can you do?",
    "thanks, that helps",
    "Hello again!",
    "what can I ask?",
    "Are you an AI assistant?",
]

ROWS = (
    [(q, "DIAGNOSIS") for q in DIAGNOSIS]
    + [(q, "KNOWLEDGE_QUERY") for q in KNOWLEDGE]
    + [(q, "SYSTEM_CHAT") for q in SYSTEM]
)


def offline_route(query: str) -> str:
    payload = {"query": query, "last_intent": None, "last_user_query": None}
    reply = OfflineChatModel().complete(
        [Message("system", INSTRUCTIONS), Message("user", json.dumps(payload))], schema=SCHEMA, timeout_seconds=1
    )
    assert reply.data is not None and set(reply.data) == {"intent"}
    return str(reply.data["intent"])


def test_the_table_has_at_least_thirty_phrasings_per_intent() -> None:
    assert min(len(DIAGNOSIS), len(KNOWLEDGE), len(SYSTEM)) >= 30
    assert len({q for q, _ in ROWS}) == len(ROWS)  # no phrasing is pinned twice


@pytest.mark.parametrize(("query", "intent"), ROWS)
def test_offline_routing(query: str, intent: str) -> None:
    assert offline_route(query) == intent


@pytest.mark.parametrize("query", ["Why did checkout fail last night?", "What does the on-call runbook say?"])
def test_routing_is_deterministic_and_ignores_case_and_punctuation(query: str) -> None:
    variants = {query, query.upper(), query.lower(), query.rstrip("?") + " ??", f"  {query}  "}
    assert len({offline_route(v) for v in variants}) == 1


@pytest.mark.parametrize(("query", "intent"), EXAMPLES)
def test_the_routers_worked_examples_are_labelled_as_the_offline_rules_route_them(query: str, intent: Intent) -> None:
    assert offline_route(query) == intent.value


def test_the_worked_examples_teach_every_intent_and_none_is_a_card_turn() -> None:
    """The model report card measures what the examples teach: none of its questions is among them."""
    assert {intent for _, intent in EXAMPLES} == set(Intent)
    assert not {t.query.lower() for t in builtin_turns()} & {query.lower() for query, _ in EXAMPLES}
