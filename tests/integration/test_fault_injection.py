"""Faults injected at the botocore boundary of the deployed handlers: every audited write is whole or absent.

The hooks sit on the very client the function's ``bootstrap()`` builds, so the real adapters run; a hook on
``before-call`` answers for AWS after botocore's own retries (a short-circuited call is not retried).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError, ReadTimeoutError

from flowledger.api.errors import throttled
from flowledger.ledger.store import MAX_ATTEMPTS, MAX_BACKOFF_SECONDS
from flowledger.research.backlog import TICKET_ATTEMPTS
from flowledger.research.tickets import TAKE_ATTEMPTS
from flowledger.services import Services, bootstrap

WRITER = {"sub": "agent-researcher", "scope": "reasoning.write", "patient_id": ""}
PATIENT = {"sub": "u-ann", "scope": "reasoning.read", "patient_id": "p-ann"}
ADMIN = "arn:aws:sts::123456789012:assumed-role/researcher/engine"
ENDPOINT = "https://dynamodb.us-east-1.amazonaws.com"
LEDGER = "ledger"


@dataclass(frozen=True)
class Request:
    function: str
    method: str
    path: str
    body: Any
    who: dict[str, str] | None = None
    user_arn: str | None = None


Call = Callable[[Request], tuple[int, Any, dict[str, str]]]


@pytest.fixture
def call(services: Services, load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any) -> Call:
    handlers = {name: load_function(name).handler for name in ("reasoning", "research")}

    def invoke(request: Request) -> tuple[int, Any, dict[str, str]]:
        event = rest_event(
            request.method, request.path, body=request.body, authorizer=request.who, user_arn=request.user_arn
        )
        response = handlers[request.function](event, lambda_context)
        headers = {
            **(response.get("headers") or {}),
            **{k: v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()},
        }
        return response["statusCode"], json.loads(response["body"]), headers

    return invoke


def ok(call: Call, request: Request) -> Any:
    status, body, _ = call(request)
    assert status in (200, 201), body
    return body


# ---- the audited write paths: setup (clean), then the request the fault hits --------------------------------


def open_flow_request() -> Request:
    body = {
        "trigger_type": "user_question",
        "trigger_ref": "chat/run-1",
        "trigger_summary": "Question about a lab trend",
        "trace_id": "trace-1",
        "patient_id": "p-ann",
    }
    return Request("reasoning", "POST", "/api/reasoning/flows", body, WRITER)


NO_PATIENT = {"trigger_type": "user_question", "trigger_ref": "chat/run-1", "trigger_summary": "A question"}


def step_request(flow_id: str) -> Request:
    body = {"step_kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved passages", "confidence": 0.95}
    return Request("reasoning", "POST", f"/api/reasoning/flows/{flow_id}/steps", body, WRITER)


def enqueue_request() -> Request:
    body = {
        "idempotency_key": "key-fault-001",
        "trigger_type": "user_question",
        "trigger_ref": "ref/fault",
        "reason": "weak_composite_k",
        "question_framing": "Find stronger evidence for the claim.",
    }
    return Request("research", "POST", "/admin/v1/reasoning/research/deeper-request", body, user_arn=ADMIN)


CLAIM = {"claim_id": "claim-42", "rejection_summary": "Critic found no support"}


def add_step_path(call: Call) -> Request:
    return step_request(ok(call, open_flow_request())["flow_id"])


def close_flow_path(call: Call) -> Request:
    flow_id = ok(call, open_flow_request())["flow_id"]
    ok(call, step_request(flow_id))
    outcome = {"type": "recommendation_delivered", "summary": "Recommended a follow-up test", "confidence": 0.94}
    return Request(
        "reasoning", "PATCH", f"/api/reasoning/flows/{flow_id}", {"state": "completed", "outcome": outcome}, WRITER
    )


def pull_path(call: Call) -> Request:
    ok(call, enqueue_request())
    return Request("research", "POST", "/admin/v1/reasoning/research/backlog/next", {}, user_arn=ADMIN)


def resolve_claim_path(call: Call) -> Request:
    ok(call, Request("research", "POST", "/admin/v1/reasoning/claims-pending-review", CLAIM, user_arn=ADMIN))
    path = "/admin/v1/reasoning/claims-pending-review/claim-42"
    return Request("research", "PATCH", path, {"resolution": "dismissed"}, user_arn=ADMIN)


def known_patient(call: Call, request: Request) -> Request:
    """``request``, once p-ann already has her data key (her first flow made it): what it writes is its own."""
    ok(call, open_flow_request())
    return request


PATHS: dict[str, Callable[[Call], Request]] = {
    "open-flow": lambda call: known_patient(call, open_flow_request()),
    "add-step": add_step_path,
    "close-flow": close_flow_path,
    "consent": lambda call: known_patient(
        call, Request("reasoning", "PUT", "/api/reasoning/consent", {"reasoning_read": True}, PATIENT)
    ),
    "enqueue": lambda _: enqueue_request(),
    "pull": pull_path,
    "mark-claim": lambda _: Request(
        "research", "POST", "/admin/v1/reasoning/claims-pending-review", CLAIM, user_arn=ADMIN
    ),
    "resolve-claim": resolve_claim_path,
}


# ---- faults at the botocore boundary -------------------------------------------------------------------------


def aws_error(code: str, **extra: Any) -> tuple[AWSResponse, dict[str, Any]]:
    error = {"Error": {"Code": code, "Message": "injected"}, "ResponseMetadata": {"HTTPStatusCode": 400}, **extra}
    return AWSResponse(ENDPOINT, 400, {}, None), error


def cancellation(params: dict[str, Any], reason: Callable[[int], str]) -> tuple[AWSResponse, dict[str, Any]]:
    """A cancelled transaction with ``reason(index)`` for each of the request's items."""
    count = len(json.loads(params["body"])["TransactItems"])
    reasons = [{"Code": reason(index)} for index in range(count)]
    return aws_error("TransactionCanceledException", CancellationReasons=reasons)


