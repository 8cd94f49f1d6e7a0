"""The served OpenAPI document as a contract: it is valid 3.1, it lists every route with its scope,
a client generated from it works against the server, and the server answers as it says, both a walk
through every operation on real resources and the requests schemathesis generates from it."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import httpx
import hypothesis
import pytest
import requests
import schemathesis
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from flowledger import __version__
from flowledger.api.access import ADMIN_PREFIX, CLIENT_PREFIX
from flowledger.api.chat_app import CHAT_ROUTES
from flowledger.api.openapi import openapi_document
from flowledger.api.openapi_rules import server_rules
from flowledger.api.registry import rest_routes
from flowledger.api.routes import routes_of

pytestmark = pytest.mark.e2e

SCOPES = "chat,documents,reasoning.read,reasoning.write"
PATIENT = "p-1"
CLIENT_PACKAGE = "flowledger_contract_client"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Bounded and reproducible: one seed, derandomized, no example database, so CI sends the same requests.
# Every phase (examples, coverage, fuzzing, and the stateful walk along the links schemathesis infers),
# both modes (positive: valid input is taken; negative: invalid input is refused), every default check.
SCHEMATHESIS = {
    "seed": 20260611,
    "generation": {
        "mode": "all",
        "max-examples": 8,
        "deterministic": True,
        "database": "none",
        "with-security-parameters": False,
    },
    "phases": {"stateful": {"enabled": True, "max-steps": 6}},
    "request-timeout": 30,
}
STATEFUL_SCENARIOS = 12


@pytest.fixture(scope="module")
def server(launch: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A server of this module's own: the generated requests leave rows, runs and pathways behind."""
    running = launch(tmp_path_factory.mktemp("contract") / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def document(server: Any) -> dict[str, Any]:
    response = httpx.get(f"{server.base_url}/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


@pytest.fixture(scope="module")
def bearer(server: Any) -> str:
    result = server.cli(
        "token",
        "--data-dir",
        str(server.data_dir.path),
        "--sub",
        "contract",
        "--scopes",
        SCOPES,
        "--patient-id",
        PATIENT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_served_document_is_the_one_built_here(document: dict[str, Any]) -> None:
    # The schemathesis tests below are parametrized from the built one, so this makes them test the served one.
    assert document == openapi_document(__version__)


def test_the_served_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1.")
    validate(document, cls=OpenAPIV31SpecValidator)


def test_every_429_and_503_declares_the_retry_after_header_it_is_sent_with(document: dict[str, Any]) -> None:
    declared = [
        (path, method, status, response.get("headers", {}).get("Retry-After"))
        for path, item in document["paths"].items()
        for method, operation in item.items()
        for status, response in operation["responses"].items()
        if status in ("429", "503")
    ]
    assert len(declared) >= 2 * len(rest_routes())  # every operation can answer both
    for path, method, status, header in declared:
        assert header is not None, (method, path, status)
        assert header["required"] is True and header["schema"]["type"] == "integer", (method, path, status)


def test_every_served_route_is_documented_with_its_scope(document: dict[str, Any]) -> None:
    served = {(r.method, r.path, r.access, r.scope) for r in rest_routes()}
    served |= {(method, path, "jwt", "chat") for path, method in CHAT_ROUTES}
    documented = {(r.method, r.path, r.access, r.scope) for r in routes_of(document["paths"])}
    assert documented == served


# --- a client generated from the served document --------------------------------------------------


class SigV4HttpxAuth(httpx.Auth):
    """SigV4 for the generated (httpx) client: signs the method, URL, headers and body it sends."""

    requires_request_body = True

    def __init__(self, server: Any) -> None:
        self._signer = _signer(server)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        signed = AWSRequest(method=request.method, url=str(request.url), data=request.content, headers=headers)
        self._signer.add_auth(signed)
        request.headers["Authorization"] = signed.headers["Authorization"]
        request.headers["X-Amz-Date"] = signed.headers["X-Amz-Date"]
        yield request


def _signer(server: Any) -> SigV4Auth:
    credentials = server.data_dir.admin_credentials()
    return SigV4Auth(
        Credentials(credentials.access_key_id, credentials.secret_access_key), "execute-api", credentials.region
    )


@pytest.fixture(scope="module")
def generated(document: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """The package openapi-python-client generates from the served document, imported."""
    root = tmp_path_factory.mktemp("generated")
    (root / "openapi.json").write_text(json.dumps(document))
    # No post hooks: formatting the generated code is not what is under test.
    # A protobuf body is bytes to a client generator: its documented override reads it as octet-stream.
    config = {
        "package_name_override": CLIENT_PACKAGE,
        "post_hooks": [],
        "content_type_overrides": {"application/x-protobuf": "application/octet-stream"},
    }
    (root / "config.json").write_text(json.dumps(config))
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("openapi-python-client")),
            "generate",
            "--path",
            str(root / "openapi.json"),
            "--config",
            str(root / "config.json"),
            "--meta",
            "none",
            "--output-path",
            str(root / CLIENT_PACKAGE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # The generator skips what it cannot read with a warning: every such part is a contract bug.
    assert "Warning" not in output, output
    sys.path.insert(0, str(root))
    try:
        api = f"{CLIENT_PACKAGE}.api"
        yield SimpleNamespace(
            client=importlib.import_module(f"{CLIENT_PACKAGE}.client"),
            models=importlib.import_module(f"{CLIENT_PACKAGE}.models"),
            health=importlib.import_module(f"{api}.core.health_health_get"),
            me=importlib.import_module(f"{api}.core.me_api_me_get"),
            admin_me=importlib.import_module(f"{api}.admin.admin_me_admin_v1_me_get"),
            start_flow=importlib.import_module(f"{api}.reasoning.start_flow_api_reasoning_flows_post"),
            add_step=importlib.import_module(f"{api}.reasoning.add_step_api_reasoning_flows_flow_id_steps_post"),
            close_flow=importlib.import_module(f"{api}.reasoning.close_flow_api_reasoning_flows_flow_id_patch"),
            chat_turn=importlib.import_module(f"{api}.chat.chat_turn"),
            list_runs=importlib.import_module(f"{api}.chat.list_session_runs"),
        )
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == CLIENT_PACKAGE or m.startswith(f"{CLIENT_PACKAGE}.")]:
            del sys.modules[name]


def test_the_generated_client_reads_health_and_both_kinds_of_caller(
    generated: SimpleNamespace, server: Any, bearer: str
) -> None:
    models = generated.models
    health = generated.health.sync(client=generated.client.Client(base_url=server.base_url))
    assert isinstance(health, models.Health) and health.status == "ok"

    user = generated.client.AuthenticatedClient(base_url=server.base_url, token=bearer)
    me = generated.me.sync(client=user)
    assert isinstance(me, models.Me)
    assert (me.kind, me.principal, me.scopes, me.patient_id) == ("user", "contract", sorted(SCOPES.split(",")), PATIENT)

    admin = generated.client.AuthenticatedClient(
        base_url=server.base_url, token="unused", httpx_args={"auth": SigV4HttpxAuth(server)}
    )
    admin_me = generated.admin_me.sync(client=admin)
    assert isinstance(admin_me, models.Me)
    assert (admin_me.kind, admin_me.principal) == ("iam", server.data_dir.admin_credentials().principal_arn)


def test_the_generated_client_records_and_closes_a_flow(generated: SimpleNamespace, server: Any, bearer: str) -> None:
    models = generated.models
    user = generated.client.AuthenticatedClient(base_url=server.base_url, token=bearer)
    flow = generated.start_flow.sync(
        client=user,
        body=models.FlowStart(
            trigger_type="user_question", trigger_ref="contract/1", trigger_summary="A question", patient_id=PATIENT
        ),
    )
    assert isinstance(flow, models.FlowView)
    assert (flow.flow_state, flow.step_count, flow.patient_id) == (models.FlowViewFlowState.ACTIVE, 0, PATIENT)

    step = generated.add_step.sync(
        flow.flow_id,
        client=user,
        body=models.StepCreate(
            step_kind="retrieval", agent="researcher", summary_text="Read two passages", confidence=0.9
        ),
    )
    assert isinstance(step, models.StepView)
    assert (step.flow_id, step.step_kind, step.confidence) == (flow.flow_id, "retrieval", 0.9)
    assert step.step_id.startswith("st_")

    close = models.FlowClose(
        state=models.FlowCloseState.COMPLETED,
        outcome=models.Outcome(type_=models.OutcomeType.NO_ACTION, summary="Nothing to do", confidence=0.8),
    )
    closed = generated.close_flow.sync(flow.flow_id, client=user, body=close)
    assert isinstance(closed, models.FlowView)
    assert (closed.flow_state, closed.step_count) == (models.FlowViewFlowState.COMPLETED, 1)
    assert closed.outcome.type_ == models.OutcomeType.NO_ACTION

    again = generated.close_flow.sync(flow.flow_id, client=user, body=close)
    assert isinstance(again, models.ErrorBody) and again.error == "conflict" and again.request_id


def test_the_generated_client_takes_a_json_chat_turn(generated: SimpleNamespace, server: Any, bearer: str) -> None:
    models = generated.models
    user = generated.client.AuthenticatedClient(base_url=server.base_url, token=bearer, timeout=httpx.Timeout(60))
    # The generated operation reads 200 as its first media type, the JSON turn (a stream needs an SSE reader).
    response = generated.chat_turn.sync_detailed(
        client=user.with_headers({"Accept": "application/json"}),
        body=models.ChatRequest(query="How does the audit ledger work?"),
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    result = response.parsed
    assert isinstance(result, models.ChatResult)
    assert result.status == models.RunStatus.SUCCESS and result.offline_model is True
    assert result.session_id.startswith("ses_") and result.run_id.startswith("run_")
    assert result.content.text and result.status_codes[0] == models.StatusCode.ROUTING

    page = generated.list_runs.sync(result.session_id, client=user)
    assert isinstance(page, models.RunPage)
    assert [(r.run_id, r.status) for r in page.runs] == [(result.run_id, models.RunStatus.SUCCESS)]


# --- the server against the document ------------------------------------------------------------


class GatewayAuth(requests.auth.AuthBase):
    """What a real caller adds: a bearer token on client routes, a SigV4 signature on admin routes.

    It runs on the prepared request, so the signature covers the exact method, URL with its query
    string, headers and body bytes that go on the wire, which is what the server verifies.
    """

    def __init__(self, server: Any, bearer: str) -> None:
        self._bearer = bearer
        self._signer = _signer(server)

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        path = urlsplit(request.url).path
        if path.startswith(ADMIN_PREFIX):
            body = request.body or b""
            signed = AWSRequest(
                method=request.method,
                url=request.url,
                data=body.encode() if isinstance(body, str) else body,
                headers=dict(request.headers),
            )
            self._signer.add_auth(signed)
            request.headers["Authorization"] = signed.headers["Authorization"]
            request.headers["X-Amz-Date"] = signed.headers["X-Amz-Date"]
        elif path.startswith(CLIENT_PREFIX):
            request.headers["Authorization"] = f"Bearer {self._bearer}"
        return request


@pytest.fixture(scope="module")
def gateway_auth(server: Any, bearer: str) -> GatewayAuth:
    return GatewayAuth(server, bearer)


@pytest.fixture(scope="module")
def sse_validators(document: dict[str, Any]) -> dict[str, Draft202012Validator]:
    """One validator per documented SSE event type, from the document's ``x-sse-events``."""
    media = document["paths"]["/api/chat"]["post"]["responses"]["200"]["content"]["text/event-stream"]
    components = document["components"]
    return {
        name: Draft202012Validator({**ref, "components": components}) for name, ref in media["x-sse-events"].items()
    }


def assert_sse_events_documented(text: str, validators: dict[str, Draft202012Validator]) -> None:
    """Every frame is ``event: <type>`` / ``data: <json>`` with a documented type and a matching payload."""
    frames = [frame for frame in text.split("\n\n") if frame.strip()]
    assert frames, "an empty event stream"
    for frame in frames:
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        assert fields.keys() == {"event", "data"}, frame
        assert fields["event"] in validators, f"undocumented event type: {frame}"
        data = json.loads(fields["data"])
        errors = [e.message for e in validators[fields["event"]].iter_errors(data)]
        assert not errors and data["type"] == fields["event"], f"{frame}\n{errors}"


# Built in-process because schemathesis parametrizes at collection, before the server runs (its lazy
# `schemathesis.pytest.from_fixture` breaks on pytest 9.2); the first test above proves it is the served one.
DOCUMENT = openapi_document(__version__)
CONTRACT = schemathesis.openapi.from_dict(DOCUMENT, config=schemathesis.Config.from_dict(SCHEMATHESIS))


def test_every_operation_on_real_resources_answers_as_documented(server: Any, gateway_auth: GatewayAuth) -> None:
    """One walk through every operation with resources that exist, so 2xx bodies are checked too."""

    def conform(method: str, path: str, status: int, **parts: Any) -> Any:
        case = CONTRACT[path][method].Case(media_type="application/json" if "body" in parts else None, **parts)
        response = case.call(base_url=server.base_url, auth=gateway_auth)
        case.validate_response(response, checks=CHECKS)
        assert response.status_code == status, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()

    # The local server adds its store's durability (journal and snapshots) to the function's answer.
    assert conform("GET", "/health", 200) == {"status": "ok", "model": "offline", "store": {"durable": True}}
    assert conform("GET", "/api/me", 200)["principal"] == "contract"
    assert conform("GET", "/admin/v1/me", 200)["kind"] == "iam"

    flows, flow = "/api/reasoning/flows", "/api/reasoning/flows/{flow_id}"
    start = {
        "trigger_type": "contract.walk",
        "trigger_ref": "walk/1",
        "trigger_summary": "A walked flow",
        "trace_id": "trace-walk-1",
        "patient_id": PATIENT,
    }
    started = conform("POST", flows, 201, body=start)
    flow_id = {"flow_id": started["flow_id"]}
    assert conform("GET", flow, 403, path_parameters=flow_id)["error"] == "consent_required"
    assert conform("PUT", "/api/reasoning/consent", 200, body={"reasoning_read": True})["reasoning_read"] is True
    assert conform("GET", "/api/reasoning/consent", 200)["reasoning_read"] is True
    assert conform("GET", flow, 202, path_parameters=flow_id)["steps_so_far"] == 0
    first = conform(
        "POST",
        f"{flow}/steps",
        201,
        path_parameters=flow_id,
        body={
            "step_kind": "retrieval",
            "agent": "researcher",
            "summary_text": "Read two passages",
            "inputs": {"question": "q"},
            "pii_fields": {"inputs": ["question"]},
            "confidence": 0.95,
        },
    )
    step = {"step_kind": "verdict", "agent": "critic", "summary_text": "Checked the claim", "confidence": 0.94}
    conform("POST", f"{flow}/steps", 201, path_parameters=flow_id, body={**step, "parent_step_ids": [first["step_id"]]})
    close = {
        "state": "completed",
        "outcome": {"type": "recommendation_delivered", "summary": "Follow up", "confidence": 0.93},
    }
    assert conform("PATCH", flow, 200, path_parameters=flow_id, body=close)["flow_state"] == "completed"
    assert conform("PATCH", flow, 409, path_parameters=flow_id, body=close)["error"] == "conflict"
    assert conform("POST", f"{flow}/steps", 409, path_parameters=flow_id, body=step)["error"] == "conflict"
    assert len(conform("GET", flow, 200, path_parameters=flow_id)["steps"]) == 2
    assert conform("GET", flows, 200, query={"limit": 1})["flows"][0]["flow_id"] == started["flow_id"]

    admin_flows = "/admin/v1/reasoning/flows"
    assert conform("GET", f"{admin_flows}/{{flow_id}}", 200, path_parameters=flow_id)["flow"]["step_count"] == 2
    steps = conform("GET", f"{admin_flows}/{{flow_id}}/steps", 200, path_parameters=flow_id, query={"limit": 1})
    assert steps["steps"][0]["inputs"] == {"question": {"__sealed__": True}} and steps["next_cursor"]
    sealed, query = {**flow_id, "step_id": first["step_id"]}, {"side": "inputs", "field": "question"}
    field = f"{admin_flows}/{{flow_id}}/steps/{{step_id}}/sealed"
    opened = conform("GET", field, 200, path_parameters=sealed, query=query)
    assert opened["value"] == "q"
    by_trace = conform("GET", admin_flows, 200, query={"trace_id": "trace-walk-1"})
    assert [f["flow_id"] for f in by_trace["flows"]] == [started["flow_id"]]
    listed = conform("GET", admin_flows, 200, query={"trigger_type": "contract.walk", "state": "completed"})
    assert started["flow_id"] in [f["flow_id"] for f in listed["flows"]]

    pathways = "/admin/v1/reasoning/pathways"
    extraction = conform("POST", f"{pathways}/extract", 200, body=flow_id)
    pathway = {"pathway_id": extraction["pathway_id"]}
    assert conform("GET", f"{pathways}/{{pathway_id}}", 200, path_parameters=pathway)["hit_count"] == 0
    assert conform("POST", f"{pathways}/{{pathway_id}}/hit", 200, path_parameters=pathway)["hit_count"] == 1
    matched = conform("GET", f"{pathways}/match", 200, query={"trigger_type": "contract.walk", "trigger_ref": "walk/1"})
    assert matched["candidates"][0]["pathway"]["pathway_id"] == pathway["pathway_id"]
    conform("GET", f"{pathways}/stats", 200)
    second = conform("POST", flows, 201, body={**start, "trigger_ref": "walk/2"})
    conform("POST", f"{flow}/steps", 201, path_parameters={"flow_id": second["flow_id"]}, body=step)
    conform("PATCH", flow, 200, path_parameters={"flow_id": second["flow_id"]}, body=close)
    other = conform("POST", f"{pathways}/extract", 200, body={"flow_id": second["flow_id"]})["pathway_id"]
    compared = conform("POST", f"{pathways}/compare", 200, body={"pathway_ids": [pathway["pathway_id"], other]})
    assert (compared["first"]["pathway_id"], compared["second"]["pathway_id"]) == (pathway["pathway_id"], other)

    research = "/admin/v1/reasoning/research"
    deeper = {
        "idempotency_key": "contract-walk-1",
        "trigger_type": "contract.walk",
        "trigger_ref": "walk/1",
        "reason": "no_evidence_hits",
        "question_framing": "Find more evidence.",
    }
    queued = conform("POST", f"{research}/deeper-request", 201, body=deeper)
    assert conform("POST", f"{research}/deeper-request", 200, body=deeper)["request_id"] == queued["request_id"]
    pulled = conform("POST", f"{research}/backlog/next", 200, body={"trigger_type": "contract.walk"})
    request_id = {"request_id": pulled["request"]["request_id"]}
    assert request_id["request_id"] == queued["request_id"]
    done = conform("POST", f"{research}/backlog/{{request_id}}/complete", 200, path_parameters=request_id, body=flow_id)
    assert done["status"] == "completed"
    conform("POST", f"{research}/backlog/{{request_id}}/complete", 409, path_parameters=request_id, body=flow_id)
    conform("GET", f"{research}/backlog", 200)

    claims = "/admin/v1/reasoning/claims-pending-review"
    mark = {"claim_id": "claim-walk-1", "rejection_summary": "Contradicted by a newer study", **flow_id}
    assert conform("POST", claims, 201, body=mark)["status"] == "pending"
    conform("POST", claims, 200, body=mark)
    assert "claim-walk-1" in [c["claim_id"] for c in conform("GET", claims, 200)["pending"]]
    claim = {"claim_id": "claim-walk-1"}
    resolved = conform("PATCH", f"{claims}/{{claim_id}}", 200, path_parameters=claim, body={"resolution": "resolved"})
    assert resolved["status"] == "resolved"

    turn = conform(
        "POST",
        "/api/chat",
        200,
        body={"query": "How does the audit ledger work?"},
        headers={"Accept": "application/json"},
    )
    session, run = {"session_id": turn["session_id"]}, {"run_id": turn["run_id"]}
    assert (
        conform("GET", "/api/chat/sessions/{session_id}/runs", 200, path_parameters=session)["runs"][0]["run_id"]
        == run["run_id"]
    )
    assert conform("POST", "/api/chat/runs/{run_id}/cancel", 409, path_parameters=run)["error"] == "conflict"

    events = conform("GET", "/admin/v1/audit/events", 200, query={"subject": f"flow:{flow_id['flow_id']}"})
    assert events["events"]
    conform("GET", "/admin/v1/audit/events", 200, query={"limit": 5})
    assert server.cli("jobs", "run", "ledger_checkpoint", "--data-dir", str(server.data_dir.path)).returncode == 0
    assert len(conform("GET", "/admin/v1/audit/checkpoints/latest", 200)["root"]) == 64


def positive_data_accepted_or_refused_by_a_stated_rule(ctx: Any, response: Any, case: schemathesis.Case) -> None:
    """schemathesis's positive check, but a 422 that names a rule the operation states in ``x-server-rules``
    (one JSON Schema cannot express: a cursor this API issued, a step that is not its own parent) passes, and so
    does a 410 ``erased`` (a documented answer to data naming an erased patient)."""
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    says = server_rules(DOCUMENT["paths"][case.path].get(case.method.lower(), {}))  # probes send TRACE
    if response.status_code == 422 and positive and any(rule in response.text for rule in says):
        return
    if response.status_code == 410 and response.json().get("error") == "erased":
        return  # it names a patient the erasure route's own cases erased on this server: refused for good, rightly
    positive_data_acceptance(ctx, response, case)


def conforms(case: schemathesis.Case, response: Any, base_url: str, auth: GatewayAuth) -> None:
    """Every default check; the auth checks re-send the request without the caller's credentials."""
    case.validate_response(
        response,
        excluded_checks=[positive_data_acceptance],
        additional_checks=[positive_data_accepted_or_refused_by_a_stated_rule],
        transport_kwargs={"base_url": base_url, "auth": auth},
    )


@CONTRACT.parametrize()
# A rule stated as `not` (a document's scope, its upload kind) is met by filtering what is generated.
@hypothesis.settings(suppress_health_check=[hypothesis.HealthCheck.filter_too_much, hypothesis.HealthCheck.too_slow])
def test_every_operation_answers_as_documented(
    case: schemathesis.Case, server: Any, gateway_auth: GatewayAuth, sse_validators: dict[str, Draft202012Validator]
) -> None:
    response = case.call(base_url=server.base_url, auth=gateway_auth)
    conforms(case, response, server.base_url, gateway_auth)
    if response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        # schemathesis checks each event against the media type's schema; the payloads by type too:
        assert_sse_events_documented(response.text, sse_validators)


def test_sequences_of_operations_along_the_links_answer_as_documented(server: Any, gateway_auth: GatewayAuth) -> None:
    """The stateful phase: ids one response returns feed the next request (links schemathesis infers)."""
    base = CONTRACT.as_state_machine()

    class Workflow(base):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"base_url": server.base_url, "auth": gateway_auth}

        def validate_response(self, response: Any, case: schemathesis.Case, *args: Any, **kwargs: Any) -> None:
            conforms(case, response, server.base_url, gateway_auth)

    Workflow.run(
        settings=hypothesis.settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=SCHEMATHESIS["phases"]["stateful"]["max-steps"],  # type: ignore[index]
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(hypothesis.HealthCheck),
        )
    )


@CONTRACT.include(method="POST", path="/api/chat").parametrize()
def test_the_json_chat_variant_answers_as_documented(
    case: schemathesis.Case, server: Any, gateway_auth: GatewayAuth
) -> None:
    case.call_and_validate(
        base_url=server.base_url, auth=gateway_auth, headers={"Accept": "application/json"}, checks=CHECKS
    )
