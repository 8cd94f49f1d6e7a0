"""The offline default model: deterministic, no network, and labelled as such in every reply.

It serves the calls the chat use case makes, told apart by the output schema they ask for:
``intent_route`` (the rules of ``offline_routing``), ``knowledge_answer`` (quotes the best-matching sentence of
the documents it was given, citing them; a table's result or the previous answer is quoted whole), free text
(a fixed, honest system-chat answer), the diagnosis agent's steps and judgement (``offline_diagnosis``), and
for conversation continuity ``history_assessment`` and ``tabular_plan`` (``offline_continuity``).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from flowledger.llm.offline_routing import route
from flowledger.llm.ports import DEFAULT_MAX_TOKENS, JsonSchema, Message, ModelInvalidOutput, Reply, ToolSpec, Usage

NAME = "flowledger-offline-v1"
_WORD = re.compile(r"[a-z0-9]+")
_STOP = {
    "the",
    "a",
    "an",
    "is",
    "are",
    "of",
    "to",
    "in",
    "on",
    "for",
    "and",
    "or",
    "what",
    "how",
    "do",
    "does",
    "i",
    "my",
    "me",
    "it",
    "this",
    "that",
    "with",
    "can",
    "you",
    "be",
    "about",
    "tell",
}


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _best_sentence(text: str, terms: set[str]) -> str:
    """The sentence sharing most words with the query (headings skipped), or "" when none shares any."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(lines)) if s.strip()]
    scored = [(len(set(words(s)) & terms), -len(s), s) for s in sentences]
    best = max(scored, default=(0, 0, ""))
    return best[2][:400] if best[0] > 0 else ""


MAX_QUOTED_CHARS = 600


class OfflineChatModel:
    @property
    def name(self) -> str:
        return NAME

    @property
    def offline(self) -> bool:
        return True

    def complete(
        self,
        messages: list[Message],
        *,
        schema: JsonSchema | None = None,
        tools: list[ToolSpec] | None = None,
        timeout_seconds: float,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> Reply:
        """The rule's answer, finished as a server would say: ``tool_calls`` or ``stop``; no tokens are counted."""
        reply = self._reply(messages, schema, tools)
        return replace(reply, finish_reason="tool_calls" if reply.tool_calls else "stop")

    def _reply(self, messages: list[Message], schema: JsonSchema | None, tools: list[ToolSpec] | None) -> Reply:
        if tools:  # only the diagnosis agent offers tools
            from flowledger.llm.offline_diagnosis import next_agent_turn

            return next_agent_turn(messages, tools)
        if schema is None:
            return Reply(text=self._chat(messages[-1].content), usage=Usage(), model=NAME)
        try:
            request = json.loads(messages[-1].content)
        except json.JSONDecodeError:
            raise ModelInvalidOutput("the offline model needs its input as JSON") from None
        if schema.name == "intent_route":
            allowed = schema.schema["properties"]["intent"]["enum"]
            intent = route(str(request.get("query", "")))
            return Reply(data={"intent": intent if intent in allowed else allowed[0]}, model=NAME)
        if schema.name == "knowledge_answer":
            return Reply(data=self._answer(request), model=NAME)
        if schema.name == "semantic_judgement":
            from flowledger.llm.offline_diagnosis import judge

            return Reply(data=judge(request), model=NAME)
        if schema.name == "history_assessment":
            from flowledger.llm.offline_continuity import assess_history

            return Reply(data=assess_history(request), model=NAME)
        if schema.name == "tabular_plan":
            from flowledger.llm.offline_continuity import plan_table_query

            return Reply(data=plan_table_query(request), model=NAME)
        if schema.name in ("claim_check", "family_recommendation"):
            from flowledger.llm.offline_research import check_claim, recommend_for_family

            rule = check_claim if schema.name == "claim_check" else recommend_for_family
            return Reply(data=rule(request), model=NAME)
        raise ModelInvalidOutput(f"the offline model has no rule for {schema.name!r}")

    def _chat(self, query: str) -> str:
        if set(words(query)) & {"hello", "hi", "hey"}:
            return (
                "Hello! I am Flowledger's assistant, running on the offline model. Ask me about the documents "
                "in your knowledge base, or describe a problem to diagnose."
            )
        return (
            "I am running on the offline model, so I can only route questions, quote your documents and "
            "describe what I can do: answer questions from the knowledge base with citations, and diagnose "
            "problems with tools and a budget. Configure OPENAI_API_KEY or OPENAI_BASE_URL for full answers."
        )

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        terms = set(words(str(request.get("query", "")))) - _STOP
        items = []
        for document in request.get("documents", [])[:2]:
            text = str(document.get("text", ""))
            # A table's result and the previous answer are the answer already: quoted, not searched for words.
            whole = document.get("kind") in ("table", "history")
            sentence = text[:MAX_QUOTED_CHARS].strip() if whole else _best_sentence(text, terms)
            if sentence:
                items.append(
                    {
                        "text": sentence,
                        "invocation_id": request.get("invocation_id", ""),
                        "document_ids": [document["document_id"]],
                    }
                )
        return {
            "answer_items": items,
            "limitations": "Quoted from the retrieved documents by the offline model; not a reasoned answer.",
        }
