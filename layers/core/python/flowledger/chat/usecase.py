"""ChatApplicationUseCase: one persisted run per turn, routed to one fixed executor.

``run`` is a plain generator of typed events (start, status, content, done, error); the SSE and
JSON adapters both consume it, so streaming and standard responses cannot drift apart.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

from flowledger.chat.executors import (
    Budget,
    BudgetExhausted,
    Execution,
    ExecutionFailed,
    Executor,
    RunCancelled,
    TurnContext,
)
from flowledger.chat.models import (
    ChatEvent,
    ChatRequest,
    ContentEvent,
    DoneEvent,
    ErrorEvent,
    Intent,
    PublicContent,
    ReleaseOutcome,
    RunStatus,
    StartEvent,
    StatusCode,
    StatusEvent,
)
from flowledger.chat.previous_turn import previous_turn_from
from flowledger.chat.router import IntentRouter, RoutingUnavailable
from flowledger.chat.runs import RunStore
from flowledger.chat.step_fields import executor_fields, grounding_fields, routing_fields
from flowledger.continuity.grounding import ContinuityDisabled, ContinuityService, Grounding, Preflight
from flowledger.continuity.request import SourceRequest
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.llm.ports import ChatModel
from flowledger.reasoning.recorder import FlowHandle, NoOpRecorder, ReasoningFlowRecorder
from flowledger.subjects import subject_id_of

logger = logging.getLogger("flowledger.chat")
GROUNDED_INTENTS = frozenset({Intent.KNOWLEDGE_QUERY, Intent.DIAGNOSIS})
SOURCE_FIELDS = set(SourceRequest.model_fields)  # what a request may ask of continuity
_DEFAULT_SOURCES = SourceRequest().model_dump()
SOURCE_REVOKED_ANSWER = PublicContent(
    text="This answer was not published: a source it relied on stopped being available to you while it was prepared.",
    limitations="Ask again to get an answer from the sources you can read now.",
)
CANCELLED_MESSAGE = "the run was cancelled"
# How often a working turn looks at its stored run for the cancel route's word (one GetItem each time).
STORE_POLL_SECONDS = 1.0
ROUTED = {
    Intent.SYSTEM_CHAT: StatusCode.ROUTED_SYSTEM_CHAT,
    Intent.KNOWLEDGE_QUERY: StatusCode.ROUTED_KNOWLEDGE_QUERY,
    Intent.DIAGNOSIS: StatusCode.ROUTED_DIAGNOSIS,
}


@dataclass
class CancelToken:
    """Shared by the transport (client disconnect) and the run: once set, the run cannot succeed.

    ``watch`` adds the cancel route's word: the stored run is looked at, at most once per
    ``STORE_POLL_SECONDS``, wherever the run checks the token, so a run cancelled through the API stops
    at its next check instead of spending its budget on an answer that would be dropped.
    """

    _event: threading.Event = field(default_factory=threading.Event)
    _watcher: Callable[[], bool] | None = None
    _next_poll: float = 0.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def cancel(self) -> None:
        self._event.set()

    def watch(self, stored_cancelled: Callable[[], bool]) -> None:
        self._watcher = stored_cancelled
        self._next_poll = self.clock() + STORE_POLL_SECONDS

    @property
    def cancelled(self) -> bool:
        if self._event.is_set():
            return True
        if self._watcher is not None and self.clock() >= self._next_poll:
            self._next_poll = self.clock() + STORE_POLL_SECONDS
            with contextlib.suppress(Exception):  # the store unreachable: the turn's own checks decide
                if self._watcher():
                    self._event.set()
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
    # Conversation continuity (ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY); None: today's behaviour.
    continuity: ContinuityService | None = None

    def run(
        self, principal: Principal, request: ChatRequest, cancel: CancelToken, deadline: float | None = None
    ) -> Iterator[ChatEvent]:
        """Persist the turn's run, then return the generator of its events; recorded as a flow when enabled.

        The run is created before the first event, so a refusal (another user's session raises
        :class:`Forbidden`) reaches the caller as an error before any stream starts. The flow's
        summaries are fixed texts: nothing the user or the model wrote goes into them.
        """
        # Checked before the run is written: an unreadable document or a limit is a 4xx with nothing stored.
        preflight = self._preflight(principal, request)
        session_id = request.session_id or new_id("ses_")
        run_id = new_id("run_")
        # Deferred: nothing is written before the block exits, but the flow's id is fixed now, so the run,
        # the start event and the client all name it from the first moment.
        # A patient's turn is theirs: its flow names them (sealed under their key) and its session is found by
        # their subject, so erasing them erases both.
        flow = self.recorder.flow(
            "chat_turn",
            f"chat/{run_id}",
            "A chat turn was routed to one executor",
            trace_id=session_id,
            patient_id=principal.patient_id or None,
            deferred=True,
        )
        subject_id = subject_id_of(principal.patient_id) if principal.patient_id else None
        started = self.runs.create(
            session_id,
            run_id,
            principal.id,
            request.query,
            self.model.name,
            self.model.offline,
            flow_id=flow.flow_id,
            subject_id=subject_id,
        )
        cancel.watch(lambda: self.runs.is_cancelled(session_id, run_id))
        budget = self.budget()
        if deadline is not None:  # the caller's deadline (the Lambda's remaining time) may be the nearer one
            budget.deadline = deadline if budget.deadline is None else min(budget.deadline, deadline)
        turn = _TurnInput(principal, session_id, run_id, started, request, preflight, subject_id)
        return self._events(turn, flow, cancel, budget)

    def _preflight(self, principal: Principal, request: ChatRequest) -> Preflight | None:
        if self.continuity is None:
            if request.model_dump(include=SOURCE_FIELDS) != _DEFAULT_SOURCES:
                raise ContinuityDisabled(
                    "selection_mode, document_ids, action_mode and include_prior need conversation continuity, "
                    "which is switched off here (ENABLE_MIXED_SOURCE_CONVERSATION_CONTINUITY)"
                )
            return None
        return self.continuity.preflight(principal, request, request.session_id)

    def _events(self, turn: _TurnInput, flow: FlowHandle, cancel: CancelToken, budget: Budget) -> Iterator[ChatEvent]:
        """The turn's events; its last one (done or error) is held until the flow is written, so the
        flow id it carries names a flow that exists (None when recording failed: never a dangling id)."""
        planned = flow.flow_id
        yield StartEvent(session_id=turn.session_id, run_id=turn.run_id, flow_id=planned)
        ending: DoneEvent | ErrorEvent | None = None
        try:
            with flow:
                for event in self._recorded(turn, cancel, flow, budget):
                    if isinstance(event, DoneEvent | ErrorEvent):
                        ending = event
                    else:
                        yield event
        finally:  # also when the client went away mid-turn (the generator closed)
            if planned is not None and flow.flow_id is None:
                with contextlib.suppress(Exception):  # the run keeps a stale id; the flow route answers 404
                    self.runs.forget_flow(turn.session_id, turn.run_id)
        if ending is not None:
            yield ending.model_copy(update={"flow_id": flow.flow_id})

    def _recorded(self, turn: _TurnInput, cancel: CancelToken, flow: FlowHandle, budget: Budget) -> Iterator[ChatEvent]:
        session_id, run_id, started = turn.session_id, turn.run_id, turn.started
        try:
            yield from self._turn(turn, cancel, flow, budget)
        except Exception:
            # Whatever broke, the run still ends exactly once and the client hears about it.
            logger.exception("chat turn failed", extra={"run_id": run_id})
            finished = True
            with contextlib.suppress(Exception):
                finished = self.runs.finish(
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
            if not finished:  # cancelled through the API first: the stream tells the stored story
                yield ErrorEvent(session_id=session_id, run_id=run_id, code="CANCELLED", message=CANCELLED_MESSAGE)
                return
            yield ErrorEvent(session_id=session_id, run_id=run_id, code="internal_error", message="internal error")

    def _turn(self, turn: _TurnInput, cancel: CancelToken, flow: FlowHandle, budget: Budget) -> Iterator[ChatEvent]:
        session_id, run_id, started, request = turn.session_id, turn.run_id, turn.started, turn.request
        intent: Intent | None = None
        grounding: Grounding | None = None

        def end(
            status: RunStatus, release: ReleaseOutcome, code: str, message: str, reason: str | None = None
        ) -> ErrorEvent:
            flow.outcome("error", f"The turn ended {status.value.lower()}")
            finished = self.runs.finish(
                session_id,
                run_id,
                status=status,
                release=release,
                intent=intent,
                published_result=None,
                content=None,
                started=started,
                budget_usage=budget.usage(),
                grounding=grounding.record() if grounding else None,
                reason_code=reason,
                model_modes=model_modes(self.model),
                subject_id=turn.subject_id,
            )
            if not finished:  # the cancel route won the race: the run is CANCELLED, and its stream says so
                return ErrorEvent(session_id=session_id, run_id=run_id, code="CANCELLED", message=CANCELLED_MESSAGE)
            return ErrorEvent(session_id=session_id, run_id=run_id, code=code, message=message)

        yield StatusEvent(code=StatusCode.ROUTING)
        # A session this turn just opened has no earlier turn: neither history read is made for it.
        continuing = request.session_id is not None
        last = self.runs.last_turn(session_id, run_id) if continuing else None
        try:
            routing = self.router.route(
                request.query,
                last.intent if last else None,
                last.query if last else None,
                budget.remaining_seconds(),
                grounded=self.continuity is not None and asks_for_sources(request),
            )
        except RoutingUnavailable as exc:
            budget.model_calls += exc.attempts
            yield end(
                RunStatus.FAILED,
                ReleaseOutcome.FAILED,
                "ROUTING_UNAVAILABLE",
                "the request could not be routed",
                exc.reason,
            )
            return
        intent = routing.intent
        budget.model_calls += routing.attempts
        budget.tokens += routing.tokens
        routing_step = flow.step(
            "routing", "intent_router", f"Routed the turn to {intent.value}", **routing_fields(routing)
        )
        if cancel.cancelled:
            yield end(RunStatus.CANCELLED, ReleaseOutcome.CANCELLED, "CANCELLED", CANCELLED_MESSAGE)
            return
        yield StatusEvent(code=ROUTED[intent])
        previous = (
            previous_turn_from(self.runs.latest_safe_diagnosis(session_id))
            if intent is Intent.DIAGNOSIS and continuing
            else None
        )
        if self.continuity is not None and intent in GROUNDED_INTENTS:
            try:
                grounding_stages = self.continuity.ground(
                    turn.principal,
                    session_id,
                    continuing,
                    request,
                    request.query,
                    budget,
                    turn.preflight or Preflight(),
                    lambda: cancel.cancelled,
                )
                grounding = yield from _statuses(grounding_stages)
            except RunCancelled:
                yield end(RunStatus.CANCELLED, ReleaseOutcome.CANCELLED, "CANCELLED", CANCELLED_MESSAGE)
                return
            except BudgetExhausted as exc:
                yield end(RunStatus.FAILED, ReleaseOutcome.FAILED, exc.code, "the turn's budget is spent")
                return
            grounding_step = flow.step(
                "source_grounding",
                "continuity",
                grounding.summary(),
                parents=[routing_step] if routing_step else None,
                **grounding_fields(grounding),
            )
            routing_step = grounding_step or routing_step
        context = TurnContext(
            query=request.query,
            budget=budget,
            previous_turn=previous,
            cancelled=lambda: cancel.cancelled,
            run_id=run_id,
            flow=flow,
            routing_step=routing_step,
            grounding=grounding,
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
                    yield end(RunStatus.CANCELLED, ReleaseOutcome.CANCELLED, "CANCELLED", CANCELLED_MESSAGE)
                    return
        except RunCancelled:
            yield end(RunStatus.CANCELLED, ReleaseOutcome.CANCELLED, "CANCELLED", CANCELLED_MESSAGE)
            return
        except ExecutionFailed as exc:
            yield end(RunStatus.FAILED, ReleaseOutcome.FAILED, exc.code, "no answer could be published", exc.reason)
            return
        if cancel.cancelled:
            yield end(RunStatus.CANCELLED, ReleaseOutcome.CANCELLED, "CANCELLED", CANCELLED_MESSAGE)
            return
        if intent in EXECUTOR_STEPS:  # the diagnosis executor records its own steps
            kind, agent, summary = EXECUTOR_STEPS[intent]
            evidence = executor_fields(intent, request.query, execution)
            flow.step(kind, agent, summary, parents=[routing_step] if routing_step else None, **evidence)
        if grounding is not None and self.continuity is not None:
            published = self.continuity.publish(turn.principal, grounding, execution.content)
            if published is None and execution.content is not None:
                execution = Execution(SOURCE_REVOKED_ANSWER, ReleaseOutcome.FALLBACK)
            else:
                execution.content = published
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
            grounding=grounding.record() if grounding else None,
            reason_code=execution.reason,
            model_modes=model_modes(self.model),
            subject_id=turn.subject_id,
        )
        if finished and grounding is not None and self.continuity is not None:
            try:
                self.continuity.remember(turn.principal, session_id, run_id, grounding)
            except Exception:  # the answer stands; the next turn finds the previous refs (and says so)
                logger.exception("grounded refs not stored", extra={"run_id": run_id})
        if not finished:  # cancelled through the API while the executor worked: the late result is dropped
            yield ErrorEvent(session_id=session_id, run_id=run_id, code="CANCELLED", message=CANCELLED_MESSAGE)
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


def asks_for_sources(request: SourceRequest) -> bool:
    """The turn named what to read (a selection, all documents) or asked for the prior sources again."""
    return request.selection_mode in ("selected", "all") or request.include_prior


def model_modes(model: ChatModel) -> dict[str, str] | None:
    """How the model was asked for structured output and tools, when it is a real endpoint's."""
    modes = getattr(model, "modes", None)
    return dict(modes) if isinstance(modes, dict) else None


def _statuses(stages: Generator[StatusCode, None, Grounding]) -> Generator[StatusEvent, None, Grounding]:
    """The grounding's progress codes as status events; its grounding as the result."""
    while True:
        try:
            code = next(stages)
        except StopIteration as done:
            grounding: Grounding = done.value
            return grounding
        yield StatusEvent(code=code)


@dataclass(frozen=True)
class _TurnInput:
    principal: Principal
    session_id: str
    run_id: str
    started: str
    request: ChatRequest
    preflight: Preflight | None
    subject_id: str | None = None  # the patient whose turn it is: their words are sealed under their key


def _outcome_type(intent: Intent, release: ReleaseOutcome) -> str:
    if release is ReleaseOutcome.FALLBACK:
        return "insufficient_evidence"
    return "no_action" if intent is Intent.SYSTEM_CHAT else "recommendation_delivered"
