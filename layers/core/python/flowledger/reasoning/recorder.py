"""``ReasoningFlowRecorder``: how an agent records its reasoning, without ever failing or waiting because of it.

    recorder = recorder_for(settings, HttpTransport(base_url, token))
    with recorder.flow("user_question", "chat/run-1", "Question about a lab trend") as flow:
        first = flow.step("retrieval", "researcher", "Retrieved three passages", confidence=0.9)
        flow.step("verdict", "critic", "Checked the claim", parents=[first])
        flow.outcome("recommendation_delivered", "Recommended a follow-up test", confidence=0.93)

Durable before close returns: ``flow.step`` only builds the step (its id is made here, so parents
work at once) and queues it; a sender thread of the flow opens the flow, sends the queued steps in
batches (``steps:batch``, one transaction each: all of a batch or none of it) and, when the block
exits, sends what is left and closes the flow. The ``with`` exit waits for that, so when it returns
every step is stored and audited, and a Lambda that returns after the block has lost nothing when
its runtime freezes. A batch whose answer is lost is sent once more: the route skips steps it
already holds, so the retry neither writes nor audits twice.

``flow(..., deferred=True)`` is the same queue without the thread, for a caller that answers its
client *inside* the block (the chat stream): nothing is sent until the block exits, then the exit
sends start, steps and close itself, after the answer. What is lost if the process dies inside the
block is the flow, never the answer.

The flow's id is chosen here, when the block is made (``fl_`` + ULID, sent as ``FlowStart.flow_id``),
so ``flow.flow_id`` names the flow from the first line, deferred or not: a caller can hand it to its
client before anything is written. It turns None once recording is known to have failed before the
flow was opened, and is None throughout when capture is off: never an id that will not exist.

Fail-soft: a transport error is logged once per recorder and turns the rest of that flow into
no-ops (later ``step`` calls return None; steps queued but unsent are dropped, and the flow is not
closed, so the decay job aborts it); the agent's own exceptions still propagate, and close the flow
as aborted. The async recorder is the same sender behind awaitable calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

from flowledger.config import Settings
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.reasoning.models import FlowClose, FlowStart, StepCreate
from flowledger.reasoning.printable import escape_controls

logger = logging.getLogger("flowledger.recorder")

# The batch route takes 49 steps (one transaction); its body must stay under the functions' default
# limit of 256 KB, with room for the envelope.
MAX_BATCH_STEPS = 49
MAX_BATCH_BYTES = 192 * 1024
CLOSE_TIMEOUT_SECONDS = 30.0


class Transport(Protocol):
    def start(self, body: dict[str, Any]) -> str: ...
    def steps(self, flow_id: str, bodies: list[dict[str, Any]]) -> None: ...
    def close(self, flow_id: str, body: dict[str, Any]) -> None: ...


class InProcessTransport:
    """Calls the flow service directly (agents running inside a Flowledger function)."""

    def __init__(self, service: Any, principal: Principal) -> None:
        self._service = service
        self._principal = principal

    def start(self, body: dict[str, Any]) -> str:
        return str(self._service.start_flow(self._principal, FlowStart(**body), source="agent").flow_id)

    def steps(self, flow_id: str, bodies: list[dict[str, Any]]) -> None:
        self._service.add_steps(self._principal, flow_id, [StepCreate(**body) for body in bodies])

    def close(self, flow_id: str, body: dict[str, Any]) -> None:
        self._service.close_flow(self._principal, flow_id, FlowClose(**body))


class HttpTransport:
    """Calls the reasoning routes with a bearer token that carries ``reasoning.write``.

    A batch of steps is sent a second time when its answer is lost (timeout, connection error) or
    is a 429 or 5xx: the route skips what the first attempt stored. Start and close are sent once.
    """

    def __init__(
        self, base_url: str, token: str, timeout_seconds: float = 5.0, retry_pause_seconds: float = 0.05
    ) -> None:
        import httpx

        self._httpx = httpx
        self._retry_pause = retry_pause_seconds
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), timeout=timeout_seconds, headers={"Authorization": f"Bearer {token}"}
        )

    def _send(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        # The API refuses a control character in any text of a body, and a whole batch with it; a tool's
        # output holds them (a log line in ANSI colours). Escaped here, on the sender's thread, never lost.
        response = self._client.request(method, path, json=escape_controls(body))
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def start(self, body: dict[str, Any]) -> str:
        return str(self._send("POST", "/api/reasoning/flows", body)["flow_id"])

    def steps(self, flow_id: str, bodies: list[dict[str, Any]]) -> None:
        path = f"/api/reasoning/flows/{flow_id}/steps:batch"
        try:
            self._send("POST", path, {"steps": bodies})
        except (self._httpx.TransportError, self._httpx.HTTPStatusError) as exc:
            if isinstance(exc, self._httpx.HTTPStatusError) and not _worth_retrying(exc.response.status_code):
                raise
            time.sleep(self._retry_pause)
            self._send("POST", path, {"steps": bodies})

    def close(self, flow_id: str, body: dict[str, Any]) -> None:
        self._send("PATCH", f"/api/reasoning/flows/{flow_id}", body)


def _worth_retrying(status: int) -> bool:
    return status == 429 or status >= 500


class _FailSoft:
    """A flow's recording state: the first failure is logged (once per recorder), and after it nothing is sent."""

    def __init__(self, recorder: ReasoningFlowRecorder | AsyncReasoningFlowRecorder) -> None:
        self._recorder = recorder
        self.broken = False

    def failed(self, action: str, exc: BaseException) -> None:
        self.broken = True
        with self._recorder.warn_lock:
            if self._recorder.warned:
                return
            self._recorder.warned = True
        logger.warning("reasoning flow recording failed and is off for this flow: %s (%s)", action, type(exc).__name__)


