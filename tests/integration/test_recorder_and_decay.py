"""The recorder SDK (in-process and async, fail-soft, off by flag) and the flow decay job."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from flowledger.config import load_settings
from flowledger.identity import Principal
from flowledger.jobs import run_job
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.reasoning.models import FlowStart
from flowledger.reasoning.recorder import (
    AsyncReasoningFlowRecorder,
    InProcessTransport,
    NoOpRecorder,
    ReasoningFlowRecorder,
    recorder_for,
)
from flowledger.reasoning.service import FlowService
from flowledger.services import Services, build_services

AGENT = Principal(kind="user", id="agent-researcher", scopes=frozenset({"reasoning.write"}))


def recorder(services: Services) -> ReasoningFlowRecorder:
    return ReasoningFlowRecorder(InProcessTransport(FlowService(services), AGENT))


def test_a_recorded_flow_is_complete_when_the_block_ends(services: Services) -> None:
    with recorder(services).flow("user_question", "chat/run-1", "Question about a lab trend", patient_id="p-1") as flow:
        first = flow.step("retrieval", "researcher", "Retrieved passages", confidence=0.95)
        flow.step("verdict", "critic", "Checked the claim", parents=[first], confidence=0.92)
        flow.outcome("recommendation_delivered", "Recommended a follow-up test", 0.93)
    assert flow.flow_id is not None
    stored = FlowService(services).admin_flow(Principal(kind="iam", id="arn:aws:iam::1:user/a"), flow.flow_id)
    assert stored.flow.flow_state == "completed" and stored.flow.step_count == 2
    assert stored.steps[1].parent_step_ids == [first]


def test_a_deferred_flow_sends_nothing_until_the_block_ends(services: Services) -> None:
    sent: list[str] = []

    class Watching(InProcessTransport):
        def start(self, body: dict[str, object]) -> str:
            sent.append("start")
            return super().start(body)

        def steps(self, flow_id: str, bodies: list[dict[str, object]]) -> None:
            sent.append("steps " + ",".join(str(body["step_kind"]) for body in bodies))
            super().steps(flow_id, bodies)

    rec = ReasoningFlowRecorder(Watching(FlowService(services), AGENT))
    with rec.flow("user_question", "chat/run-2", "Question", deferred=True) as flow:
        first = flow.step("retrieval", "researcher", "Retrieved passages")
        flow.step("verdict", "critic", "Checked the claim", parents=[first])
        flow.outcome("no_action", "Nothing to do")
        assert sent == [] and first is not None  # the caller answers its client before anything is written
    assert sent == ["start", "steps retrieval,verdict"]  # one batch: one transaction
    stored = FlowService(services).admin_flow(Principal(kind="iam", id="arn:aws:iam::1:user/a"), str(flow.flow_id))
    assert stored.flow.flow_state == "completed" and stored.steps[1].parent_step_ids == [first]


def test_a_deferred_flow_with_capture_off_sends_nothing(services: Services, clean_environment: None) -> None:
    rec = recorder_for(load_settings(), InProcessTransport(FlowService(services), AGENT))
    with rec.flow("user_question", "r", "Question", deferred=True) as flow:
        assert flow.step("retrieval", "researcher", "Retrieved passages") is None
    assert services.aws.dynamodb.scan(TableName=services.aws.table_name("flows"))["Count"] == 0


def test_an_agent_exception_propagates_and_aborts_the_flow(services: Services) -> None:
    with pytest.raises(ZeroDivisionError), recorder(services).flow("user_question", "r", "Question") as flow:
        flow.step("retrieval", "researcher", "Retrieved passages")
        _ = 1 / 0
    stored = FlowService(services).admin_flow(Principal(kind="iam", id="arn:aws:iam::1:user/a"), str(flow.flow_id))
    assert (stored.flow.flow_state, stored.flow.abort_reason) == ("aborted", "agent_error")


def test_a_failing_store_never_breaks_the_agent_and_is_logged_once(
    caplog: pytest.LogCaptureFixture, clean_environment: None
) -> None:
    # A store nobody listens on: every call fails fast with a connection error.
    broken = build_services(load_settings(aws_endpoint_url="http://127.0.0.1:9", ledger_shards=1), EMBEDDED_CREDENTIALS)
    rec = ReasoningFlowRecorder(InProcessTransport(FlowService(broken), AGENT))
    flow_ids = []
    with caplog.at_level(logging.WARNING, logger="flowledger.recorder"):
        for _ in range(2):
            with rec.flow("user_question", "r", "Question") as flow:
                flow.step("retrieval", "researcher", "Retrieved passages")  # queued: it cannot fail here
                flow.outcome("no_action", "Nothing to do")
            flow_ids.append(flow.flow_id)
            # Once the block is over the failure is known: later steps are no-ops.
            assert flow.step("verdict", "critic", "Too late") is None
    assert flow_ids == [None, None]
    assert len([r for r in caplog.records if r.name == "flowledger.recorder"]) == 1


def test_with_capture_off_the_recorder_sends_nothing(services: Services, clean_environment: None) -> None:
    rec = recorder_for(load_settings(), InProcessTransport(FlowService(services), AGENT))
    assert isinstance(rec, NoOpRecorder)
    with rec.flow("user_question", "r", "Question") as flow:
        assert flow.step("retrieval", "researcher", "Retrieved passages") is None
    assert services.aws.dynamodb.scan(TableName=services.aws.table_name("flows"))["Count"] == 0


@pytest.mark.anyio
async def test_the_async_recorder_records_the_same_flow(services: Services) -> None:
    rec = AsyncReasoningFlowRecorder(InProcessTransport(FlowService(services), AGENT))
    async with rec.flow("user_question", "r", "Question") as flow:
        await flow.step("retrieval", "researcher", "Retrieved passages", confidence=0.9)
        flow.outcome("claim_created", "Created a claim", 0.91)
    stored = FlowService(services).admin_flow(Principal(kind="iam", id="arn:aws:iam::1:user/a"), str(flow.flow_id))
    assert (stored.flow.flow_state, stored.flow.step_count) == ("completed", 1)


def test_decay_aborts_flows_active_over_24_hours_once(services: Services) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    services.clock = lambda: now - timedelta(hours=25)
    stale = FlowService(services).start_flow(
        AGENT, FlowStart(trigger_type="t", trigger_ref="r", trigger_summary="Old question")
    )
    services.clock = lambda: now - timedelta(hours=1)
    fresh = FlowService(services).start_flow(
        AGENT, FlowStart(trigger_type="t", trigger_ref="r", trigger_summary="New question")
    )
    services.clock = lambda: now
    assert run_job("flow_decay", services) == {"job": "flow_decay", "aborted": 1, "skipped": 0, "rows_failed": 0}
    assert run_job("flow_decay", services)["aborted"] == 0
    admin = Principal(kind="iam", id="arn:aws:iam::1:user/a")
    aborted = FlowService(services).admin_flow(admin, stale.flow_id).flow
    assert (aborted.flow_state, aborted.abort_reason, aborted.outcome and aborted.outcome.type) == (
        "aborted",
        "timeout",
        "timeout",
    )
    assert FlowService(services).admin_flow(admin, fresh.flow_id).flow.flow_state == "active"
    actors = [
        e.actor
        for c in services.ledger.chain_ids()
        for e in services.ledger.read_chain(c)
        if e.action == "reasoning.flow.aborted"
    ]
    assert actors == ["system:flow_decay"]
