"""Items that no longer read as what they should be, written straight into the moto tables: the
routes answer a 409 naming the item (never a 500 on every later call), and every job that reads
them logs the id, counts it as skipped and goes on with the rest."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowledger.identity import Principal
from flowledger.jobs import run_job
from flowledger.pathways.extraction import PathwayExtractor
from flowledger.reasoning.models import FlowStart, FlowView, StepCreate
from flowledger.reasoning.service import FlowService
from flowledger.research.backlog import Backlog
from flowledger.research.models import BacklogStatus, Reason
from flowledger.research.synthetic import enqueue_synthetic
from flowledger.services import Services
from tests.integration import test_reasoning_routes as reasoning
from tests.integration.test_reasoning_routes import ADMIN, Call, add_step, close, open_flow

call = reasoning.call  # the reasoning function's handler on moto, as a fixture here too

PHI = "Ann Example, MRN 123-456"  # stands for whatever a poisoned item holds: never in a response or a log
POISONED_STEP = "st_01POISONED00000000000000"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
AGENT = Principal(kind="user", id="agent-researcher", scopes=frozenset({"reasoning.write"}))


def put_raw(services: Services, table: str, item: dict[str, Any]) -> None:
    services.aws.dynamodb.put_item(TableName=services.aws.table_name(table), Item=item)


def poison_a_step(services: Services, flow_id: str) -> None:
    """A step without a kind whose inputs are a string: written by hand, or by an older version."""
    put_raw(
        services,
        "steps",
        {
            "flow_id": {"S": flow_id},
            "step_id": {"S": POISONED_STEP},
            "created_at": {"S": "2026-11-30T09:00:00.000000Z"},
            "agent": {"S": "researcher"},
            "summary_text": {"S": "Retrieved passages"},
            "inputs": {"S": PHI},
        },
    )


def assert_names_only_the_item(status: int, answer: dict[str, Any], item_id: str) -> None:
    assert (status, answer["error"]) == (409, "undecodable_item"), answer
    assert item_id in answer["message"] and PHI not in str(answer)


def assert_logged_by_id(caplog: pytest.LogCaptureFixture, *item_ids: str) -> None:
    skipped = [r for r in caplog.records if r.name == "flowledger.store" and "skipped" in r.getMessage()]
    assert sorted(r.item for r in skipped) == sorted(item_ids)  # type: ignore[attr-defined]
    assert not any(PHI in r.getMessage() for r in caplog.records)


def test_an_undecodable_step_is_a_409_naming_it_on_every_read_and_close(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    assert add_step(call, flow_id)[0] == 201
    poison_a_step(services, flow_id)
    for _ in range(2):  # not once, then a 500 ever after
        status, answer, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}/steps", user_arn=ADMIN)
        assert_names_only_the_item(status, answer, POISONED_STEP)
    # which stored attributes are wrong, for the operator; never what they hold
    assert "(ValidationError in back_refs, inputs, outputs, pii_fields, step_kind)" in answer["message"]
    assert_names_only_the_item(*close(call, flow_id), POISONED_STEP)


def test_an_undecodable_flow_is_a_409_naming_it(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("flows"),
        Key={"flow_id": {"S": flow_id}},
        UpdateExpression="SET flow_state = :s",
        ExpressionAttributeValues={":s": {"S": PHI}},
    )
    status, answer, _ = call("GET", f"/admin/v1/reasoning/flows/{flow_id}", user_arn=ADMIN)
    assert_names_only_the_item(status, answer, flow_id)
    assert_names_only_the_item(*close(call, flow_id), flow_id)


def test_a_tampered_sealed_field_is_a_409_naming_its_step(call: Call, services: Services) -> None:
    flow_id = open_flow(call)
    status, step = add_step(call, flow_id, inputs={"name": PHI}, pii_fields={"inputs": ["name"]})
    assert status == 201
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("steps"),
        Key={"flow_id": {"S": flow_id}, "step_id": {"S": step["step_id"]}},
        UpdateExpression="SET inputs.#n.ciphertext = :c",
        ExpressionAttributeNames={"#n": "name"},
        ExpressionAttributeValues={":c": {"S": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}},
    )
    route = f"/admin/v1/reasoning/flows/{flow_id}/steps/{step['step_id']}/sealed"
    status, answer, _ = call("GET", route, user_arn=ADMIN, side="inputs", field="name")
    assert_names_only_the_item(status, answer, step["step_id"])
    assert "sealed inputs" in answer["message"]


def stale_flow(services: Services, summary: str) -> str:
    services.clock = lambda: NOW - timedelta(hours=25)
    flow_id = (
        FlowService(services)
        .start_flow(AGENT, FlowStart(trigger_type="t", trigger_ref="r", trigger_summary=summary))
        .flow_id
    )
    FlowService(services).add_step(
        AGENT, flow_id, StepCreate(step_kind="retrieval", agent="researcher", summary_text="Retrieved passages")
    )
    return flow_id


def test_flow_decay_skips_undecodable_flows_and_steps_logs_their_ids_and_aborts_the_rest(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    good = stale_flow(services, "A question")
    bad_flow = stale_flow(services, "Another question")
    bad_steps = stale_flow(services, "A third question")
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("flows"),
        Key={"flow_id": {"S": bad_flow}},
        UpdateExpression="SET created_by = :n",
        ExpressionAttributeValues={":n": {"N": "7"}},
    )
    poison_a_step(services, bad_steps)
    services.clock = lambda: NOW
    with caplog.at_level(logging.WARNING, logger="flowledger.store"):
        assert run_job("flow_decay", services) == {"job": "flow_decay", "aborted": 1, "skipped": 2, "rows_failed": 2}
    assert_logged_by_id(caplog, bad_flow, POISONED_STEP)
    assert FlowService(services).flow_with_steps(good)[0].flow_state == "aborted"
    # and the next hourly run is not stopped either
    assert run_job("flow_decay", services) == {"job": "flow_decay", "aborted": 0, "skipped": 2, "rows_failed": 2}


@pytest.fixture
def pathway(services: Services, qualifying_flow: Any) -> dict[str, Any]:
    """One good pathway, extracted from a qualifying flow; its raw item."""
    flow: FlowView = qualifying_flow("fl_01QUALIFYING0000000000000", "chat/run-1")
    extraction = PathwayExtractor(services).extract(flow, [], "system:test")
    assert extraction.pathway_id is not None
    table = services.aws.table_name("pathways")
    key = {"pathway_id": {"S": extraction.pathway_id}}
    item: dict[str, Any] = services.aws.dynamodb.get_item(TableName=table, Key=key)["Item"]
    return item


def poison_pathways(services: Services, good: dict[str, Any]) -> tuple[str, str]:
    """A pathway whose hit count is text, and one whose vector is not binary."""
    counted, embedded = "pw_" + "0" * 26, "pw_" + "1" * 26
    put_raw(services, "pathways", {**good, "pathway_id": {"S": counted}, "hit_count": {"S": PHI}})
    put_raw(services, "pathways", {**good, "pathway_id": {"S": embedded}, "embedding": {"S": PHI}})
    return counted, embedded


def test_pathway_jobs_skip_undecodable_pathways_log_their_ids_and_do_the_rest(
    services: Services, pathway: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    bad = poison_pathways(services, pathway)
    with caplog.at_level(logging.WARNING, logger="flowledger.store"):
        backfill = run_job("pathway_embedding_backfill", services)
        assert (backfill["embedded"], backfill["pathways"], backfill["skipped"]) == (1, 1, 2)
        assert_logged_by_id(caplog, *bad)
        caplog.clear()
        decay = run_job("pathway_decay", services)
        assert (decay["scanned"], decay["skipped"]) == (1, 2)
        assert_logged_by_id(caplog, *bad)


def test_an_undecodable_pathway_is_a_409_naming_it(call: Call, services: Services, pathway: dict[str, Any]) -> None:
    counted, _ = poison_pathways(services, pathway)
    status, answer, _ = call("GET", f"/admin/v1/reasoning/pathways/{counted}", user_arn=ADMIN)
    assert_names_only_the_item(status, answer, counted)


def enqueue_two(backlog: Backlog) -> tuple[str, str]:
    """Two rows through the real enqueue: their request ids, in enqueue order."""
    first, second = enqueue_synthetic(backlog, 2, "undecodable", reason=Reason.NO_EVIDENCE_HITS)
    return first, second


def poison_row(services: Services, request_id: str) -> None:
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("backlog"),
        Key={"request_id": {"S": request_id}},
        UpdateExpression="SET retry_count = :r",
        ExpressionAttributeValues={":r": {"S": PHI}},
    )


def test_the_stale_sweep_skips_an_undecodable_row_logs_its_id_and_recovers_the_rest(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    services.clock = lambda: NOW
    backlog = Backlog(services)
    first, second = enqueue_two(backlog)
    assert backlog.pull_next("user:consumer") is not None and backlog.pull_next("user:consumer") is not None
    poison_row(services, first)
    services.clock = lambda: NOW + timedelta(hours=1)
    with caplog.at_level(logging.WARNING, logger="flowledger.store"):
        result = backlog.sweep_stale()
    assert (result["recovered"], result["skipped"]) == (1, 1)
    assert_logged_by_id(caplog, first)
    recovered = backlog.get(second)
    assert recovered is not None and recovered.status is BacklogStatus.PENDING


def test_a_pull_by_type_passes_over_an_undecodable_row_at_the_head_of_the_queue(services: Services) -> None:
    services.clock = lambda: NOW
    backlog = Backlog(services)
    first, second = enqueue_two(backlog)
    poison_row(services, first)
    pulled = backlog.pull_next("user:consumer", trigger_type="user_question")
    assert pulled is not None and pulled.request_id == second


def test_a_pull_passes_over_a_ticket_whose_copy_cannot_be_read(services: Services) -> None:
    services.clock = lambda: NOW
    backlog = Backlog(services)
    _, second = enqueue_two(backlog)
    services.aws.dynamodb.update_item(
        TableName=services.aws.table_name("backlog_tickets"),
        Key={"ticket": {"N": "1"}},
        UpdateExpression="SET #row.retry_count = :r",  # the slot's copy of the first row
        ExpressionAttributeNames={"#row": "row"},
        ExpressionAttributeValues={":r": {"S": PHI}},
    )
    pulled = backlog.pull_next("user:consumer")
    assert pulled is not None and pulled.request_id == second
