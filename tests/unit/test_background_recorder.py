"""The recorder's sender: steps leave the agent's thread at once, go in ordered batches, and are all
sent before the block's exit returns; a failure is logged once and ends the flow's recording.

The transport is the boundary here (what the HTTP or in-process transport would be handed)."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from typing import Any

import pytest

from flowledger.reasoning.recorder import (
    MAX_BATCH_BYTES,
    MAX_BATCH_STEPS,
    AsyncReasoningFlowRecorder,
    NoOpRecorder,
    ReasoningFlowRecorder,
)

WAIT = 5.0  # how long a gated transport waits before it gives up: a hang fails the test, never blocks it


class Recording:
    """Accepts every call, keeping what it was sent; ``gate`` (when set) holds each steps call until opened."""

    def __init__(self, gate: threading.Event | None = None, fail_on: str | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.gate = gate
        self.fail_on = fail_on
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def _note(self, action: str, value: Any) -> None:
        self.threads.add(threading.current_thread().name)
        with self.lock:
            self.calls.append((action, value))
        if self.fail_on == action:
            raise ConnectionError("the store went away")

    def start(self, body: dict[str, Any]) -> str:
        self._note("start", body["trigger_ref"])
        return str(body["flow_id"])  # the service opens the flow under the id the recorder chose

    def steps(self, flow_id: str, bodies: list[dict[str, Any]]) -> None:
        if self.gate is not None and not self.gate.wait(WAIT):
            raise TimeoutError("the test never opened the gate")
        self._note("steps", [body["step_id"] for body in bodies])

    def close(self, flow_id: str, body: dict[str, Any]) -> None:
        self._note("close", body["state"])

    def sent_steps(self) -> list[str]:
        return [step for action, value in self.calls if action == "steps" for step in value]

    def actions(self) -> list[str]:
        return [action for action, _ in self.calls]


def test_a_step_returns_while_its_write_is_still_held_and_the_exit_waits_for_it() -> None:
    gate = threading.Event()
    transport = Recording(gate)
    with ReasoningFlowRecorder(transport).flow("user_question", "r", "Question") as flow:
        ids = [flow.step("retrieval", "researcher", f"Step {n}") for n in range(3)]
        # Every step call returned although no steps write has gone through: they are off the agent's path.
        assert transport.sent_steps() == []
        gate.set()
    # ...and the exit returned only once every step (then the close) was sent.
    assert transport.sent_steps() == ids
    assert transport.actions()[-1] == "close"
    assert threading.current_thread().name not in transport.threads


def test_steps_go_in_order_in_batches_no_bigger_than_the_route_takes() -> None:
    gate = threading.Event()
    transport = Recording(gate)
    with ReasoningFlowRecorder(transport).flow("user_question", "r", "Question") as flow:
        ids = [flow.step("retrieval", "researcher", f"Step {n}") for n in range(130)]
        big = [flow.step("retrieval", "researcher", "Big", inputs={"blob": "x" * 60_000}) for _ in range(5)]
        gate.set()
    batches = [value for action, value in transport.calls if action == "steps"]
    assert transport.sent_steps() == ids + big
    assert all(len(b) <= MAX_BATCH_STEPS for b in batches)
    assert len(batches) >= 4  # 130 small steps need three batches; five 60 KB steps need two (one may be shared)
    most_big = MAX_BATCH_BYTES // 60_000  # what the byte budget lets through: 3
    assert max(sum(s in big for s in b) for b in batches) == most_big


def test_the_close_follows_the_last_step_and_says_completed() -> None:
    transport = Recording()
    with ReasoningFlowRecorder(transport).flow("user_question", "r", "Question") as flow:
        flow.step("retrieval", "researcher", "Step")
        flow.outcome("no_action", "Nothing to do")
    assert transport.actions() == ["start", "steps", "close"]
    assert transport.calls[-1] == ("close", "completed")
    assert re.fullmatch(r"fl_[0-9A-Z]{26}", str(flow.flow_id))


def test_an_agent_exception_propagates_after_its_steps_are_sent_and_closes_the_flow_aborted() -> None:
    transport = Recording()
    with pytest.raises(ZeroDivisionError), ReasoningFlowRecorder(transport).flow("t", "r", "Question") as flow:
        step_id = flow.step("retrieval", "researcher", "Step")
        _ = 1 / 0
    assert transport.sent_steps() == [step_id]
    assert transport.calls[-1] == ("close", "aborted")


@pytest.mark.parametrize("failing", ["start", "steps"])
def test_a_failing_transport_is_logged_once_and_the_flow_is_neither_finished_nor_raised(
    failing: str, caplog: pytest.LogCaptureFixture
) -> None:
    transport = Recording(fail_on=failing)
    recorder = ReasoningFlowRecorder(transport)
    with caplog.at_level(logging.WARNING, logger="flowledger.recorder"):
        for _ in range(2):
            with recorder.flow("t", "r", "Question") as flow:
                flow.step("retrieval", "researcher", "Step")
            assert flow.step("verdict", "critic", "After the failure") is None
    assert "close" not in transport.actions()
    assert len([r for r in caplog.records if r.name == "flowledger.recorder"]) == 1


def test_a_deferred_flow_sends_nothing_inside_the_block_then_everything_from_the_exit() -> None:
    transport = Recording()
    with ReasoningFlowRecorder(transport).flow("t", "r", "Question", deferred=True) as flow:
        ids = [flow.step("retrieval", "researcher", f"Step {n}") for n in range(60)]
        planned = flow.flow_id  # named before anything is sent: a chat turn hands it to its client at once
        assert transport.calls == [] and re.fullmatch(r"fl_[0-9A-Z]{26}", str(planned))
    assert transport.sent_steps() == ids and transport.actions()[-1] == "close"
    assert flow.flow_id == planned
    assert transport.threads == {threading.current_thread().name}  # the exit sent it, no thread was made


def test_a_deferred_flow_whose_open_fails_names_no_flow_after_the_exit() -> None:
    with ReasoningFlowRecorder(Recording(fail_on="start")).flow("t", "r", "Question", deferred=True) as flow:
        flow.step("retrieval", "researcher", "Step")
    assert flow.flow_id is None  # the chosen id was never written: it is not handed out as if it were


def test_a_transport_that_never_answers_cannot_hold_the_exit_past_its_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = threading.Event()  # never opened before the exit gives up
    transport = Recording(gate)
    with caplog.at_level(logging.WARNING, logger="flowledger.recorder"):
        with ReasoningFlowRecorder(transport, close_timeout_seconds=0.05).flow("t", "r", "Question") as flow:
            flow.step("retrieval", "researcher", "Step")
        assert [r.getMessage() for r in caplog.records if r.name == "flowledger.recorder"]
    gate.set()


def test_the_no_op_recorder_queues_nothing() -> None:
    with NoOpRecorder().flow("t", "r", "Question") as flow:
        assert flow.step("retrieval", "researcher", "Step") is None
    assert flow.flow_id is None


def test_the_async_recorder_queues_its_steps_and_awaits_only_the_close() -> None:
    gate = threading.Event()
    transport = Recording(gate)

    async def agent() -> list[str | None]:
        async with AsyncReasoningFlowRecorder(transport).flow("t", "r", "Question") as flow:
            ids = [await flow.step("retrieval", "researcher", f"Step {n}") for n in range(3)]
            assert transport.sent_steps() == []
            gate.set()
        return ids

    ids = asyncio.run(agent())
    assert transport.sent_steps() == ids and transport.actions()[-1] == "close"
