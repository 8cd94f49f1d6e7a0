"""The loop's consumer job and the stale sweep (its producers are in ``producers``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from flowledger.config import CriticDispatchStrategy
from flowledger.errors import BacklogContention, Conflict, LedgerContention, UpstreamUnavailable
from flowledger.ledger.row_failures import ROW_ERRORS
from flowledger.research.agents.recording import AgentGaveUp
from flowledger.research.backlog import Backlog
from flowledger.research.claims import ClaimTriage
from flowledger.research.models import BacklogRow, Completion, Reason
from flowledger.research.row_checks import claim_mark_of, research_problem, triage_problem
from flowledger.services import Services

logger = logging.getLogger("flowledger.research.loop")
CONSUMER_ACTOR = "system:backlog_consumer"
MAX_PULLS_PER_RUN = 25
CONSUMER_TIME_BUDGET_SECONDS = 45.0
# A close that lost a race, or of a row whose values cannot be written back: logged and counted as lost.
CLOSE_ERRORS: tuple[type[Exception], ...] = (Conflict, BacklogContention, LedgerContention, *ROW_ERRORS)


class Dispatcher(Protocol):
    """Runs the follow-up work of one row; returns the resulting flow id (or None)."""

    def dispatch(self, row: BacklogRow) -> str | None: ...


@dataclass
class BacklogConsumer:
    services: Services
    dispatchers: Mapping[str, Dispatcher]  # by trigger type
    monotonic: Callable[[], float] = time.monotonic
    default: Dispatcher | None = None  # for trigger types without a dispatcher of their own

    def run_once(self) -> dict[str, int]:
        """Pull and dispatch rows until the queue is empty or the run's budget is spent."""
        settings = self.services.settings
        backlog = Backlog(self.services)
        strategy = settings.critic_dispatch_strategy
        counts = {
            "pulled": 0,
            "completed": 0,
            "failed_voluntary": 0,
            "failed_invalid": 0,
            "marked_for_review": 0,
            "lost": 0,
        }

        def close(row: BacklogRow, completion: Completion, outcome: str) -> None:
            """Complete the row, counted under ``outcome``; a close that loses a race is logged, not raised:
            the stale sweep returns the row, and the rest of the run goes on."""
            try:
                backlog.complete(CONSUMER_ACTOR, row.request_id, completion)
            except CLOSE_ERRORS as exc:
                logger.warning(
                    "backlog row could not be closed", extra={"request_id": row.request_id, "error": type(exc).__name__}
                )
                counts["lost"] += 1
                return
            counts[outcome] += 1

        deadline = self.monotonic() + CONSUMER_TIME_BUDGET_SECONDS
        while counts["pulled"] < MAX_PULLS_PER_RUN and self.monotonic() < deadline:
            row = backlog.pull_next(CONSUMER_ACTOR, strategy=strategy.value)
            if row is None:
                break
            counts["pulled"] += 1
            triage = row.reason is Reason.CLAIM_REJECTED and strategy is CriticDispatchStrategy.MARK_FOR_REVIEW
            # The row is checked before anything acts on it: one it cannot be fails alone, never the job.
            problem = triage_problem(row) if triage else research_problem(row)
            if problem is not None:
                close(row, Completion(error=problem), "failed_invalid")
                continue
            try:
                completion, outcome = self._act(row, triage)
            except Exception as exc:  # a fault acting on one row fails that row, never the job
                logger.warning(
                    "backlog dispatcher failed", extra={"request_id": row.request_id, "error": type(exc).__name__}
                )
                completion, outcome = Completion(error="dispatcher_failed"), "failed_voluntary"
            close(row, completion, outcome)
        counts["failed_unreadable"] = backlog.failures.count
        counts["rows_failed"] = counts["failed_invalid"] + counts["failed_unreadable"] + counts["failed_voluntary"]
        return counts

    def _act(self, row: BacklogRow, triage: bool) -> tuple[Completion, str]:
        """Triage or dispatch a checked row: how it closes, and the outcome it is counted under."""
        if triage:
            ClaimTriage(self.services).mark(CONSUMER_ACTOR, claim_mark_of(row))
            return Completion(), "marked_for_review"
        dispatcher = self.dispatchers.get(row.trigger_type, self.default)
        if dispatcher is None:
            return Completion(error="no_dispatcher_configured"), "failed_voluntary"
        try:
            flow_id = dispatcher.dispatch(row)
        except AgentGaveUp as exc:  # the agent's own reason: the row fails voluntarily with it
            return Completion(error=exc.reason), "failed_voluntary"
        return Completion(flow_id=flow_id), "completed"


def consumer_job(services: Services) -> dict[str, object]:
    """The scheduled consumer: off unless BACKLOG_CONSUMER_ENABLED; the research agents dispatch every row.

    The model is resolved before anything is pulled: with its configuration unreadable the run pulls
    nothing (rather than failing every row it would pull) and the next run tries again.
    """
    if not services.settings.backlog_consumer_enabled:
        return {"skipped": "BACKLOG_CONSUMER_ENABLED is off"}
    from flowledger.llm.factory import chat_model_for
    from flowledger.research.agents.dispatch import AgentDispatcher

    try:
        model = chat_model_for(services.settings)
    except UpstreamUnavailable:
        return {"skipped": "the model is unavailable"}
    return dict(BacklogConsumer(services, dispatchers={}, default=AgentDispatcher.build(services, model)).run_once())


# The EMF metric the loop-health alarm watches: 1 while the verdict is critical, 0 otherwise.
LOOP_HEALTH_CRITICAL_METRIC = "research.loop_health.critical"


def stale_sweep_job(services: Services) -> dict[str, object]:
    """The scheduled sweep, then the loop-health verdict after it, emitted for the alarm and returned."""
    backlog = Backlog(services)
    swept: dict[str, object] = dict(backlog.sweep_stale())
    # Judged after the sweep: the verdict describes the backlog as the sweep left it.
    health = backlog.view().loop_health
    services.metrics.emit(LOOP_HEALTH_CRITICAL_METRIC, 1 if health == "critical" else 0, "Count", {})
    # Every row the sweep skipped was one it could not read or move: each is in the audit log.
    return {**swept, "rows_failed": swept["skipped"], "loop_health": health}
