"""The research loop's producers (flag-gated): a weak research result or a rejected claim enqueues follow-up work.

They run inside the research agents. A run started from the backlog carries ``dispatched_from_backlog``
and never enqueues again, which breaks weak-result → enqueue → dispatch → weak-result loops. (Apart from
the consumer in ``loop``, which dispatches those agents: the agents import these, not the consumer.)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from flowledger.ids import new_id
from flowledger.research.backlog import Backlog
from flowledger.research.models import BacklogRow, DeeperRequest, Reason
from flowledger.services import Services

WEAK_COMPOSITE_K = 0.6


@dataclass(frozen=True)
class ResearchResult:
    trigger_type: str
    trigger_ref: str
    question: str
    hits: int
    composite_k: float
    dispatched_from_backlog: bool = False


@dataclass(frozen=True)
class CriticVerdict:
    claim_id: str
    verdict: str  # "accept" | "reject" | ...
    rejection_summary: str
    trigger_type: str
    dispatched_from_backlog: bool = False


def _key(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:40]


def _attempt_key(open_key: str) -> str:
    """A fresh attempt's idempotency key: unique per enqueue, so a finished row never blocks the next.

    Duplicates of an attempt are stopped by the open key instead (``Backlog.enqueue``): while a row
    for the same trigger (or claim) is open, another weak result or rejection returns that row.
    """
    return f"{open_key}-{new_id('at_')}"


def on_research_result(services: Services, result: ResearchResult) -> BacklogRow | None:
    """RESEARCH_AUTO_ENQUEUE_ENABLED: zero hits or composite_k < 0.6 enqueues deeper research."""
    if not services.settings.research_auto_enqueue_enabled or result.dispatched_from_backlog:
        return None
    if result.hits == 0:
        reason = Reason.NO_EVIDENCE_HITS
    elif result.composite_k < WEAK_COMPOSITE_K:
        reason = Reason.WEAK_COMPOSITE_K
    else:
        return None
    open_key = _key("research", result.trigger_type, result.trigger_ref)
    row, _ = Backlog(services).enqueue(
        "system:researcher",
        DeeperRequest(
            idempotency_key=_attempt_key(open_key),
            trigger_type=result.trigger_type,
            trigger_ref=result.trigger_ref,
            reason=reason,
            question_framing=result.question,
        ),
        open_key=open_key,
    )
    return row


def on_critic_verdict(services: Services, verdict: CriticVerdict) -> BacklogRow | None:
    """CRITIC_AUTO_ENQUEUE_ENABLED: a ``reject`` verdict enqueues ``claim_rejected`` work."""
    settings = services.settings
    if not settings.critic_auto_enqueue_enabled or verdict.dispatched_from_backlog or verdict.verdict != "reject":
        return None
    open_key = _key("claim", verdict.claim_id)
    row, _ = Backlog(services).enqueue(
        "system:critic",
        DeeperRequest(
            idempotency_key=_attempt_key(open_key),
            trigger_type=verdict.trigger_type,
            trigger_ref=verdict.claim_id,  # a critic row is about one claim
            reason=Reason.CLAIM_REJECTED,
            question_framing=verdict.rejection_summary,
        ),
        strategy=settings.critic_dispatch_strategy.value,
        open_key=open_key,
    )
    return row
