"""What the chat turn's own steps record beside their summaries: routing, grounding and the executor's answer.

Each function returns the keyword arguments of ``flow.step`` (``inputs``, ``outputs``, ``pii_fields``),
bounded by ``reasoning/step_evidence.py``. Open: decisions, codes, counts, document ids, token usage.
Sealed: what the user wrote and what their documents say (the query, excerpts, titles, table plans).
"""

from __future__ import annotations

import json
from typing import Any

from flowledger.chat.executors import Execution
from flowledger.chat.models import Intent
from flowledger.chat.router import Routing
from flowledger.reasoning.step_evidence import (
    MAX_RECORDED_DOCUMENTS,
    MAX_RECORDED_TEXT_CHARS,
    clip,
    documents,
    fitted,
)

MAX_RECORDED_PLANS = 5  # a turn computes on at most 5 tables (continuity.grounding.MAX_TABLES_PER_TURN)


def routing_fields(routing: Routing) -> dict[str, Any]:
    """The routing decision and what it cost: the intent, the attempts and the tokens of every attempt."""
    return {"outputs": {"intent": routing.intent.value, "attempts": routing.attempts, "total_tokens": routing.tokens}}


def grounding_fields(grounding: Any) -> dict[str, Any]:
    """The grounding decision (open codes and counts), the table plans it ran and the evidence it gathered.

    ``grounding`` is a ``continuity.grounding.Grounding``.
    """
    outputs: dict[str, Any] = {
        **grounding.flow_outputs(),
        "document_ids": [clip(d.document_id, 128) for d in grounding.evidence[:MAX_RECORDED_DOCUMENTS]],
    }
    inputs: dict[str, Any] = {}
    sealed_inputs: list[str] = []
    sealed_outputs: list[str] = []
    plans = [
        {"document_id": clip(str(run.get("document_id", "")), 128), "plan": _plan(run.get("plan"))}
        for run in grounding.tabular_runs[:MAX_RECORDED_PLANS]
    ]
    if plans:
        # A plan's filters hold the values the user asked about (a name, a date of birth): sealed.
        inputs["table_plans"] = plans
        inputs["table_plan_count"] = len(grounding.tabular_runs)
        sealed_inputs.append("table_plans")
    if grounding.evidence:
        # Excerpts, table results and file names come from the user's documents: sealed.
        outputs["documents"] = documents(
            [{"document_id": d.document_id, "title": d.title, "excerpt": d.text} for d in grounding.evidence]
        )
        sealed_outputs.append("documents")
    inputs, outputs = fitted(inputs, outputs)
    return {"inputs": inputs, "outputs": outputs, "pii_fields": {"inputs": sealed_inputs, "outputs": sealed_outputs}}


def _plan(plan: Any) -> Any:
    """A table plan as recorded: the plan itself when small, else its JSON text cut to the bound."""
    text = json.dumps(plan, default=str, ensure_ascii=False)
    return (
        plan if isinstance(plan, dict) and len(text) <= MAX_RECORDED_TEXT_CHARS else clip(text, MAX_RECORDED_TEXT_CHARS)
    )


def executor_fields(intent: Intent, query: str, execution: Execution) -> dict[str, Any]:
    """An answering executor's step: the query it answered, the documents it read and cited, its model call."""
    notes = execution.notes
    outputs: dict[str, Any] = {"release_outcome": execution.release.value}
    if isinstance(notes.get("model_call"), dict):
        outputs.update(notes["model_call"])
    if intent is not Intent.KNOWLEDGE_QUERY:
        return {"outputs": outputs}
    references = execution.content.references if execution.content else []
    outputs["cited_document_ids"] = [clip(r.document_id, 128) for r in references[:MAX_RECORDED_DOCUMENTS]]
    outputs["retrieved_document_ids"] = [
        clip(str(i), 128) for i in notes.get("retrieved_document_ids", [])[:MAX_RECORDED_DOCUMENTS]
    ]
    if notes.get("evidence"):
        outputs["evidence"] = str(notes["evidence"])
    # The query is the user's own words, which may name them or their condition: sealed.
    inputs = {"query": clip(query, MAX_RECORDED_TEXT_CHARS)}
    return {"inputs": inputs, "outputs": outputs, "pii_fields": {"inputs": ["query"], "outputs": []}}
