"""Synthetic backlog rows: load for the benchmarks and the concurrency tests, through the real enqueue."""

from __future__ import annotations

from flowledger.research.backlog import Backlog
from flowledger.research.models import DeeperRequest, Reason


def enqueue_synthetic(
    backlog: Backlog,
    count: int,
    key_prefix: str,
    actor: str = "user:producer",
    reason: Reason = Reason.WEAK_COMPOSITE_K,
) -> dict[str, str]:
    """Enqueue ``count`` user-question rows keyed ``{key_prefix}-{n:06d}``; their request ids -> created_at.

    The keys are idempotency keys, so running it again with the same prefix adds no row.
    """
    created: dict[str, str] = {}
    for n in range(count):
        row, _ = backlog.enqueue(
            actor,
            DeeperRequest(
                idempotency_key=f"{key_prefix}-{n:06d}",
                trigger_type="user_question",
                trigger_ref=f"q/{n}",
                reason=reason,
                question_framing="q",
            ),
        )
        created[row.request_id] = row.created_at
    return created
