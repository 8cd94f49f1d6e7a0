"""Universal shape rules for exported flows (``flowledger flows lint``): anomalies any agent's flow can show.

Critical (the file fails, exit 1):

- ``empty_step_sequence``: a closed flow with no step explains nothing.
- ``verdict_before_retrieval``: a ``verdict`` step comes before the flow's first ``retrieval`` step in
  step order, so something was decided before the evidence was fetched. A flow with no retrieval step
  (the critic walks a claim's citations, the correlator aggregates flows) is not judged by this rule.
- ``no_model_call_ref``: the flow has a model-call step (a kind in :data:`MODEL_CALL_KINDS`) but no step
  of it carries ``llm_call_log_ref``, so the model call cannot be joined with its log line. ``summary``
  is not a model-call kind: the evaluation runner records a summary step without a model call when
  nothing was retrieved.

Warnings (the file passes with notes):

- ``empty_agent_set``: the flow's ``agents`` is empty.
- ``aggregate_confidence_one``: a confidence of exactly 1.0, which real evidence scores do not reach: a
  stub or a hard-coded value.
- ``duplicate_consecutive_kinds``: two steps in a row of the same kind (a retried call recorded twice,
  a loop), except kinds that repeat by design (:data:`REPEATING_KINDS`: the diagnosis agent records one
  ``tool_call`` step per tool call a model reply asks for).
- ``summary_hidden_majority``: more than half of the flow's summaries were hidden by the summary guard.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel

from flowledger.reasoning.dataset import FlowRecord

Severity = Literal["critical", "warning"]
MODEL_CALL_KINDS = frozenset({"llm_prompt", "model_call"})
REPEATING_KINDS = frozenset({"tool_call"})
HIDDEN_SHARE_LIMIT = 0.5
RULES: dict[str, Severity] = {
    "empty_step_sequence": "critical",
    "verdict_before_retrieval": "critical",
    "no_model_call_ref": "critical",
    "empty_agent_set": "warning",
    "aggregate_confidence_one": "warning",
    "duplicate_consecutive_kinds": "warning",
    "summary_hidden_majority": "warning",
}


class LintFinding(BaseModel):
    line: int
    flow_id: str
    rule: str
    severity: Severity
    detail: str


class LintReport(BaseModel):
    """``verdict`` is FAIL on any critical finding, PASS-WITH-NOTES on warnings only, PASS otherwise."""

    verdict: Literal["PASS", "PASS-WITH-NOTES", "FAIL"]
    flows: int
    critical: int
    warnings: int
    findings: list[LintFinding]


def lint_flow(record: FlowRecord) -> list[tuple[str, str]]:
    """The rules ``record`` breaks, each as (rule, detail), in the order of :data:`RULES` (pure)."""
    steps, flow = record.steps, record.flow
    kinds = record.step_kinds
    found: list[tuple[str, str]] = []
    if not steps:
        found.append(("empty_step_sequence", "the flow has no steps"))
    if "retrieval" in kinds:
        first_retrieval = kinds.index("retrieval")
        if "verdict" in kinds[:first_retrieval]:
            found.append(
                (
                    "verdict_before_retrieval",
                    f"step {kinds.index('verdict') + 1} is a verdict,"
                    f" the first retrieval is step {first_retrieval + 1}",
                )
            )
    model_steps = [i for i, kind in enumerate(kinds) if kind in MODEL_CALL_KINDS]
    if model_steps and not any(step.back_refs.llm_call_log_ref for step in steps):
        found.append(
            (
                "no_model_call_ref",
                f"{len(model_steps)} model-call step(s) ({kinds[model_steps[0]]} at step {model_steps[0] + 1})"
                " and no llm_call_log_ref on any step",
            )
        )
    if not flow.agents:
        found.append(("empty_agent_set", "the flow names no agent"))
    if flow.aggregate_confidence == 1.0:
        found.append(("aggregate_confidence_one", "aggregate_confidence is exactly 1.0"))
    repeats = [i for i in range(1, len(kinds)) if kinds[i] == kinds[i - 1] and kinds[i] not in REPEATING_KINDS]
    if repeats:
        first = repeats[0]
        found.append(
            (
                "duplicate_consecutive_kinds",
                f"steps {first} and {first + 1} are both {kinds[first]}"
                + (f" ({len(repeats)} repeats in all)" if len(repeats) > 1 else ""),
            )
        )
    hidden = sum(step.summary_hidden for step in steps)
    if steps and hidden / len(steps) > HIDDEN_SHARE_LIMIT:
        found.append(("summary_hidden_majority", f"{hidden} of {len(steps)} summaries hidden by the guard"))
    return found


def lint_records(records: Iterable[tuple[int, FlowRecord]]) -> LintReport:
    """Every flow's findings, in file order, and the file's verdict."""
    findings: list[LintFinding] = []
    flows = 0
    for line, record in records:
        flows += 1
        for rule, detail in lint_flow(record):
            findings.append(
                LintFinding(line=line, flow_id=record.flow.flow_id, rule=rule, severity=RULES[rule], detail=detail)
            )
    critical = sum(f.severity == "critical" for f in findings)
    warnings = len(findings) - critical
    verdict: Literal["PASS", "PASS-WITH-NOTES", "FAIL"] = (
        "FAIL" if critical else "PASS-WITH-NOTES" if warnings else "PASS"
    )
    return LintReport(verdict=verdict, flows=flows, critical=critical, warnings=warnings, findings=findings)
