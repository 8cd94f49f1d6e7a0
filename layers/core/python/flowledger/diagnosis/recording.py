"""The diagnosis's reasoning flow: one step per model call and tool call, then draft, guards and release.

Summaries describe what a step did (which tool, its outcome, how many results), never what the user
asked, the model wrote or a tool returned: they are fixed texts with names and counts. Each model
call step points back to its entry in the model-call log (``back_refs.llm_call_log_ref``), so an
operator can join the flow with the logs. Steps chain: each step's parent is the step before it.

What a step did is in its ``inputs`` and ``outputs``, bounded by ``reasoning/step_evidence.py``: a tool
step the SQL, log query or knowledge query it ran and what came back (counts, first rows, matched
lines, document ids and excerpts); a model step its token usage and finish reason. Fields that may hold
personal data are declared in ``pii_fields`` and sealed by the flow service (see :func:`tool_fields`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from flowledger.chat.executors import TurnContext
from flowledger.diagnosis.observations import Observation
from flowledger.diagnosis.tools import ToolOutcome
from flowledger.llm.ports import Reply
from flowledger.reasoning.step_evidence import (
    MAX_RECORDED_TEXT_CHARS,
    clip,
    documents,
    first_lines,
    first_rows,
    fitted,
    model_call_outputs,
    sql_shape,
    sql_text,
)

logger = logging.getLogger("flowledger.diagnosis")
AGENT = "diagnosis_agent"
RELEASE = "diagnosis_release"


@dataclass
class DiagnosisRecording:
    flow: Any  # FlowHandle, or None when nothing is recorded
    run_id: str
    last_step: str | None
    model_calls: int = 0

    @classmethod
    def for_turn(cls, context: TurnContext) -> DiagnosisRecording:
        """The recording of one turn: its steps start under the routing step."""
        return cls(context.flow, context.run_id, context.routing_step)

    def next_model_call_ref(self) -> str:
        self.model_calls += 1
        return f"{self.run_id}/model-{self.model_calls}"

    def _step(self, kind: str, agent: str, summary: str, **extra: Any) -> None:
        if self.flow is None:
            return
        parents = [self.last_step] if self.last_step else None
        step_id = self.flow.step(kind, agent, summary, parents=parents, **extra)
        if step_id:
            self.last_step = step_id

    def model_call(self, ref: str, reply: Reply, latency_ms: int, max_tokens: int) -> None:
        tool_calls = len(reply.tool_calls)
        summary = (
            f"The model proposed {tool_calls} tool call{'s' if tool_calls != 1 else ''}"
            if tool_calls
            else "The model answered with a draft"
        )
        outputs = {
            **model_call_outputs(reply),
            "tool_calls": [call.name for call in reply.tool_calls],
        }
        self._step(
            "model_call",
            AGENT,
            summary,
            latency_ms=latency_ms,
            inputs={"max_tokens": max_tokens},
            outputs=outputs,
            back_refs={"llm_call_log_ref": ref},
        )

    def tool_call(self, observation: Observation, latency_ms: int) -> None:
        result = observation.result
        summary = (
            f"Called {observation.tool}: {result.outcome.value}, {result.rows} result{'s' if result.rows != 1 else ''}"
        )
        try:
            inputs, outputs, pii = tool_fields(observation)
        except Exception:  # recording never fails the agent: the step is kept, without its evidence
            logger.warning("tool step evidence not recorded", extra={"tool": observation.tool}, exc_info=True)
            inputs, outputs, pii = {"tool": observation.tool}, {"observation_id": observation.id}, {}
        self._step(
            "tool_call",
            AGENT,
            summary,
            latency_ms=latency_ms,
            inputs=inputs,
            outputs=outputs,
            pii_fields=pii,
        )

    def draft(self, summary: str) -> None:
        self._step("draft", AGENT, summary)

    def evidence_guard(self, passed: bool, reason: str | None) -> None:
        summary = "The evidence guard accepted every claim" if passed else "The evidence guard refused the draft"
        self._step("evidence_guard", RELEASE, summary, outputs={"passed": passed, "reason": reason or "none"})

    def semantic_guard(self, passed: bool, model_call: dict[str, Any] | None = None) -> None:
        # The judge's reasons are never recorded: only whether it accepted, and what its model call cost.
        summary = (
            "The semantic guard accepted the conclusion" if passed else "The semantic guard refused the conclusion"
        )
        self._step("semantic_guard", RELEASE, summary, outputs={"passed": passed, **(model_call or {})})

    def release(self, outcome: str, summary: str) -> None:
        self._step("release", RELEASE, summary, outputs={"release_outcome": outcome})


def tool_fields(observation: Observation) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[str]]]:
    """A tool step's inputs, outputs and PII fields: what the tool was asked and what it found, bounded.

    Open (not sealed): the tool, the outcome, counts, the SQL's shape (literals masked), the tables and
    columns read, the log group and window, and document ids, so an operator sees what ran without an
    audited read. Sealed, each for its reason beside it: whatever may quote a person.
    """
    result = observation.result
    details = result.details
    arguments = observation.arguments
    inputs: dict[str, Any] = {"tool": observation.tool}
    outputs: dict[str, Any] = {
        "observation_id": observation.id,
        "outcome": result.outcome.value,
        "rows": result.rows,
        "observation_truncated": result.truncated,
    }
    sealed_inputs: list[str] = []
    sealed_outputs: list[str] = []
    if result.outcome in (ToolOutcome.REFUSED, ToolOutcome.FAILED):
        # The reason may quote what the model asked (a log group, a fragment of SQL): sealed with it.
        outputs["reason"] = clip(result.text, MAX_RECORDED_TEXT_CHARS)
        sealed_outputs.append("reason")
    if observation.tool == "query_sql":
        asked = str(details.get("statement") or arguments.get("sql") or "")
        # The SQL's literals may be what the user asked about (a name, a patient's number): the text is
        # sealed, its shape with every literal masked stays open.
        inputs.update(sql_text(asked))
        inputs["sql_shape"] = sql_shape(asked)
        sealed_inputs.append("sql")
        if "columns" in details:
            inputs["tables"] = [clip(str(table), 128) for table in details.get("tables", [])][:20]
            outputs["columns"] = [clip(str(column), 128) for column in details["columns"]][:50]
            outputs.update(first_rows(details.get("rows", [])))
            outputs["more_rows"] = bool(details.get("more_rows"))
            # Rows come from the application's own database, whose tables may hold patients; no column is
            # trusted to be free of personal data, so rows are always sealed (counts and columns stay open).
            sealed_outputs.append("first_rows")
    elif observation.tool == "query_logs":
        window = details or arguments
        inputs.update(
            {
                "log_group": clip(str(window.get("log_group") or ""), 512),
                "start": clip(str(window.get("start") or ""), 40),
                "end": clip(str(window.get("end") or "now"), 40),
                "limit": window.get("limit") if isinstance(window.get("limit"), int) else None,
            }
        )
        asked_terms = window.get("terms")
        terms: list[Any] = asked_terms if isinstance(asked_terms, list) else []
        # Terms are copied from the user's report: an order number, a person's identifier, a name.
        inputs["terms"] = [clip(str(term), 100) for term in terms][:5]
        inputs["term_count"] = len(terms)
        sealed_inputs.append("terms")
        if "events" in details:
            outputs.update(first_lines(details["events"]))
            outputs["more_matched"] = bool(details.get("more_matched"))
            # A log line may carry any identifier the application logged (an order, a user, an address).
            sealed_outputs.append("matched_lines")
    elif observation.tool == "lookup_knowledge":
        # The query is the model's rewording of the user's report, which may name a person.
        inputs["query"] = clip(str(details.get("query") or arguments.get("query") or ""), MAX_RECORDED_TEXT_CHARS)
        sealed_inputs.append("query")
        found = details.get("documents") or []
        outputs["document_ids"] = [clip(str(d.get("document_id", "")), 128) for d in found]
        if found:
            # Excerpts and titles (a file name may name a patient) come from uploaded documents: sealed.
            outputs["documents"] = documents(found)
            sealed_outputs.append("documents")
    inputs, outputs = fitted(inputs, outputs)
    return inputs, outputs, {"inputs": sealed_inputs, "outputs": sealed_outputs}
