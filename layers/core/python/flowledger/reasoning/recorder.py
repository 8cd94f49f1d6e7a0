"""``ReasoningFlowRecorder``: how an agent records its reasoning, without ever failing because of it.

    recorder = recorder_for(settings, HttpTransport(base_url, token))
    with recorder.flow("user_question", "chat/run-1", "Question about a lab trend") as flow:
        first = flow.step("retrieval", "researcher", "Retrieved three passages", confidence=0.9)
        flow.step("verdict", "critic", "Checked the claim", parents=[first])
        flow.outcome("recommendation_delivered", "Recommended a follow-up test", confidence=0.93)

Every call is sent before it returns (nothing is buffered), so a Lambda that returns after the
``with`` block has lost nothing when its runtime freezes. ``flow(..., deferred=True)`` is the one
exception, for a caller that answers its client *inside* the block (the chat stream): start, steps
and close are all sent when the block exits, after the answer, so recording adds nothing to the
time the client waits. Step ids are made here, so parents work the same; what is lost if the process
dies inside the block is the flow, never the answer. A transport error is logged once per
recorder and turns the rest of that flow into no-ops; the agent's own exceptions still propagate,
and close the flow as aborted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

from flowledger.config import Settings
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.reasoning.models import FlowClose, FlowStart, StepCreate

logger = logging.getLogger("flowledger.recorder")


class Transport(Protocol):
    def start(self, body: dict[str, Any]) -> str: ...
    def step(self, flow_id: str, body: dict[str, Any]) -> None: ...
    def close(self, flow_id: str, body: dict[str, Any]) -> None: ...


class InProcessTransport:
    """Calls the flow service directly (agents running inside a Flowledger function)."""

    def __init__(self, service: Any, principal: Principal) -> None:
        self._service = service
        self._principal = principal

    def start(self, body: dict[str, Any]) -> str:
        return str(self._service.start_flow(self._principal, FlowStart(**body)).flow_id)

    def step(self, flow_id: str, body: dict[str, Any]) -> None:
        self._service.add_step(self._principal, flow_id, StepCreate(**body))

    def close(self, flow_id: str, body: dict[str, Any]) -> None:
        self._service.close_flow(self._principal, flow_id, FlowClose(**body))


class HttpTransport:
    """Calls the reasoning routes with a bearer token that carries ``reasoning.write``."""

    def __init__(self, base_url: str, token: str, timeout_seconds: float = 5.0) -> None:
        import httpx

        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), timeout=timeout_seconds, headers={"Authorization": f"Bearer {token}"}
        )

    def _send(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._client.request(method, path, json=body)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def start(self, body: dict[str, Any]) -> str:
        return str(self._send("POST", "/api/reasoning/flows", body)["flow_id"])

    def step(self, flow_id: str, body: dict[str, Any]) -> None:
        self._send("POST", f"/api/reasoning/flows/{flow_id}/steps", body)

    def close(self, flow_id: str, body: dict[str, Any]) -> None:
        self._send("PATCH", f"/api/reasoning/flows/{flow_id}", body)


class _FailSoft:
    """Runs transport calls; the first failure is logged, and after it the flow records nothing."""

    def __init__(self, recorder: ReasoningFlowRecorder | AsyncReasoningFlowRecorder) -> None:
        self._recorder = recorder
        self.broken = False

    def failed(self, action: str, exc: Exception) -> None:
        self.broken = True
        if not self._recorder.warned:
            self._recorder.warned = True
            logger.warning(
                "reasoning flow recording failed and is off for this flow: %s (%s)", action, type(exc).__name__
            )


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


class FlowHandle:
    """One flow being recorded (synchronous)."""

    def __init__(self, recorder: ReasoningFlowRecorder, start: dict[str, Any], deferred: bool = False) -> None:
        self._transport = recorder.transport
        self._start = start
        self._soft = _FailSoft(recorder)
        self._outcome: dict[str, Any] | None = None
        self._deferred: list[dict[str, Any]] | None = [] if deferred and not recorder.disabled else None
        self.flow_id: str | None = None

    def _call(self, action: str, send: Callable[[], Any]) -> Any:
        if self._soft.broken:
            return None
        try:
            return send()
        except Exception as exc:  # fail-soft: recording must never break the agent
            self._soft.failed(action, exc)
            return None

    def __enter__(self) -> FlowHandle:
        if self._deferred is None:
            self.flow_id = self._call("start", lambda: self._transport.start(self._start))
        return self

    def step(
        self, step_kind: str, agent: str, summary_text: str, *, parents: list[str] | None = None, **extra: Any
    ) -> str | None:
        """Record a step; returns its id (for ``parents`` of later steps), or None when not recorded."""
        if self._deferred is not None:
            body = _step_body(step_kind, agent, summary_text, parents, extra)
            self._deferred.append(body)
            return str(body["step_id"])
        if self.flow_id is None:
            return None
        body = _step_body(step_kind, agent, summary_text, parents, extra)
        flow_id = self.flow_id
        self._call("step", lambda: self._transport.step(flow_id, body))
        return None if self._soft.broken else str(body["step_id"])

    def outcome(self, type: str, summary: str, confidence: float | None = None) -> None:
        self._outcome = {"type": type, "summary": summary, "confidence": confidence}

    def _send_deferred(self, flow_id: str, bodies: list[dict[str, Any]]) -> None:
        for body in bodies:
            self._call("step", lambda body=body: self._transport.step(flow_id, body))  # type: ignore[misc]

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._deferred is not None:
            self.flow_id = self._call("start", lambda: self._transport.start(self._start))
            if self.flow_id is not None:
                self._send_deferred(self.flow_id, self._deferred)
        if self.flow_id is not None:
            flow_id, body = self.flow_id, _close_body(self._outcome, exc)
            self._call("close", lambda: self._transport.close(flow_id, body))


class ReasoningFlowRecorder:
    disabled = False

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.warned = False

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
        return FlowHandle(
            self,
            {
                "trigger_type": trigger_type,
                "trigger_ref": trigger_ref,
                "trigger_summary": trigger_summary,
                "trace_id": trace_id,
                "patient_id": patient_id,
            },
            deferred,
        )


class _NoTransport:
    """What a disabled recorder sends to: nothing."""

    def start(self, body: dict[str, Any]) -> str:
        raise RuntimeError("reasoning flow capture is disabled")

    def step(self, flow_id: str, body: dict[str, Any]) -> None:
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
    """One flow being recorded from async code; each call is awaited before it returns."""

    def __init__(self, recorder: AsyncReasoningFlowRecorder, start: dict[str, Any]) -> None:
        self._transport = recorder.transport
        self._start = start
        self._soft = _FailSoft(recorder)
        self._outcome: dict[str, Any] | None = None
        self.flow_id: str | None = None

    async def _call(self, action: str, send: Callable[[], Any]) -> Any:
        if self._soft.broken:
            return None
        try:
            return await asyncio.to_thread(send)
        except Exception as exc:  # fail-soft
            self._soft.failed(action, exc)
            return None

    async def __aenter__(self) -> AsyncFlowHandle:
        self.flow_id = await self._call("start", lambda: self._transport.start(self._start))
        return self

    async def step(
        self, step_kind: str, agent: str, summary_text: str, *, parents: list[str] | None = None, **extra: Any
    ) -> str | None:
        if self.flow_id is None:
            return None
        body = _step_body(step_kind, agent, summary_text, parents, extra)
        flow_id = self.flow_id
        await self._call("step", lambda: self._transport.step(flow_id, body))
        return None if self._soft.broken else str(body["step_id"])

    def outcome(self, type: str, summary: str, confidence: float | None = None) -> None:
        self._outcome = {"type": type, "summary": summary, "confidence": confidence}

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.flow_id is not None:
            flow_id, body = self.flow_id, _close_body(self._outcome, exc)
            await self._call("close", lambda: self._transport.close(flow_id, body))


class AsyncReasoningFlowRecorder:
    """The async twin of :class:`ReasoningFlowRecorder` over the same transports (run in a thread)."""

    def __init__(self, transport: Transport, enabled: bool = True) -> None:
        self.transport: Transport = transport if enabled else _NoTransport()
        self.warned = not enabled

    def flow(
        self,
        trigger_type: str,
        trigger_ref: str,
        trigger_summary: str,
        *,
        trace_id: str | None = None,
        patient_id: str | None = None,
    ) -> AsyncFlowHandle:
        return AsyncFlowHandle(
            self,
            {
                "trigger_type": trigger_type,
                "trigger_ref": trigger_ref,
                "trigger_summary": trigger_summary,
                "trace_id": trace_id,
                "patient_id": patient_id,
            },
        )