def read_timeout(**_: Any) -> None:
    raise ReadTimeoutError(endpoint_url=ENDPOINT)


@dataclass
class Fault:
    """A hook on ``event`` of the handler's DynamoDB client; ``once`` lets every later call through."""

    event: str
    hook: Callable[..., Any]
    once: bool = False
    calls: int = 0

    def __call__(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.once and self.calls > 1:
            return None
        return self.hook(**kwargs)


@contextlib.contextmanager
def injected(fault: Fault) -> Iterator[Fault]:
    aws = bootstrap().aws  # the clients the function under test uses
    events = (aws.kms if fault.event.split(".")[1] == "kms" else aws.dynamodb).meta.events
    events.register(fault.event, fault)
    try:
        yield fault
    finally:
        events.unregister(fault.event, fault)


WRITE = "before-call.dynamodb.TransactWriteItems"
FAULTS: dict[str, Callable[[], Fault]] = {
    "throttled": lambda: Fault(WRITE, lambda **_: aws_error("ProvisionedThroughputExceededException")),
    "throttled-cancellation": lambda: Fault(
        WRITE, lambda params, **_: cancellation(params, lambda _: "ThrottlingError")
    ),
    "throttled-reads-and-writes": lambda: Fault("before-call.dynamodb", lambda **_: aws_error("ThrottlingException")),
    "timeout-before-send": lambda: Fault(WRITE, read_timeout),
}


def counts(services: Services) -> dict[str, int]:
    """Items per table: the domain tables and the ledger. Not the chains' leases: the lease a writer took on its
    chain is its own, kept for its next write, and no part of the request's."""
    dynamodb = services.aws.dynamodb
    return {
        name: dynamodb.scan(TableName=name, Select="COUNT", ConsistentRead=True)["Count"]
        for name in dynamodb.list_tables()["TableNames"]
        if name != services.aws.table_name("ledger_leases")
    }


@pytest.mark.parametrize("fault_name", FAULTS)
@pytest.mark.parametrize("path_name", PATHS)
def test_a_refused_write_is_503_and_leaves_nothing(
    call: Call, services: Services, path_name: str, fault_name: str
) -> None:
    request = PATHS[path_name](call)
    before = counts(services)
    with injected(FAULTS[fault_name]()) as fault:
        status, body, headers = call(request)
    assert fault.calls >= 1
    expected = "upstream_unavailable" if fault_name.startswith("timeout") else "throttled"
    assert (status, body["error"]) == (503, expected), body
    assert set(body) == {"error", "message", "request_id"} and body["request_id"] != "unknown"
    assert headers["Retry-After"] == "1"
    assert counts(services) == before


@pytest.mark.parametrize("code", ["ThrottlingException", "LimitExceededException"])
def test_kms_throttling_a_sealed_step_is_503_and_leaves_nothing(call: Call, services: Services, code: str) -> None:
    # A flow of no patient: its fields are sealed under a data key of the flow's own, made now.
    request = step_request(
        ok(call, Request("reasoning", "POST", "/api/reasoning/flows", NO_PATIENT, WRITER))["flow_id"]
    )
    sealed = Request(
        request.function,
        request.method,
        request.path,
        {**request.body, "inputs": {"dob": "1970-01-01"}, "pii_fields": {"inputs": ["dob"], "outputs": []}},
        request.who,
    )
    before = counts(services)
    with injected(Fault("before-call.kms.GenerateDataKey", lambda **_: aws_error(code))) as fault:
        status, body, headers = call(sealed)
    assert fault.calls == 1
    assert (status, body["error"], headers["Retry-After"]) == (503, "throttled", "1"), body
    assert counts(services) == before
    assert ok(call, sealed)["step_id"]  # the same step once KMS answers again


# Items each path's write adds per table (logical names), as a clean run measures them.
EFFECT: dict[str, dict[str, int]] = {
    "open-flow": {"flows": 1, LEDGER: 1},
    "add-step": {"steps": 1, LEDGER: 1},
    # The close, then the pathway it extracts with its counter shard (its own audited write).
    "close-flow": {LEDGER: 2, "pathways": 2},
    "consent": {"consents": 1, LEDGER: 1},
    # The row and its counter shard, its ticket slot and the ticket counter; the creation, then the operator's request.
    "enqueue": {"backlog": 2, "backlog-tickets": 2, LEDGER: 2},
    "pull": {"backlog-tickets": -1, LEDGER: 1},  # the row flips in place and its slot is released
    "mark-claim": {"claims-review": 1, LEDGER: 1},
    "resolve-claim": {LEDGER: 1},  # the claim is updated in place
}
# When the answer is lost the request stops there: the close's pathway is extracted later, not now, and the
# operator's request is recorded when the client retries with its key.
LOST_ANSWER_EFFECT = {**EFFECT, "close-flow": {LEDGER: 1}, "enqueue": {"backlog": 2, "backlog-tickets": 2, LEDGER: 1}}


def effect(services: Services, before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    logical = {services.aws.table_name(name): name for name in {n for e in EFFECT.values() for n in e}}
    return {logical.get(name, name): after[name] - before[name] for name in after if after[name] != before[name]}


@pytest.mark.parametrize("path_name", PATHS)
def test_a_clean_write_adds_its_items_and_one_event_each(call: Call, services: Services, path_name: str) -> None:
    request = PATHS[path_name](call)
    before = counts(services)
    ok(call, request)
    assert effect(services, before, counts(services)) == EFFECT[path_name]


@pytest.mark.parametrize("path_name", PATHS)
def test_a_write_applied_before_its_answer_was_lost_is_whole(call: Call, services: Services, path_name: str) -> None:
    request = PATHS[path_name](call)
    before = counts(services)
    # DynamoDB applied the transaction; the answer timed out on its way back.
    with injected(Fault("after-call.dynamodb.TransactWriteItems", read_timeout, once=True)):
        status, body, headers = call(request)
    assert (status, body["error"], headers["Retry-After"]) == (503, "upstream_unavailable", "1")
    assert effect(services, before, counts(services)) == LOST_ANSWER_EFFECT[path_name]


@pytest.mark.parametrize("path_name", PATHS)
def test_a_failed_condition_on_the_callers_item_leaves_nothing(call: Call, services: Services, path_name: str) -> None:
    request = PATHS[path_name](call)
    before = counts(services)
    failed_first = Fault(
        WRITE, lambda params, **_: cancellation(params, lambda i: "ConditionalCheckFailed" if i == 0 else "None")
    )
    with injected(failed_first):
        status, body, _ = call(request)
    if path_name == "pull":  # the row looks taken by a rival: the queue answers empty, the row stays pending
        assert (status, body["request"]) == (200, None)
    else:
        assert status == 409, body
    assert counts(services) == before


# ---- retries stop at their bound, with jittered pauses, and answer 503 ---------------------------------------


@dataclass
class Pauses:
    """The backoff pauses a retry loop asked for (the real jittered function, recorded)."""

    taken: list[float]

    @classmethod
    def record(cls, monkeypatch: pytest.MonkeyPatch, module: str) -> Pauses:
        from flowledger.store.backoff import backoff_seconds

        pauses = cls([])

        def recorded(*args: Any, **kwargs: Any) -> float:
            pauses.taken.append(backoff_seconds(*args, **kwargs))
            return pauses.taken[-1]

        monkeypatch.setattr(f"{module}.backoff_seconds", recorded)
        return pauses


def last_item_lost(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
    """A rival took the chain position every time: the event (the last item) is in conflict."""
    count = len(json.loads(params["body"])["TransactItems"])
    return cancellation(params, lambda index: "TransactionConflict" if index == count - 1 else "None")


@pytest.mark.parametrize(
    ("path_name", "fault", "module", "bound", "cap", "error"),
    [
        (
            "open-flow",
            lambda: Fault(WRITE, last_item_lost),
            "flowledger.ledger.store",
            MAX_ATTEMPTS,
            MAX_BACKOFF_SECONDS,
            "ledger_contention",
        ),
        (
            "enqueue",  # another enqueue took the next ticket every time: the counter's condition (item 1) fails
            lambda: Fault(
                WRITE,
                lambda params, **_: cancellation(params, lambda i: "ConditionalCheckFailed" if i == 1 else "None"),
            ),
            "flowledger.research.backlog",
            TICKET_ATTEMPTS,
            0.002 * 2 ** (TICKET_ATTEMPTS - 1),
            "backlog_contention",
        ),
        (
            "pull",  # an enqueue's transaction holds the counter every time the ticket is taken
            lambda: Fault("before-call.dynamodb.UpdateItem", lambda **_: aws_error("TransactionConflictException")),
            "flowledger.research.tickets",
            TAKE_ATTEMPTS,
            0.002 * 2 ** (TAKE_ATTEMPTS - 1),
            "throttled",
        ),
    ],
    ids=["ledger-position", "ticket-issue", "ticket-take"],
)
def test_a_retry_loop_stops_at_its_bound_with_jitter_and_answers_503(
    call: Call,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    path_name: str,
    fault: Callable[[], Fault],
    module: str,
    bound: int,
    cap: float,
    error: str,
) -> None:
    request = PATHS[path_name](call)
    pauses = Pauses.record(monkeypatch, module)
    before = counts(services)
    with injected(fault()) as always:
        status, body, headers = call(request)
    assert (status, body["error"], headers["Retry-After"]) == (503, error, "1"), body
    assert always.calls == bound
    # A random pause after each failed attempt (the ledger and the ticket issue pause after their last one too).
    assert bound - 1 <= len(pauses.taken) <= bound and len(set(pauses.taken)) == len(pauses.taken)
    assert max(pauses.taken) <= cap
    assert counts(services) == before


# ---- the translation matches on the error code, never on the message -----------------------------------------


@pytest.mark.parametrize(
    ("response", "is_throttling"),
    [
        ({"Error": {"Code": "ProvisionedThroughputExceededException"}}, True),
        ({"Error": {"Code": "ThrottlingException"}}, True),  # DynamoDB on-demand; KMS request quota
        ({"Error": {"Code": "RequestLimitExceeded"}}, True),
        ({"Error": {"Code": "TransactionConflictException"}}, True),
        ({"Error": {"Code": "LimitExceededException"}}, True),  # KMS
        (
            {"Error": {"Code": "TransactionCanceledException"}, "CancellationReasons": [{"Code": "ThrottlingError"}]},
            True,
        ),
        (
            {
                "Error": {"Code": "TransactionCanceledException"},
                "CancellationReasons": [{"Code": "ConditionalCheckFailed"}],
            },
            False,
        ),
        ({"Error": {"Code": "AccessDeniedException", "Message": "ThrottlingException"}}, False),
        ({"Error": {"Code": "ValidationException", "Message": "Throughput exceeds the current capacity"}}, False),
    ],
)
def test_throttling_is_recognised_by_its_code(response: dict[str, Any], is_throttling: bool) -> None:
    exc = ClientError(response, "TransactWriteItems")
    assert (throttled(exc) is not None) is is_throttling
