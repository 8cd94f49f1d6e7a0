"""ChatApplicationUseCase: one persisted run per turn, routed to one fixed executor.

``run`` is a plain generator of typed events (start, status, content, done, error); the SSE and
JSON adapters both consume it, so streaming and standard responses cannot drift apart.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from flowledger.chat.executors import Budget, ExecutionFailed, Executor, RunCancelled, TurnContext
from flowledger.chat.models import (
    ChatEvent,
    ChatRequest,
    ContentEvent,
    DoneEvent,
    ErrorEvent,
    Intent,
    ReleaseOutcome,
    RunStatus,
    StartEvent,
    StatusCode,
    StatusEvent,
)
from flowledger.chat.previous_turn import previous_turn_from
from flowledger.chat.router import IntentRouter, RoutingUnavailable
from flowledger.chat.runs import RunStore
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.llm.ports import ChatModel
from flowledger.reasoning.recorder import FlowHandle, NoOpRecorder, ReasoningFlowRecorder

logger = logging.getLogger("flowledger.chat")
ROUTED = {
    Intent.SYSTEM_CHAT: StatusCode.ROUTED_SYSTEM_CHAT,
    Intent.KNOWLEDGE_QUERY: StatusCode.ROUTED_KNOWLEDGE_QUERY,
    Intent.DIAGNOSIS: StatusCode.ROUTED_DIAGNOSIS,
}


@dataclass
class CancelToken:
    """Shared by the transport (client disconnect) and the run: once set, the run cannot succeed."""

    _event: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


EXECUTOR_STEPS = {
    Intent.SYSTEM_CHAT: ("system_chat", "system_chat_executor", "Answered without tools"),
    Intent.KNOWLEDGE_QUERY: (
        "knowledge_answer",
        "knowledge_executor",
        "Looked up the knowledge base once and checked every citation",
    ),
}


@dataclass
class ChatApplicationUseCase:
    runs: RunStore
    router: IntentRouter
    executors: dict[Intent, Executor]
    model: ChatModel
    recorder: ReasoningFlowRecorder = field(default_factory=NoOpRecorder)
    # A fresh budget per turn; its deadline (time.monotonic) bounds the whole turn.
    budget: Callable[[], Budget] = Budget

    def run(
        self, principal: Principal, request: ChatRequest, cancel: CancelToken, deadline: float | None = None
    ) -> Iterator[ChatEvent]:
        """Persist the turn's run, then return the generator of its events; recorded as a flow when enabled.

        The run is created before the first event, so a refusal (another user's session raises
        :class:`Forbidden`) reaches the caller as an error before any stream starts. The flow's
        summaries are fixed texts: nothing the user or the model wrote goes into them.
        """
        session_id = request.session_id or new_id("ses_")
        run_id = new_id("run_")
        started = self.runs.create(session_id, run_id, principal.id, request.query, self.model.name, self.model.offline)
        budget = self.budget()
        if deadline is not None:  # the caller's deadline (the Lambda's remaining time) may be the nearer one
            budget.deadline = deadline if budget.deadline is None else min(budget.deadline, deadline)
        return self._events(session_id, run_id, started, request, cancel, budget)

    def _events(
        self, session_id: str, run_id: str, started: str, request: ChatRequest, cancel: CancelToken, budget: Budget
    ) -> Iterator[ChatEvent]:
        yield StartEvent(session_id=session_id, run_id=run_id)
        with self.recorder.flow(
            "chat_turn", f"chat/{run_id}", "A chat turn was routed to one executor", trace_id=session_id, deferred=True
        ) as flow:
            try:
                yield from self._turn(session_id, run_id, started, request, cancel, flow, budget)
            except Exception:
                # Whatever broke, the run still ends exactly once and the client hears about it.
                logger.exception("chat turn failed", extra={"run_id": run_id})
                with contextlib.suppress(Exception):
                    self.runs.finish(
                        session_id,
                        run_id,
                        status=RunStatus.FAILED,
                        release=ReleaseOutcome.FAILED,
                        intent=None,
                        published_result=None,
                        content=None,
                        started=started,
                        budget_usage={},
                    )
                yield ErrorEvent(session_id=session_id, run_id=run_id, code="internal_error", message="internal error")

    def _turn(
        self,
        session_id: str,
        run_id: str,
        started: str,
        request: ChatRequest,
        cancel: CancelToken,
        flow: FlowHandle,
        budget: Budget,
    ) -> Iterator[ChatEvent]:
        intent: Intent | None = None

        def end(status: RunStatus, release: ReleaseOutcome, code: str, message: str) -> ErrorEvent:
            flow.outcome("error", f"The turn ended {status.value.lower()}")
            self.runs.finish(
                session_id,
                run_id,
                status=status,
                release=release,
                intent=intent,
                published_result=None,
                content=None,
                started=started,
                budget_usage=budget.usage(),
            )
            return ErrorEvent(session_id=session_id, run_id=run_id, code=code, message=message)

        yield StatusEvent(code=StatusCode.ROUTING)
        # A session this turn just opened has no earlier turn: neither history read is made for it.
        continuing = request.session_id is not None
        last = self.runs.last_turn(session_id, run_id) if continuing else None
        try:
            routing = self.router.route(request.query, last.intent if last else None, last.query if last else None)
        except RoutingUnavailable as exc:
            budget.model_calls += exc.attempts
            yield end(RunStatus.FAILED, ReleaseOutcome.FAILED, "ROUTING_UNAVAILABLE", "the request could not be routed")
            return
        intent = routing.intent
        budget.model_calls += routing.attempts
        budget.tokens += routing.tokens
        routing_step = flow.step("routing", "intent_router", f"Routed the turn to {intent.value}")
        if cancel.cancelled:
            yield end(RunStatus.CANCELLED, ReleaseOutcome.CANCELLED, "CANCELLED", "the run was cancelled")
            return
        yield StatusEvent(code=ROUTED[intent])
        previous = (
            previous_turn_from(self.runs.latest_safe_diagnosis(session_id))
            if intent is Intent.DIAGNOSIS and continuing
            else None
        )
        context = TurnContext(
            query=request.query,
            budget=budget,
            previous_turn=previous,
            cancelled=lambda: cancel.cancelled,
            run_id=run_id,
            flow=flow,
            routing_step=routing_step,
        )
        try:
            stages = self.executors[intent].execute(context)
            while True:
                try:
                    code = next(stages)
                except StopIteration as done:
                    execution = done.value
                    break
                yield StatusEvent(code=code)
                if cancel.cancelled:
                    stages.close()
                    yield end(RunStatus.CANCELLED, ReleaseOutcome.CANCELLED, "CANCELLED", "the run was cancelled")
                    return
        except RunCancelled:
            yield end(RunStatus.CANCELLED, ReleaseOutcome.CANCELLED, "CANCELLED", "the run was cancelled")
            return
        except ExecutionFailed as exc:
            yield end(RunStatus.FAILED, ReleaseOutcome.FAILED, exc.code, "no answer could be published")
            return
        if cancel.cancelled:
            yield end(RunStatus.CANCELLED, ReleaseOutcome.CANCELLED, "CANCELLED", "the run was cancelled")
            return
        if intent in EXECUTOR_STEPS:  # the diagnosis executor records its own steps
            kind, agent, summary = EXECUTOR_STEPS[intent]
            flow.step(kind, agent, summary, parents=[routing_step] if routing_step else None)
        flow.outcome(_outcome_type(intent, execution.release), f"Released with outcome {execution.release.value}")
        content = execution.content.model_dump() if execution.content else None
        finished = self.runs.finish(
            session_id,
            run_id,
            status=RunStatus.SUCCESS,
            release=execution.release,
            intent=intent,
            published_result=execution.published_result,
            content=content,
            started=started,
            budget_usage=budget.usage(),
        )
        if not finished:  # cancelled through the API while the executor worked: the late result is dropped
            yield ErrorEvent(session_id=session_id, run_id=run_id, code="CANCELLED", message="the run was cancelled")
            return
        if execution.content is not None:
            yield ContentEvent(content=execution.content)
        yield DoneEvent(
            session_id=session_id,
            run_id=run_id,
            status=RunStatus.SUCCESS,
            intent=intent,
            release_outcome=execution.release,
            model=self.model.name,
            offline_model=self.model.offline,
        )


def _outcome_type(intent: Intent, release: ReleaseOutcome) -> str:
    if release is ReleaseOutcome.FALLBACK:
        return "insufficient_evidence"
    return "no_action" if intent is Intent.SYSTEM_CHAT else "recommendation_delivered"
