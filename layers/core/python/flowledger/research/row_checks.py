"""What a pulled backlog row must hold before anything acts on it.

A row is written through ``DeeperRequest``, but a stored row is only as good as its store: a producer
that skipped a rule (the critic's ``claim/42`` references) or a hand-edited item reaches the consumer
as it is. Each rule a dispatcher relies on is checked here first, and a row that breaks one fails with
the rule's reason code (``invalid_<field>``) instead of failing the job.
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from flowledger.research.models import BacklogRow, ClaimMark, DeeperRequest

# Any valid key: the row's own was checked at its enqueue, and no dispatcher reads it.
_ANY_KEY = "row-check"


def claim_mark_of(row: BacklogRow) -> ClaimMark:
    """The triage entry a ``claim_rejected`` row becomes under ``mark_for_review``."""
    return ClaimMark(claim_id=row.trigger_ref, rejection_summary=row.question_framing[:1000])


def research_problem(row: BacklogRow) -> str | None:
    """The reason code of the first rule ``row`` breaks as research work, or None when it holds them all."""
    return _problem(
        DeeperRequest,
        {
            "idempotency_key": _ANY_KEY,
            "trigger_type": row.trigger_type,
            "trigger_ref": row.trigger_ref,
            "reason": row.reason,
            "question_framing": row.question_framing,
        },
    )


def triage_problem(row: BacklogRow) -> str | None:
    """The reason code of the first rule ``row`` breaks as a claim to mark for review (its ref a claim id)."""
    problem = _problem(ClaimMark, {"claim_id": row.trigger_ref, "rejection_summary": row.question_framing[:1000]})
    return {"invalid_claim_id": "invalid_trigger_ref", "invalid_rejection_summary": "invalid_question_framing"}.get(
        problem or "", problem
    )


def _problem(model: type[BaseModel], values: dict[str, object]) -> str | None:
    try:
        model.model_validate(values)
    except ValidationError as exc:
        # A location's first element is a field name (schema, never the value), so the code carries no data.
        return f"invalid_{exc.errors()[0]['loc'][0]}"
    return None
