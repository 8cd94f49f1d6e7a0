"""How a research agent records its flow: chained steps with fixed summaries, and the model-call log.

Summaries name what a step did and how much (queries, documents, counts, codes), never the question,
the evidence or what the model wrote: they are fixed texts with numbers, so they pass the summary
guard and carry no PHI. Each model call logs one line (ids, sizes, timings) under a ref, and the
step that made it points back to that line (``back_refs.llm_call_log_ref``). The recorder is
fail-soft: a transport error turns the rest of the flow into no-ops and never fails the agent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flowledger.errors import FlowledgerError
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.llm.ports import ChatModel, JsonSchema, Message, Reply
from flowledger.llm.retry import RetryPolicy
from flowledger.reasoning.recorder import FlowHandle, InProcessTransport, ReasoningFlowRecorder, recorder_for
from flowledger.reasoning.step_evidence import model_call_outputs
from flowledger.services import Services

logger = logging.getLogger("flowledger.research.agents")
T = TypeVar("T")
AGENT_MAX_TOKENS = 1024  # a research agent's answer: claims with their passages, a verdict, a recommendation
# The identity research agents record their flows under (never a user: flows are not anyone's turn).
RESEARCH_RECORDER = Principal(kind="user", id="service:research", scopes=frozenset({"reasoning.write"}))


class AgentGaveUp(FlowledgerError):
    """An agent could not finish; ``reason`` is the code a backlog row is failed with."""

    code = "AGENT_GAVE_UP"

    def __init__(self, agent: str, reason: str) -> None:
        super().__init__(f"the {agent} gave up: {reason}")
        self.reason = reason


def research_recorder(services: Services) -> ReasoningFlowRecorder:
    """The recorder ``REASONING_FLOW_CAPTURE_ENABLED`` asks for, writing in process (a no-op when off)."""
    from flowledger.reasoning.service import FlowService  # the flow service pulls in the pathway library

    return recorder_for(services.settings, InProcessTransport(FlowService(services), RESEARCH_RECORDER))


@dataclass
class AgentRecording:
    """One agent run's flow: each step's parent is the step before it."""

    flow: FlowHandle
    run_id: str = field(default_factory=lambda: new_id("ra_"))
    last_step: str | None = None
    model_calls: int = 0
    # The last answered model call's token usage and finish reason: the outputs of the step that made it.
    last_model_call: dict[str, Any] = field(default_factory=dict)

    @property
    def flow_id(self) -> str | None:
        return self.flow.flow_id

    def step(self, kind: str, agent: str, summary: str, **extra: Any) -> None:
        parents = [self.last_step] if self.last_step else None
        step_id = self.flow.step(kind, agent, summary, parents=parents, **extra)
        if step_id:
            self.last_step = step_id

    def model_call(
        self,
        agent: str,
        model: ChatModel,
        policy: RetryPolicy,
        messages: list[Message],
        schema: JsonSchema,
        timeout: float,
    ) -> tuple[Reply, str, int]:
        """One structured model call under ``policy``: the reply, its log ref and its latency in ms.

        Every attempt logs a line under a new ref; the ref returned is the successful attempt's.
        """
        refs: list[str] = []

        def attempt() -> tuple[Reply, int]:
            self.model_calls += 1
            ref = f"{self.run_id}/model-{self.model_calls}"
            refs.append(ref)
            started = time.perf_counter()
            try:
                reply = model.complete(messages, schema=schema, timeout_seconds=timeout, max_tokens=AGENT_MAX_TOKENS)
            except Exception as exc:
                logger.info(f"{agent} model call failed", extra={"model_call_ref": ref, "error": type(exc).__name__})
                raise
            latency = int((time.perf_counter() - started) * 1000)
            logger.info(
                f"{agent} model call",
                extra={
                    "model_call_ref": ref,
                    "schema": schema.name,
                    "tokens": reply.usage.total,
                    "latency_ms": latency,
                },
            )
            return reply, latency

        (reply, latency), _ = policy.run(attempt)
        self.last_model_call = model_call_outputs(reply)
        return reply, refs[-1], latency


@contextmanager
def recorded(
    recorder: ReasoningFlowRecorder, trigger_type: str, trigger_ref: str, summary: str
) -> Iterator[AgentRecording]:
    """A flow around one agent run; an exception inside closes it aborted and propagates."""
    with recorder.flow(trigger_type, trigger_ref, summary) as flow:
        yield AgentRecording(flow)


def timed(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s result and how long it took in ms."""
    started = time.perf_counter()
    result = call()
    return result, int((time.perf_counter() - started) * 1000)
