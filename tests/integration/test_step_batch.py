"""The step batch route and ``FlowService.add_steps`` on moto: all or nothing, one audit event per step,
retries that never write twice, and the recorder's steps durable when its block ends."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from flowledger.config import load_settings
from flowledger.errors import Conflict, PayloadTooLarge
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.ledger.audit import checkpoints_of, verify_ledger
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.reasoning.models import MAX_STEPS_PER_FLOW, StepCreate
from flowledger.reasoning.recorder import InProcessTransport, ReasoningFlowRecorder
from flowledger.reasoning.service import MAX_STEPS_PER_BATCH, FlowService
from flowledger.services import Services, build_services
from flowledger.store.provision import provision_all

WRITER = {"sub": "agent-researcher", "scope": "reasoning.write", "patient_id": ""}
OTHER_WRITER = {"sub": "agent-critic", "scope": "reasoning.write", "patient_id": ""}
READER = {"sub": "u-ann", "scope": "reasoning.read", "patient_id": "p-ann"}
AGENT = Principal(kind="user", id="agent-researcher", scopes=frozenset({"reasoning.write"}))
ADMIN = Principal(kind="iam", id="arn:aws:iam::1:user/a")

Call = Callable[..., tuple[int, Any]]


@pytest.fixture
def call(services: Services, load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any) -> Call:
    handler = load_function("reasoning").handler

    def invoke(method: str, path: str, body: Any = None, who: dict[str, str] | None = WRITER) -> tuple[int, Any]:
        response = handler(rest_event(method, path, body=body, authorizer=who), lambda_context)
        return response["statusCode"], json.loads(response["body"])

    return invoke


def open_flow(call: Call) -> str:
    status, body = call(
        "POST",
        "/api/reasoning/flows",
        {"trigger_type": "user_question", "trigger_ref": "chat/run-1", "trigger_summary": "Question about a lab"},
    )
    assert status == 201, body
    return str(body["flow_id"])


def step(kind: str = "retrieval", parents: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "step_id": new_id("st_"),
        "step_kind": kind,
        "agent": "researcher",
        "summary_text": f"Did the {kind}",
        "parent_step_ids": parents or [],
        **extra,
    }


def batch(call: Call, flow_id: str, steps: list[dict[str, Any]], who: dict[str, str] = WRITER) -> tuple[int, Any]:
    return call("POST", f"/api/reasoning/flows/{flow_id}/steps:batch", {"steps": steps}, who)


def stored_steps(services: Services, flow_id: str) -> list[dict[str, Any]]:
    return [s.model_dump() for s in FlowService(services).admin_flow(ADMIN, flow_id).steps]


def step_events(services: Services) -> list[Any]:
    ledger = services.ledger
    return [e for c in ledger.chain_ids() for e in ledger.read_chain(c) if e.action == "reasoning.step.created"]


def test_a_batch_stores_its_steps_in_order_each_with_its_own_audit_event(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    first = step("retrieval")
    second = step("llm_prompt", parents=[first["step_id"]], pii_fields={"inputs": ["q"]}, inputs={"q": "secret"})
    third = step("verdict", parents=[first["step_id"], second["step_id"]], confidence=0.9)
    status, result = batch(call, flow_id, [first, second, third])
    assert status == 201, result
    ids = [first["step_id"], second["step_id"], third["step_id"]]
    assert result == {"flow_id": flow_id, "recorded": ids, "already_recorded": []}
    stored = stored_steps(services, flow_id)
    assert [s["step_id"] for s in stored] == ids  # the batch's order is the stored order
    assert stored[1]["inputs"] == {"q": "secret"} and stored[2]["parent_step_ids"] == ids[:2]
    events = step_events(services)
    assert sorted(e.refs["step_id"] for e in events) == sorted(ids)
    by_step = {e.refs["step_id"]: e for e in events}
    assert by_step[ids[1]].payload == {"step_kind": "llm_prompt", "agent": "researcher", "parents": 1, "pii_fields": 1}
    assert {e.subject for e in events} == {f"flow:{flow_id}"}
    assert FlowService(services).admin_flow(ADMIN, flow_id).flow.step_count == 3
    # The events take consecutive, hash-linked positions like any other: the ledger still verifies.
    assert verify_ledger(services.ledger, checkpoints_of(services)).ok


def test_a_single_step_and_a_batch_step_are_audited_alike(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    single = step("retrieval", confidence=0.5)
    assert call("POST", f"/api/reasoning/flows/{flow_id}/steps", single)[0] == 201
    batched = step("retrieval", confidence=0.5)
    assert batch(call, flow_id, [batched])[0] == 201
    events = {e.refs["step_id"]: e for e in step_events(services)}
    one, other = events[single["step_id"]], events[batched["step_id"]]
    assert (one.payload, one.actor, one.subject) == (other.payload, other.actor, other.subject)


@pytest.mark.parametrize(
    ("bad", "status", "message"),
    [
        (lambda ids: step(parents=[new_id("st_")]), 422, "unknown parent"),
        (lambda ids: step(parents=[ids[2]]), 422, "comes later in the batch"),
        (lambda ids: {**step(), "step_id": ids[0]}, 422, "appears twice"),
        (lambda ids: step(inputs={"blob": "x" * 70_000}), 413, "exceed 64 KB"),
        (lambda ids: {**step(), "step_kind": "Not A Name"}, 422, ""),
    ],
    ids=["unknown-parent", "later-parent", "duplicate-id", "payload", "invalid"],
)
def test_a_bad_step_in_the_middle_writes_nothing_and_audits_nothing(
    call: Call, services: Services, bad: Callable[[list[str]], dict[str, Any]], status: int, message: str
) -> None:
    flow_id = open_flow(call)
    first, last = step(), step()
    middle = bad([first["step_id"], "", last["step_id"]])
    answered, body = batch(call, flow_id, [first, middle, last])
    assert answered == status, body
    assert message in body["message"]
    assert stored_steps(services, flow_id) == [] and step_events(services) == []
    assert FlowService(services).admin_flow(ADMIN, flow_id).flow.step_count == 0


def test_a_step_cannot_be_its_own_parent_in_a_batch(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    looping = step()
    looping["parent_step_ids"] = [looping["step_id"]]
    status, body = batch(call, flow_id, [step(), looping])
    assert (status, "own parent" in body["message"]) == (422, True)
    assert stored_steps(services, flow_id) == []


def test_a_retried_batch_writes_and_audits_nothing_twice(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    steps = [step(), step("verdict")]
    assert batch(call, flow_id, steps)[0] == 201
    # The answer was lost: the client sends the same batch again.
    status, again = batch(call, flow_id, steps)
    assert status == 200
    assert again == {"flow_id": flow_id, "recorded": [], "already_recorded": [s["step_id"] for s in steps]}
    assert len(stored_steps(services, flow_id)) == 2 and len(step_events(services)) == 2
    assert FlowService(services).admin_flow(ADMIN, flow_id).flow.step_count == 2


def test_a_retry_that_grew_records_only_the_new_steps(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    steps = [step(), step("verdict")]
    assert batch(call, flow_id, steps)[0] == 201
    later = step("summary", parents=[steps[1]["step_id"]])
    status, result = batch(call, flow_id, [*steps, later])
    assert (status, result["recorded"], result["already_recorded"]) == (
        201,
        [later["step_id"]],
        [s["step_id"] for s in steps],
    )
    assert len(step_events(services)) == 3
    assert FlowService(services).admin_flow(ADMIN, flow_id).flow.step_count == 3


def test_a_step_id_recorded_with_other_content_is_409_naming_it(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    recorded = step()
    assert batch(call, flow_id, [recorded])[0] == 201
    changed = {**recorded, "summary_text": "Something else"}
    status, body = batch(call, flow_id, [step(), changed])
    assert status == 409 and recorded["step_id"] in body["message"]
    assert len(stored_steps(services, flow_id)) == 1 and len(step_events(services)) == 1


def test_only_the_writer_that_opened_the_flow_adds_a_batch(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    steps = [step()]
    assert batch(call, flow_id, steps, OTHER_WRITER)[0] == 403
    assert stored_steps(services, flow_id) == []
    assert batch(call, flow_id, steps)[0] == 201
    # Nor may another writer learn anything by "retrying" a recorded batch.
    assert batch(call, flow_id, steps, OTHER_WRITER)[0] == 403


def test_a_closed_flow_refuses_a_batch(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    closing = {"state": "completed", "outcome": {"type": "no_action", "summary": "Nothing to do"}}
    assert call("PATCH", f"/api/reasoning/flows/{flow_id}", closing)[0] == 200
    status, body = batch(call, flow_id, [step()])
    assert status == 409 and "completed" in body["message"]
    assert step_events(services) == []


def test_an_unknown_flow_is_404(call: Call) -> None:
    assert batch(call, new_id("fl_"), [step()])[0] == 404


def test_a_batch_holds_up_to_49_steps_and_more_is_413_naming_the_limit(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    assert MAX_STEPS_PER_BATCH == 49  # 1 flow guard + 49 x (step + audit event) = 99 of 100 items
    status, body = batch(call, flow_id, [step() for _ in range(MAX_STEPS_PER_BATCH + 1)])
    assert status == 413 and "at most 49 steps" in body["message"]
    assert stored_steps(services, flow_id) == []
    status, body = batch(call, flow_id, [step() for _ in range(MAX_STEPS_PER_BATCH)])
    assert status == 201 and len(body["recorded"]) == 49
    assert len(step_events(services)) == 49


def test_a_batch_that_would_pass_the_flows_step_limit_writes_nothing(services: Services) -> None:
    service = FlowService(services)
    flow_id = open_flow_in(service)
    service.add_steps(AGENT, flow_id, [StepCreate(**step()) for _ in range(5)])
    # The flow as if it held all but ten of its steps (writing 19,990 steps would take minutes).
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("flows"),
        Key={"flow_id": {"S": flow_id}},
        UpdateExpression="SET step_count = :n",
        ExpressionAttributeValues={":n": {"N": str(MAX_STEPS_PER_FLOW - 10)}},
    )
    with pytest.raises(Conflict, match=f"11 more would pass the limit of {MAX_STEPS_PER_FLOW}"):
        service.add_steps(AGENT, flow_id, [StepCreate(**step()) for _ in range(11)])
    assert len(step_events(services)) == 5
    service.add_steps(AGENT, flow_id, [StepCreate(**step()) for _ in range(10)])
    assert service.admin_flow(ADMIN, flow_id).flow.step_count == MAX_STEPS_PER_FLOW


def test_the_scope_is_checked_before_the_body_is_validated(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    assert call("POST", f"/api/reasoning/flows/{flow_id}/steps:batch", {"steps": "not a list"}, READER)[0] == 403
    assert call("POST", f"/api/reasoning/flows/{flow_id}/steps:batch", {"steps": "not a list"})[0] == 422
    assert batch(call, flow_id, [step()], READER)[0] == 403


def test_each_batched_step_emits_the_step_metric(call: Call, capsys: pytest.CaptureFixture[str]) -> None:
    flow_id = open_flow(call)
    capsys.readouterr()
    assert batch(call, flow_id, [step("retrieval"), step("verdict"), step("retrieval")])[0] == 201
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    writes = {
        r["step_kind"]: r["reasoning.step.writes"]
        for r in records
        for m in r["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        if m["Name"] == "reasoning.step.writes"
    }
    assert writes == {"retrieval": [2.0], "verdict": [1.0]}  # a count per kind and agent: every step counted


def open_flow_in(service: FlowService) -> str:
    from flowledger.reasoning.models import FlowStart

    started = service.start_flow(AGENT, FlowStart(trigger_type="t", trigger_ref="r", trigger_summary="Question"))
    return started.flow_id


def test_the_recorders_steps_are_all_stored_and_audited_when_its_block_ends(services: Services) -> None:
    recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(services), AGENT))
    with recorder.flow("user_question", "chat/run-1", "Question about a lab trend") as flow:
        previous = None
        ids = []
        for n in range(120):  # more than two batches' worth
            previous = flow.step("retrieval", "researcher", f"Step {n}", parents=[previous] if previous else None)
            ids.append(previous)
        flow.outcome("no_action", "Nothing to do")
    # Right after the block: nothing is still in flight.
    stored = FlowService(services).admin_flow(ADMIN, str(flow.flow_id))
    assert [s.step_id for s in stored.steps] == ids
    assert (stored.flow.flow_state, stored.flow.step_count) == ("completed", 120)
    assert len(step_events(services)) == 120


# ---- concurrency on the locked moto server (in-process moto transactions are not atomic across threads) ----


@pytest.fixture
def locked_services(locked_moto: str, clean_environment: None) -> Callable[[], Services]:
    settings = load_settings(aws_endpoint_url=locked_moto, resource_prefix=new_id("sb").lower()[:12])
    setup = build_services(settings, EMBEDDED_CREDENTIALS)
    provision_all(setup.aws, settings)
    return lambda: build_services(settings, EMBEDDED_CREDENTIALS)  # each its own client and head cache


def test_two_concurrent_retries_of_one_batch_write_it_once(locked_services: Callable[[], Services]) -> None:
    setup = locked_services()
    flow_id = open_flow_in(FlowService(setup))
    bodies = [StepCreate(**step()) for _ in range(10)]
    start = threading.Barrier(2)

    def send(_: int) -> list[str]:
        service = FlowService(locked_services())
        start.wait()
        result = service.add_steps(AGENT, flow_id, bodies)
        return result.recorded

    with ThreadPoolExecutor(2) as pool:
        recorded = list(pool.map(send, range(2)))
    # Both succeed; between them every step was written exactly once.
    assert sorted(s for r in recorded for s in r) == sorted(b.step_id or "" for b in bodies)
    assert FlowService(setup).admin_flow(ADMIN, flow_id).flow.step_count == 10
    assert len(step_events(setup)) == 10


def test_threads_recording_distinct_flows_each_get_every_step(locked_services: Callable[[], Services]) -> None:
    setup = locked_services()
    recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(setup), AGENT))  # one recorder, shared
    start = threading.Barrier(4)

    def agent(number: int) -> tuple[str | None, list[str | None]]:
        start.wait()
        with recorder.flow("user_question", f"chat/run-{number}", "Question") as flow:
            ids = [flow.step("retrieval", "researcher", f"Step {n} of agent {number}") for n in range(30)]
        return flow.flow_id, ids

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(agent, range(4)))
    assert len({flow_id for flow_id, _ in results}) == 4
    for flow_id, ids in results:
        stored = FlowService(setup).admin_flow(ADMIN, str(flow_id))
        assert [s.step_id for s in stored.steps] == ids and stored.flow.flow_state == "completed"
    assert len(step_events(setup)) == 120


def test_a_batch_whose_payloads_would_not_fit_one_transaction_is_413(services: Services) -> None:
    # In process there is no request body limit in front: the service itself keeps under DynamoDB's 4 MB.
    service = FlowService(services)
    flow_id = open_flow_in(service)
    heavy = [StepCreate(**step(inputs={"blob": "x" * 60_000})) for _ in range(40)]
    with pytest.raises(PayloadTooLarge, match="exceed 2 MB"):
        service.add_steps(AGENT, flow_id, heavy)
    assert service.admin_flow(ADMIN, flow_id).flow.step_count == 0
    assert service.add_steps(AGENT, flow_id, heavy[:30]).recorded  # 1.8 MB: one transaction takes it


def test_the_openapi_document_describes_the_batch_route_with_its_scope() -> None:
    from flowledger.api.openapi import openapi_document

    document = openapi_document("test")
    operation = document["paths"]["/api/reasoning/flows/{flow_id}/steps:batch"]["post"]
    assert operation["security"] == [{"bearerAuth": ["reasoning.write"]}]
    assert {"200", "201", "403", "409", "413"} <= set(operation["responses"])
    assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/StepBatch")