def _step_body(
    step_kind: str, agent: str, summary_text: str, parents: list[str] | None, extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "step_id": new_id("st_"),
        "step_kind": step_kind,
        "agent": agent,
        "summary_text": summary_text,
        "parent_step_ids": parents or [],
        **extra,
    }


def _close_body(outcome: dict[str, Any] | None, exc: BaseException | None) -> dict[str, Any]:
    if exc is not None:
        return {
            "state": "aborted",
            "reason": "agent_error",
            "outcome": {"type": "error", "summary": "The agent stopped with an error"},
        }
    return {"state": "completed", "outcome": outcome or {"type": "no_action", "summary": "Finished without an outcome"}}


class _Sender:
    """One flow's writes, in order: start, the queued steps in batches, then the close once asked for.

    ``put`` and ``finish`` are what the agent's thread calls (a lock and an append); ``run`` does
    the sending, on the flow's own thread or, deferred, in the caller's at the end.
    """

    def __init__(self, transport: Transport, start: dict[str, Any], soft: _FailSoft) -> None:
        self._transport = transport
        self._start = start
        self._soft = soft
        self._pending: deque[dict[str, Any]] = deque()
        self._wake = threading.Condition()
        self._close: dict[str, Any] | None = None
        self.started = threading.Event()  # set once start was answered (or failed)
        self.flow_id: str | None = None

    def put(self, body: dict[str, Any]) -> None:
        with self._wake:
            self._pending.append(body)
            self._wake.notify()

    def finish(self, close: dict[str, Any]) -> None:
        with self._wake:
            self._close = close
            self._wake.notify()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # fail-soft: a recording bug must not surface in the agent either
            self._soft.failed("send", exc)
        finally:
            self.started.set()

    @property
    def planned_flow_id(self) -> str | None:
        """The id the flow is opened with; None once the open failed."""
        if self.started.is_set():
            return self.flow_id
        return None if self._soft.broken else str(self._start["flow_id"])

    def _run(self) -> None:
        opened, flow_id = self._call("start", self._transport.start, self._start)
        self.flow_id = flow_id if opened else None
        self.started.set()
        if not opened:
            return
        while True:
            with self._wake:
                while not self._pending and self._close is None:
                    self._wake.wait()
                batch = _take_batch(self._pending)
                close = self._close if not self._pending else None
            if batch and not self._call("steps", self._transport.steps, flow_id, batch)[0]:
                return  # broken: the rest of the flow is dropped, and it is not closed
            if close is not None:
                self._call("close", self._transport.close, flow_id, close)
                return

    def _call(self, action: str, send: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        """(True, the answer), or (False, None) once this flow's recording has failed."""
        if self._soft.broken:
            return False, None
        try:
            return True, send(*args)
        except Exception as exc:  # fail-soft: recording must never break the agent
            self._soft.failed(action, exc)
            return False, None


def _take_batch(pending: deque[dict[str, Any]]) -> list[dict[str, Any]]:
    """The oldest queued steps that fit one batch (count and body size); at least one if any."""
    batch: list[dict[str, Any]] = []
    size = 0
    while pending and len(batch) < MAX_BATCH_STEPS:
        cost = len(json.dumps(pending[0], default=str)) + 1
        if batch and size + cost > MAX_BATCH_BYTES:
            break
        batch.append(pending.popleft())
        size += cost
    return batch


class FlowHandle:
    """One flow being recorded (synchronous): steps are queued here and sent by the flow's sender."""

    def __init__(self, recorder: ReasoningFlowRecorder, start: dict[str, Any], deferred: bool = False) -> None:
        self._soft = _FailSoft(recorder)
        self._sender = None if recorder.disabled else _Sender(recorder.transport, start, self._soft)
        self._deferred = deferred
        self._close_timeout = recorder.close_timeout_seconds
        self._outcome: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None

    @property
    def flow_id(self) -> str | None:
        """The flow's id: chosen up front, so a deferred flow names it before it is sent (a threaded one
        waits for its open inside the block); None when capture is off or the flow could not be opened."""
        if self._sender is None:
            return None
        if self._deferred:
            return self._sender.planned_flow_id
        self._sender.started.wait(self._close_timeout)
        return self._sender.flow_id

    def __enter__(self) -> FlowHandle:
        if self._sender is not None and not self._deferred:
            self._thread = threading.Thread(target=self._sender.run, name="flowledger-recorder", daemon=True)
            self._thread.start()
        return self

    def step(
        self, step_kind: str, agent: str, summary_text: str, *, parents: list[str] | None = None, **extra: Any
    ) -> str | None:
        """Queue a step; returns its id (for ``parents`` of later steps), or None when the flow records nothing."""
        if self._sender is None or self._soft.broken:
            return None
        body = _step_body(step_kind, agent, summary_text, parents, extra)
        self._sender.put(body)
        return str(body["step_id"])

    def outcome(self, type: str, summary: str, confidence: float | None = None) -> None:
        self._outcome = {"type": type, "summary": summary, "confidence": confidence}

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._sender is None:
            return
        self._sender.finish(_close_body(self._outcome, exc))
        if self._thread is None:
            self._sender.run()  # deferred: the caller's client has its answer; send everything now
            return
        self._thread.join(self._close_timeout)
        if self._thread.is_alive():
            self._soft.failed("close", TimeoutError(f"not durable after {self._close_timeout} s"))


class ReasoningFlowRecorder:
    disabled = False

    def __init__(self, transport: Transport, close_timeout_seconds: float = CLOSE_TIMEOUT_SECONDS) -> None:
        self.transport = transport
        self.close_timeout_seconds = close_timeout_seconds
        self.warned = False
        self.warn_lock = threading.Lock()

    def flow(
        self,
        trigger_type: str,
        trigger_ref: str,
        trigger_summary: str,
        *,
        trace_id: str | None = None,
        patient_id: str | None = None,
        deferred: bool = False,
    ) -> FlowHandle:
        """A flow to record in a ``with`` block; every step is stored and audited when the block exits."""
        return FlowHandle(self, _start_body(trigger_type, trigger_ref, trigger_summary, trace_id, patient_id), deferred)


def _start_body(
    trigger_type: str, trigger_ref: str, trigger_summary: str, trace_id: str | None, patient_id: str | None
) -> dict[str, Any]:
    return {
        "flow_id": new_id("fl_"),
        "trigger_type": trigger_type,
        "trigger_ref": trigger_ref,
        "trigger_summary": trigger_summary,
        "trace_id": trace_id,
        "patient_id": patient_id,
    }


class _NoTransport:
    """What a disabled recorder sends to: nothing."""

    def start(self, body: dict[str, Any]) -> str:
        raise RuntimeError("reasoning flow capture is disabled")

    def steps(self, flow_id: str, bodies: list[dict[str, Any]]) -> None:
        raise RuntimeError("reasoning flow capture is disabled")

    def close(self, flow_id: str, body: dict[str, Any]) -> None:
        raise RuntimeError("reasoning flow capture is disabled")


class NoOpRecorder(ReasoningFlowRecorder):
    """REASONING_FLOW_CAPTURE_ENABLED is off: same interface, nothing sent, nothing logged."""

    disabled = True

    def __init__(self) -> None:
        super().__init__(_NoTransport())
        self.warned = True  # never log: being off is not a failure


def recorder_for(settings: Settings, transport: Transport) -> ReasoningFlowRecorder:
    """The recorder the settings ask for: real when capture is enabled, a no-op otherwise."""
    return ReasoningFlowRecorder(transport) if settings.reasoning_flow_capture_enabled else NoOpRecorder()


# ---- async ---------------------------------------------------------------------------------------


class AsyncFlowHandle:
    """One flow being recorded from async code: the same sender thread; only the close is awaited."""

    def __init__(self, recorder: AsyncReasoningFlowRecorder, start: dict[str, Any]) -> None:
        self._soft = _FailSoft(recorder)
        self._sender = None if recorder.disabled else _Sender(recorder.transport, start, self._soft)
        self._close_timeout = recorder.close_timeout_seconds
        self._outcome: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None

    @property
    def flow_id(self) -> str | None:
        """The flow's id, chosen up front (never blocks the event loop); None when capture is off or the
        flow could not be opened."""
        return None if self._sender is None else self._sender.planned_flow_id

    async def __aenter__(self) -> AsyncFlowHandle:
        if self._sender is not None:
            self._thread = threading.Thread(target=self._sender.run, name="flowledger-recorder", daemon=True)
            self._thread.start()
        return self

    async def step(
        self, step_kind: str, agent: str, summary_text: str, *, parents: list[str] | None = None, **extra: Any
    ) -> str | None:
        """Queue a step; returns its id, or None when the flow records nothing."""
        if self._sender is None or self._soft.broken:
            return None
        body = _step_body(step_kind, agent, summary_text, parents, extra)
        self._sender.put(body)
        return str(body["step_id"])

    def outcome(self, type: str, summary: str, confidence: float | None = None) -> None:
        self._outcome = {"type": type, "summary": summary, "confidence": confidence}

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._sender is None or self._thread is None:
            return
        self._sender.finish(_close_body(self._outcome, exc))
        thread = self._thread
        await asyncio.to_thread(thread.join, self._close_timeout)
        if thread.is_alive():
            self._soft.failed("close", TimeoutError(f"not durable after {self._close_timeout} s"))


class AsyncReasoningFlowRecorder:
    """The async twin of :class:`ReasoningFlowRecorder` over the same transports and sender."""

    def __init__(
        self, transport: Transport, enabled: bool = True, close_timeout_seconds: float = CLOSE_TIMEOUT_SECONDS
    ) -> None:
        self.transport: Transport = transport if enabled else _NoTransport()
        self.disabled = not enabled
        self.close_timeout_seconds = close_timeout_seconds
        self.warned = not enabled
        self.warn_lock = threading.Lock()

    def flow(
        self,
        trigger_type: str,
        trigger_ref: str,
        trigger_summary: str,
        *,
        trace_id: str | None = None,
        patient_id: str | None = None,
    ) -> AsyncFlowHandle:
        """A flow to record in an ``async with`` block; every step is stored and audited when it exits."""
        return AsyncFlowHandle(self, _start_body(trigger_type, trigger_ref, trigger_summary, trace_id, patient_id))
