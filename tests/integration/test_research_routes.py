"""The research function's admin routes on moto: enqueue, pull, complete, observability, claim triage."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowledger.research.backlog import Backlog
from flowledger.research.models import DeeperRequest, Reason
from flowledger.services import Services

ADMIN = "arn:aws:sts::123456789012:assumed-role/researcher/engine"
Call = Callable[..., tuple[int, Any]]


@pytest.fixture
def call(services: Services, load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any) -> Call:
    handler = load_function("research").handler

    def invoke(method: str, path: str, body: Any = None, user_arn: str | None = ADMIN) -> tuple[int, Any]:
        response = handler(rest_event(method, path, body=body, user_arn=user_arn), lambda_context)
        return response["statusCode"], json.loads(response["body"])

    return invoke


def enqueue(call: Call, key: str, trigger_type: str = "user_question") -> tuple[int, Any]:
    return call(
        "POST",
        "/admin/v1/reasoning/research/deeper-request",
        {
            "idempotency_key": key,
            "trigger_type": trigger_type,
            "trigger_ref": f"ref/{key}",
            "reason": "weak_composite_k",
            "question_framing": "Find stronger evidence for the claim.",
        },
    )


def pull(call: Call, trigger_type: str | None = None) -> Any:
    status, body = call(
        "POST", "/admin/v1/reasoning/research/backlog/next", {"trigger_type": trigger_type} if trigger_type else {}
    )
    assert status == 200
    return body["request"]


def actions(services: Services) -> list[tuple[str, str]]:
    return sorted((e.action, e.actor) for c in services.ledger.chain_ids() for e in services.ledger.read_chain(c))


def test_enqueue_is_idempotent_on_the_client_key(call: Call, services: Services) -> None:
    first = enqueue(call, "key-00000001")
    again = enqueue(call, "key-00000001")
    assert (first[0], again[0]) == (201, 200) and first[1]["request_id"] == again[1]["request_id"]
    # The row is created once; the operator's request is recorded each time, pinned to the principal.
    assert actions(services) == [
        ("admin.reasoning.research.deeper_requested", ADMIN),
        ("admin.reasoning.research.deeper_requested", ADMIN),
        ("reasoning.research.deeper_request_created", ADMIN),
    ]
    requested = [
        e for c in services.ledger.chain_ids() for e in services.ledger.read_chain(c)
        if e.action == "admin.reasoning.research.deeper_requested"
    ]  # fmt: skip
    assert sorted(e.payload["created"] for e in requested) == [False, True]
    assert {e.subject for e in requested} == {f"backlog:{first[1]['request_id']}"}


def test_a_producer_inside_an_agent_enqueues_without_the_operators_audit(services: Services) -> None:
    Backlog(services).enqueue(
        "system:researcher",
        DeeperRequest(
            idempotency_key="key-agent-001",
            trigger_type="t",
            trigger_ref="r",
            reason=Reason.NO_EVIDENCE_HITS,
            question_framing="q",
        ),
    )
    assert actions(services) == [("reasoning.research.deeper_request_created", "system:researcher")]


def test_pulls_are_fifo_filterable_and_null_when_empty(call: Call) -> None:
    ids = [
        enqueue(call, f"key-fifo-{n:04d}", "critic" if n == 1 else "user_question")[1]["request_id"] for n in range(3)
    ]
    assert pull(call, "critic")["request_id"] == ids[1]
    assert [pull(call)["request_id"], pull(call)["request_id"]] == [ids[0], ids[2]]
    assert pull(call) is None


def test_complete_rules(call: Call, services: Services) -> None:
    pending = enqueue(call, "key-pending-1")[1]["request_id"]
    status, body = call("POST", f"/admin/v1/reasoning/research/backlog/{pending}/complete", {})
    assert status == 409 and "only a dispatched" in body["message"]  # no complete without a pull
    dispatched = pull(call)["request_id"]
    status, done = call(
        "POST",
        f"/admin/v1/reasoning/research/backlog/{dispatched}/complete",
        {"flow_id": "fl_01JD0000000000000000000000"},
    )
    assert status == 200 and done["status"] == "completed"
    completed_at = datetime.fromisoformat(done["completed_at"].replace("Z", "+00:00"))
    assert done["expires_at"] == int((completed_at + timedelta(days=30)).timestamp())
    assert call("POST", f"/admin/v1/reasoning/research/backlog/{dispatched}/complete", {})[0] == 409
    missing = "rq_" + "0" * 26
    assert call("POST", f"/admin/v1/reasoning/research/backlog/{missing}/complete", {})[0] == 404
    enqueue(call, "key-failing-1")
    failing = pull(call)["request_id"]
    status, failed = call(
        "POST", f"/admin/v1/reasoning/research/backlog/{failing}/complete", {"error": "engine_gave_up"}
    )
    assert (failed["status"], failed["failure_reason"]) == ("failed_voluntary", "engine_gave_up")
    live = enqueue(call, "key-live-0001")[1]["request_id"]
    assert Backlog(services).get(live).expires_at is None  # type: ignore[union-attr]  # live rows never expire
    pull(call)
    assert Backlog(services).get(live).expires_at is None  # type: ignore[union-attr]


def test_the_observability_view(call: Call, services: Services) -> None:
    for n in range(3):
        enqueue(call, f"key-view-{n:04d}")
    pull(call)
    status, view = call("GET", "/admin/v1/reasoning/research/backlog")
    assert status == 200
    assert view["status_distribution"]["pending"] == 2 and view["status_distribution"]["dispatched"] == 1
    assert view["loop_health"] == "healthy" and view["retry_distribution"] == {"0": 3}
    assert ("admin.reasoning.research.backlog_read", ADMIN) in actions(services)


def test_claims_are_marked_once_listed_and_resolved_once(call: Call, services: Services) -> None:
    body = {"claim_id": "claim-42", "rejection_summary": "Critic found no support"}
    assert call("POST", "/admin/v1/reasoning/claims-pending-review", body)[0] == 201
    assert call("POST", "/admin/v1/reasoning/claims-pending-review", body)[0] == 200
    status, queue = call("GET", "/admin/v1/reasoning/claims-pending-review")
    assert [c["claim_id"] for c in queue["pending"]] == ["claim-42"] and queue["recent_resolutions"] == []
    status, resolved = call("PATCH", "/admin/v1/reasoning/claims-pending-review/claim-42", {"resolution": "dismissed"})
    assert status == 200 and (resolved["status"], resolved["resolved_by"]) == ("dismissed", ADMIN)
    assert call("PATCH", "/admin/v1/reasoning/claims-pending-review/claim-42", {"resolution": "resolved"})[0] == 409
    assert call("PATCH", "/admin/v1/reasoning/claims-pending-review/nope", {"resolution": "resolved"})[0] == 404
    _, queue = call("GET", "/admin/v1/reasoning/claims-pending-review")
    assert queue["pending"] == [] and [c["claim_id"] for c in queue["recent_resolutions"]] == ["claim-42"]
    assert ("reasoning.claims_pending_review.resolved", ADMIN) in actions(services)


def test_recently_resolved_is_the_last_ten_terminal_entries_of_the_past_day_newest_first(
    call: Call, services: Services
) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    for n in range(13):
        services.clock = lambda n=n: now + timedelta(hours=2 * n)  # type: ignore[misc]
        claim = f"claim-{n:02d}"
        call("POST", "/admin/v1/reasoning/claims-pending-review", {"claim_id": claim, "rejection_summary": "No"})
        resolution = "resolved" if n % 2 else "dismissed"
        assert call("PATCH", f"/admin/v1/reasoning/claims-pending-review/{claim}", {"resolution": resolution})[0] == 200
    call("POST", "/admin/v1/reasoning/claims-pending-review", {"claim_id": "claim-open", "rejection_summary": "No"})
    services.clock = lambda: now + timedelta(hours=25)
    status, queue = call("GET", "/admin/v1/reasoning/claims-pending-review")
    # Resolved within the past 24 h: hours 2..24 (claims 1..12); the ten newest, newest first.
    assert status == 200 and [c["claim_id"] for c in queue["recent_resolutions"]] == [
        f"claim-{n:02d}" for n in range(12, 2, -1)
    ]
    assert [c["claim_id"] for c in queue["pending"]] == ["claim-open"]


def test_every_route_needs_an_iam_principal_before_its_body_is_validated(call: Call) -> None:
    for method, path, body in [
        ("POST", "/admin/v1/reasoning/research/deeper-request", {}),
        ("POST", "/admin/v1/reasoning/research/backlog/next", {}),
        ("GET", "/admin/v1/reasoning/research/backlog", None),
        ("GET", "/admin/v1/reasoning/claims-pending-review", None),
    ]:
        status, answer = call(method, path, body, user_arn=None)
        # The empty deeper-request body breaks the schema, but an unsigned caller never learns that.
        assert (status, answer["error"]) == (403, "forbidden") and "fields" not in answer


def test_stale_sweep_recovers_then_fails_after_the_retries(services: Services) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    services.clock = lambda: now
    backlog = Backlog(services)
    row, _ = backlog.enqueue(
        "user:x",
        DeeperRequest(
            idempotency_key="key-stale-01",
            trigger_type="t",
            trigger_ref="r",
            reason=Reason.NO_EVIDENCE_HITS,
            question_framing="q",
        ),
    )
    for attempt in range(4):
        services.clock = lambda: now
        assert backlog.pull_next("user:consumer") is not None
        services.clock = lambda: now + timedelta(minutes=29)
        assert backlog.sweep_stale() == {
            "recovered": 0,
            "failed_after_retries": 0,
            "requeued": 0,
            "contended": 0,
            "skipped": 0,
        }  # not stale yet
        services.clock = lambda: now + timedelta(minutes=31)
        result = backlog.sweep_stale()
        if attempt < 3:
            assert result == {"recovered": 1, "failed_after_retries": 0, "requeued": 0, "contended": 0, "skipped": 0}
            assert backlog.get(row.request_id).retry_count == attempt + 1  # type: ignore[union-attr]
        else:
            assert result == {"recovered": 0, "failed_after_retries": 1, "requeued": 0, "contended": 0, "skipped": 0}
    final = backlog.get(row.request_id)
    assert final is not None and final.status == "failed_after_retries" and final.expires_at is not None
    recorded = [a for a, _ in actions(services)]
    assert recorded.count("reasoning.research.backlog.recovered") == 3
    assert recorded.count("reasoning.research.backlog.failed_after_retries") == 1
    assert recorded.count("memory.job.backlog_stale_sweep.completed") == 8


def stored_items(services: Services) -> dict[str, int]:
    """How many items each table holds: a refused request leaves every count as it was."""
    dynamodb = services.aws.dynamodb
    return {
        name: dynamodb.scan(TableName=name, Select="COUNT")["Count"] for name in dynamodb.list_tables()["TableNames"]
    }


DEEPER = {
    "idempotency_key": "key-typed-01",
    "trigger_type": "user_question",
    "trigger_ref": "ref/typed",
    "reason": "weak_composite_k",
    "question_framing": "Find stronger evidence for the claim.",
}
MISSING_ROW = "rq_" + "0" * 26


@pytest.mark.parametrize(
    ("method", "path", "body", "location"),
    [
        (
            "POST",
            "/admin/v1/reasoning/research/deeper-request",
            {**DEEPER, "dispatched_from_backlog": 0},
            ["dispatched_from_backlog"],
        ),
        (
            "POST",
            "/admin/v1/reasoning/research/deeper-request",
            {**DEEPER, "dispatched_from_backlog": "false"},
            ["dispatched_from_backlog"],
        ),
        (
            "POST",
            "/admin/v1/reasoning/research/deeper-request",
            {**DEEPER, "question_framing": 42},
            ["question_framing"],
        ),
        ("POST", "/admin/v1/reasoning/research/backlog/next", {"trigger_type": 1}, ["trigger_type"]),
        ("POST", f"/admin/v1/reasoning/research/backlog/{MISSING_ROW}/complete", {"error": False}, ["error"]),
        (
            "POST",
            "/admin/v1/reasoning/claims-pending-review",
            {"claim_id": 42, "rejection_summary": "No support"},
            ["claim_id"],
        ),
        ("PATCH", "/admin/v1/reasoning/claims-pending-review/claim-1", {"resolution": "resolved", "note": 5}, ["note"]),
    ],
    ids=[
        "backlog-flag-zero",
        "backlog-flag-string",
        "framing-number",
        "pull-number",
        "error-bool",
        "claim-number",
        "note-number",
    ],
)
def test_a_mistyped_field_is_422_naming_it_and_writes_nothing(
    call: Call, services: Services, method: str, path: str, body: Any, location: list[Any]
) -> None:
    enqueue(call, "key-existing-1")
    before = stored_items(services)
    status, answer = call(method, path, body)
    assert status == 422, answer  # a lax field would have taken it (201/200)
    assert answer["error"] == "validation_error"
    assert [f["loc"] for f in answer["fields"]] == [["body", *location]]
    assert stored_items(services) == before


def test_an_enum_field_still_takes_its_json_string(call: Call) -> None:
    status, row = call("POST", "/admin/v1/reasoning/research/deeper-request", {**DEEPER, "reason": "operator_request"})
    assert (status, row["reason"], row["dispatched_from_backlog"]) == (201, "operator_request", False)
