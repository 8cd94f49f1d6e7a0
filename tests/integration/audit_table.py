"""The audit table: every action the package records, and every route and job that records nothing.

Each row says how to trigger an event through the deployed code (a route through the function that
serves it, with the API Gateway event AWS sends; a job through the jobs function; a producer the
research agents call in-process), which action it must record and how many times, and the subject
and actor the event must name. ``test_audit_actions.py`` drives every row on moto;
``test_access_matrix.py`` takes each route's request from the same rows and refuses it eight ways
through the local gateway.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import importlib.util
import itertools
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from moto import mock_aws

from flowledger import __version__
from flowledger.api.chat_app import REQUEST_CONTEXT_HEADER, create_app
from flowledger.api.openapi import openapi_document
from flowledger.api.registry import rest_routes
from flowledger.api.routes import RouteSpec, match_route, routes_of
from flowledger.api.tokens import VerifiedToken, authorizer_context
from flowledger.chat.runs import RunStore
from flowledger.config import Settings, load_settings
from flowledger.ids import new_id
from flowledger.ledger.events import AuditEvent
from flowledger.ledger.store import from_item
from flowledger.local import moto_kms_ed25519, moto_state, moto_transactions
from flowledger.local.devserver import EMBEDDED_CREDENTIALS
from flowledger.local.functions import LocalLambdaContext
from flowledger.otlp.ingest import flow_id_of
from flowledger.pathways.matcher import _CACHE
from flowledger.pathways.snapshot import _POINTERS
from flowledger.pathways.store import PathwayStore, pathway_id_for
from flowledger.reasoning.service import FlowService
from flowledger.research.producers import CriticVerdict, ResearchResult, on_critic_verdict, on_research_result
from flowledger.research.tickets import TicketQueue
from flowledger.services import Services, bootstrap
from flowledger.store.aws import AwsClients
from flowledger.store.paging import scan_items
from flowledger.store.provision import provision_all
from flowledger.subjects import subject_id_of
from tests.integration.provisioned import ProvisionedStates

ROOT = Path(__file__).resolve().parents[2]
REST_REQUEST = json.loads((ROOT / "tests" / "fixtures" / "events" / "rest_request.json").read_text())
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
# In every free text the rows store: a refused response must never carry it.
MARKER = "marigold"
Values = dict[str, Any]


# ---- callers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Client:
    """A bearer-token caller, as the authorizer hands it to the functions; ``user:<sub>`` in the ledger."""

    sub: str
    scopes: frozenset[str]
    patient_id: str | None = None

    @property
    def actor(self) -> str:
        return f"user:{self.sub}"

    def request_context(self) -> dict[str, str]:
        """The ``authorizer`` part of the request context, built as the authorizer and the local gateway build it."""
        return {"principalId": self.sub, **authorizer_context(VerifiedToken(self.sub, self.scopes, self.patient_id))}


@dataclass(frozen=True)
class Admin:
    """A SigV4-signed IAM principal: its ARN is the actor."""

    arn: str

    @property
    def actor(self) -> str:
        return self.arn


Caller = Client | Admin | None

WRITER = Client("agent-researcher", frozenset({"reasoning.write"}))
PATIENT = Client("u-ann", frozenset({"reasoning.read"}), "p-ann")
CHATTER = Client("alice", frozenset({"chat"}))
DOCUMENTER = Client("dora", frozenset({"documents"}))
ADMIN = Admin("arn:aws:sts::123456789012:assumed-role/operator/jane")
# Each client's counterpart: the same scopes, another user's (or patient's) resources.
ANOTHER = {
    WRITER: Client("agent-critic", frozenset({"reasoning.write"})),
    PATIENT: Client("u-bob", frozenset({"reasoning.read"}), "p-bob"),
    CHATTER: Client("bob", frozenset({"chat"})),
    DOCUMENTER: Client("dmitri", frozenset({"documents"})),
}


# ---- triggers --------------------------------------------------------------------------------------

Prepare = Callable[["Env"], Values]


def nothing(env: Env) -> Values:
    return {}


@dataclass(frozen=True, eq=False)
class Route:
    """A request to one route, through the function that serves it (or the chat app for /api/chat...).

    ``path``, ``body`` and ``query`` are templates: ``{name}`` is filled from what ``prepare`` made
    (a string that is exactly ``{name}`` takes the value as it is). ``other`` is the status the
    caller's counterpart gets on the same request (another user's or patient's resource), or None
    when the request names no resource of the caller.
    """

    method: str
    path: str
    caller: Caller
    prepare: Prepare = nothing
    body: Any = None
    query: Mapping[str, str] | None = None
    status: int = 200
    other: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    found: Callable[[Env, Values], Values] | None = None  # ids the request made that its answer does not name
    note: str = ""

    def __str__(self) -> str:
        return f"{self.method} {self.path}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True, eq=False)
class Job:
    """One run of a registered job through the jobs function (``{"job": NAME}``)."""

    name: str
    prepare: Prepare = nothing
    settings: Mapping[str, Any] = field(default_factory=dict)
    fails: bool = False
    note: str = ""

    def __str__(self) -> str:
        return f"job {self.name}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True, eq=False)
class Producer:
    """An in-process call that records: a producer of ``flowledger.research.loop`` the research agents
    call, or a one-off an operator runs from the CLI (the counters' recounts)."""

    name: str
    run: Prepare
    settings: Mapping[str, Any] = field(default_factory=dict)
    prepare: Prepare = nothing

    def __str__(self) -> str:
        return f"producer {self.name}"


Trigger = Route | Job | Producer


@dataclass(frozen=True)
class Row:
    """One action a trigger records ``count`` times, naming ``subject`` (a template) and ``actor``;
    ``action=None`` for a trigger that records nothing."""

    trigger: Trigger
    action: str | None
    subject: str = ""
    actor: str = ""
    count: int = 1

    @property
    def id(self) -> str:
        return f"{self.action or 'nothing'} <- {self.trigger}"


# ---- the deployment the rows run against ------------------------------------------------------------


class SharedClients(AwsClients):
    """One process's boto3 clients under another resource prefix: many deployments on one moto.

    Making the clients is most of what a fresh moto costs a test; tables of their own (by prefix)
    keep the deployments apart.
    """

    def __init__(self, settings: Settings, clients: AwsClients) -> None:
        super().__init__(settings)
        self._shared = clients

    @property
    def dynamodb(self) -> Any:
        return self._shared.dynamodb

    @property
    def s3(self) -> Any:
        return self._shared.s3

    @property
    def kms(self) -> Any:
        return self._shared.kms


@contextmanager
def one_moto() -> Iterator[AwsClients]:
    """moto in-process for a whole module, rolling transactions back as the dev server does, with no
    variable leaking in from the machine; yields the clients every deployment on it shares."""
    with pytest.MonkeyPatch.context() as environment:
        for info in Settings.model_fields.values():
            if info.validation_alias:
                environment.delenv(str(info.validation_alias), raising=False)
        moto_transactions.install()
        moto_kms_ed25519.install()  # the ledger's Ed25519 signing key
        with mock_aws():
            yield AwsClients(load_settings(), EMBEDDED_CREDENTIALS)


def deployment(clients: AwsClients, prefix: str, states: ProvisionedStates | None = None) -> Services:
    """A new deployment on the shared moto: every declared table, bucket and the data key, under ``prefix``.

    Given ``states``, the moto is emptied first and the deployment put back from the state ``provision_all``
    left the first time (about 1 ms instead of 100): for a module whose every test wants a deployment alone.
    """
    settings = load_settings(resource_prefix=prefix)
    services = Services(settings=settings, aws=SharedClients(settings, clients))
    if states is None:
        provision_all(services.aws, settings)
    else:
        moto_state.reset_state()
        states.provision(services)
    # A new deployment: no pathway snapshot, pointer or function bootstrap carries over.
    _CACHE.rankers.clear()
    _POINTERS.clear()
    bootstrap.cache_clear()
    return services


@cache
def chat_routes() -> tuple[RouteSpec, ...]:
    """The chat app's routes as the dev server mounts them (read from the OpenAPI document)."""
    paths = openapi_document(__version__)["paths"]
    return tuple(routes_of({p: item for p, item in paths.items() if p.startswith("/api/chat")}, function="chat"))


def every_route() -> tuple[RouteSpec, ...]:
    """Every route API Gateway exposes: the REST functions' and the chat app's."""
    return (*rest_routes(), *chat_routes())


def load_handler(function: str) -> Callable[[dict[str, Any], Any], Any]:
    """``functions/<name>/handler.py`` imported as Lambda imports it."""
    spec = importlib.util.spec_from_file_location(
        f"audit_table_{function}_handler", ROOT / "functions" / function / "handler.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handler: Callable[[dict[str, Any], Any], Any] = module.handler
    return handler


def api_gateway_event(
    method: str, path: str, caller: Caller, body: Any = None, query: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The REST proxy event API Gateway sends after its authorizer or IAM auth let the caller in."""
    event: dict[str, Any] = copy.deepcopy(REST_REQUEST)
    event.update(httpMethod=method, path=path)
    event["requestContext"].update(httpMethod=method, path=f"/v1{path}")
    if body is not None:
        event["body"] = json.dumps(body)
        event["headers"]["Content-Type"] = "application/json"
    if isinstance(caller, Client):
        event["requestContext"]["authorizer"] = caller.request_context()
    elif isinstance(caller, Admin):
        event["requestContext"]["identity"]["userArn"] = caller.arn
    if query:
        event["queryStringParameters"] = dict(query)
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    return event


class Env:
    """One deployment on moto, seen by every function of this process, with a clock the rows move."""

    def __init__(self, services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
        self.base = services
        self.services = services
        self.monkeypatch = monkeypatch
        self.now = T0
        self._ticks = itertools.count()
        self._handlers: dict[str, Callable[[dict[str, Any], Any], Any]] = {}
        services.clock = self.clock
        # The deployed handlers look their services up per call: they get this deployment's.
        monkeypatch.setattr("flowledger.api.app.bootstrap", lambda: self.services)
        monkeypatch.setattr("flowledger.jobs.bootstrap", lambda: self.services)

    def clock(self) -> datetime:
        # One millisecond per reading: times stay distinct and in order wherever a row sets the clock.
        return self.now + timedelta(milliseconds=next(self._ticks))

    def at(self, moment: datetime) -> None:
        self.now = moment

    def configure(self, settings: Mapping[str, Any]) -> None:
        """The services the functions use from now on: this deployment under these settings."""
        if not settings:
            self.services = self.base
            return
        configured = load_settings(resource_prefix=self.base.settings.resource_prefix, **settings)
        self.services = Services(settings=configured, aws=self.base.aws, clock=self.clock)

    def handler(self, function: str) -> Callable[[dict[str, Any], Any], Any]:
        """One warm handler per function: powertools binds a capability's routers to the resolver built last."""
        if function not in self._handlers:
            self._handlers[function] = load_handler(function)
        return self._handlers[function]

    def call(
        self, method: str, path: str, caller: Caller, body: Any = None, query: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        """A request to the function that serves the route (the chat app for the chat routes)."""
        if match_route(chat_routes(), method, path)[0] is not None:
            return asyncio.run(self._chat(method, path, caller, body))
        route, _ = match_route(rest_routes(), method, path)
        assert route is not None, f"no route {method} {path}"
        event = api_gateway_event(method, path, caller, body, query)
        response = self.handler(route.function)(event, LocalLambdaContext(route.function, "req"))
        return response["statusCode"], json.loads(response["body"])

    async def _chat(self, method: str, path: str, caller: Caller, body: Any) -> tuple[int, Any]:
        # Lambda Web Adapter hands the chat app API Gateway's request context in one header.
        context: dict[str, Any] = {"requestId": new_id("req_")}
        if isinstance(caller, Client):
            context["authorizer"] = caller.request_context()
        app = create_app(lambda: self.services)
        headers = {"accept": "application/json", REQUEST_CONTEXT_HEADER: json.dumps(context)}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://chat.test") as client:
            response = await client.request(method, path, json=body, headers=headers)
        return response.status_code, response.json()

    def job(self, name: str) -> Any:
        return self.handler("jobs")({"job": name}, LocalLambdaContext("jobs", "req"))

    def events(self) -> list[AuditEvent]:
        """Every event of every chain, read from the ledger table in chain order: one scan, where reading each
        chain took a query per shard (a third of the table's time)."""
        aws = self.base.aws
        scanned = scan_items(aws.dynamodb, {"TableName": aws.table_name("ledger"), "ConsistentRead": True})
        return sorted((from_item(item) for item in scanned), key=lambda event: (event.chain_id, event.seq))

    def run(self, trigger: Trigger, values: Values) -> Values:
        """Fire the trigger; the values its subject templates may name (what was prepared, and its answer's ids)."""
        self.configure(trigger.settings)
        try:
            if isinstance(trigger, Route):
                method, path, body, query = request_of(trigger, values)
                status, answer = self.call(method, path, trigger.caller, body, query)
                assert status == trigger.status, answer
                scalars = (
                    {k: v for k, v in answer.items() if isinstance(v, str | int)} if isinstance(answer, dict) else {}
                )
                values = {**scalars, **values}
                return {**values, **trigger.found(self, values)} if trigger.found else values
            if isinstance(trigger, Job):
                if trigger.fails:
                    with pytest.raises(RuntimeError):
                        self.job(trigger.name)
                else:
                    self.job(trigger.name)
                return values
            return {**values, **trigger.run(self)}
        finally:
            self.configure({})


def fill(template: Any, values: Values) -> Any:
    """The template with ``{name}`` filled from the values, in every string of it."""
    if isinstance(template, str):
        name = template[1:-1]
        if template == f"{{{name}}}" and name in values:
            return values[name]
        return template.format(**values)
    if isinstance(template, dict):
        return {k: fill(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, values) for v in template]
    return template


def request_of(route: Route, values: Values) -> tuple[str, str, Any, dict[str, str] | None]:
    """The concrete request: method, path, body and query with the prepared values filled in."""
    query = {k: str(fill(v, values)) for k, v in route.query.items()} if route.query else None
    return route.method, route.path.format(**values), fill(route.body, values), query


# ---- what the triggers need to exist first ----------------------------------------------------------

STEPS = (
    ("retrieval", "researcher", f"Retrieved {MARKER} guideline passages", 0.95),
    ("llm_prompt", "researcher", "Drafted an answer from the passages", 0.93),
    ("verdict", "critic", "Critic found the claim well supported", 0.97),
)
FLOW_START = {
    "trigger_type": "user_question",
    "trigger_ref": "chat/run-1",
    "trigger_summary": f"Question about a {MARKER} lab trend",
    "patient_id": "p-ann",
}
STEP = {"step_kind": "retrieval", "agent": "researcher", "summary_text": f"Read {MARKER} notes", "confidence": 0.95}
COMPLETED = {
    "state": "completed",
    "outcome": {"type": "recommendation_delivered", "summary": "Recommended a follow-up test", "confidence": 0.94},
}
ABORTED = {**COMPLETED, "state": "aborted", "reason": "user_left"}
DEEPER = {
    "idempotency_key": "key-{key}",
    "trigger_type": "user_question",
    "trigger_ref": "ref/{key}",
    "reason": "weak_composite_k",
    "question_framing": f"Find stronger {MARKER} evidence for the claim.",
}
CLAIM = {"claim_id": "claim-42", "rejection_summary": f"Critic found no {MARKER} support"}


def open_flow(env: Env, **start: str) -> str:
    status, body = env.call("POST", "/api/reasoning/flows", WRITER, {**FLOW_START, **start})
    assert status == 201, body
    return str(body["flow_id"])


def active_flow(env: Env) -> Values:
    """An open flow of WRITER's with three confident steps, the first holding a sealed PII field."""
    flow_id = open_flow(env)
    for n, (kind, agent, summary, confidence) in enumerate(STEPS):
        step: dict[str, Any] = {"step_kind": kind, "agent": agent, "summary_text": summary, "confidence": confidence}
        if n == 0:
            step |= {"inputs": {"query": f"{MARKER} history"}, "pii_fields": {"inputs": ["query"]}}
        status, body = env.call("POST", f"/api/reasoning/flows/{flow_id}/steps", WRITER, step)
        assert status == 201, body
    return {"flow_id": flow_id, "pathway_id": pathway_id_for(flow_id)}


def closed_flow(env: Env) -> Values:
    """A completed flow that qualified, so its close extracted its pathway."""
    values = active_flow(env)
    status, body = env.call("PATCH", f"/api/reasoning/flows/{values['flow_id']}", WRITER, COMPLETED)
    assert status == 200, body
    return {**values, "trigger_type": FLOW_START["trigger_type"], "trigger_ref": FLOW_START["trigger_ref"]}


def sealed_step(env: Env) -> Values:
    """A closed flow and its first step, whose input ``query`` is sealed."""
    values = closed_flow(env)
    status, page = env.call("GET", f"/admin/v1/reasoning/flows/{values['flow_id']}/steps", ADMIN, query={"limit": "1"})
    assert status == 200, page
    return {**values, "step_id": page["steps"][0]["step_id"]}


def readable_flow(env: Env) -> Values:
    """A closed flow about p-ann, who opted in (and so did p-bob, so only ownership can refuse him)."""
    values = closed_flow(env)
    for patient in (PATIENT, ANOTHER[PATIENT]):
        status, body = env.call("PUT", "/api/reasoning/consent", patient, {"reasoning_read": True})
        assert status == 200, body
    return values


def unextracted_flow(env: Env) -> Values:
    """A flow that qualifies but has no pathway (its pathway item is gone), so an extraction makes one."""
    values = closed_flow(env)
    env.services.aws.dynamodb.delete_item(
        TableName=PathwayStore.of(env.services).table, Key={"pathway_id": {"S": values["pathway_id"]}}
    )
    return values


def two_pathways(env: Env) -> Values:
    return {"first": closed_flow(env)["pathway_id"], "second": closed_flow(env)["pathway_id"]}


def traced_flow(env: Env) -> Values:
    return {"trace_id": f"trace-{MARKER}", "flow_id": open_flow(env, trace_id=f"trace-{MARKER}")}


def stale_flow(env: Env) -> Values:
    env.at(T0 - timedelta(hours=25))
    flow_id = open_flow(env)
    env.at(T0)
    return {"flow_id": flow_id}


def cold_pathway(env: Env) -> Values:
    env.at(T0 - timedelta(days=31))
    values = closed_flow(env)
    env.at(T0)
    return values


def failing_pathway_scan(env: Env) -> Values:
    closed_flow(env)

    def scan(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the pathways table is unavailable")

    env.monkeypatch.setattr(PathwayStore, "scan", scan)
    return {}


def enqueue(env: Env, name: str, **fields: str) -> str:
    """A new pending row (its idempotency key is unique, so the route creates it)."""
    key = f"{name}-{new_id('')}"
    status, body = env.call(
        "POST", "/admin/v1/reasoning/research/deeper-request", ADMIN, {**fill(DEEPER, {"key": key}), **fields}
    )
    assert status == 201, body
    return str(body["request_id"])


def pull(env: Env, **only: str) -> str:
    status, body = env.call("POST", "/admin/v1/reasoning/research/backlog/next", ADMIN, only)
    assert status == 200 and body["request"], body
    return str(body["request"]["request_id"])


def queued_key(env: Env) -> Values:
    key = f"queued-{new_id('')}"
    status, body = env.call("POST", "/admin/v1/reasoning/research/deeper-request", ADMIN, fill(DEEPER, {"key": key}))
    assert status == 201, body
    return {"key": key}


def pending_row(env: Env) -> Values:
    return {"request_id": enqueue(env, "pending")}


def dispatched_row(env: Env) -> Values:
    # A trigger type of its own: whatever else is pending, this pull takes this row.
    request_id = enqueue(env, "dispatched", trigger_type="dispatched")
    assert pull(env, trigger_type="dispatched") == request_id
    return {"request_id": request_id}


def stale_dispatched_row(env: Env) -> Values:
    values = dispatched_row(env)
    env.at(T0 + timedelta(minutes=31))
    return values


def retried_out_row(env: Env) -> Values:
    """A row dispatched and recovered three times (the retries), then dispatched and left again."""
    request_id = enqueue(env, "retried")
    for attempt in range(4):
        env.at(T0 + timedelta(hours=attempt))
        assert pull(env) == request_id
        env.at(T0 + timedelta(hours=attempt, minutes=31))
        if attempt < 3:
            env.job("backlog_stale_sweep")
    return {"request_id": request_id}


def stranded_row(env: Env) -> Values:
    """A pending row whose ticket a consumer took and then died before dispatching it."""
    request_id = enqueue(env, "stranded")
    assert TicketQueue(env.services.aws.dynamodb, env.services.aws.table_name("backlog_tickets")).take() == 1
    env.at(T0 + timedelta(minutes=31))
    return {"request_id": request_id}


def rejected_claim_row(env: Env) -> Values:
    return {"request_id": enqueue(env, "rejected", reason="claim_rejected", trigger_ref="claim-7")}


def misreferenced_claim_row(env: Env) -> Values:
    """A rejected claim whose reference is no claim id (the critic's ``claim/42`` form): it fails alone."""
    return {"request_id": enqueue(env, "misreferenced", reason="claim_rejected", trigger_ref="claim/42")}


def undecodable_stale_row(env: Env) -> Values:
    """A stale dispatched row whose retry count no longer reads as a number: the sweep cannot move it."""
    values = stale_dispatched_row(env)
    env.services.aws.dynamodb.update_item(
        TableName=env.services.aws.table_name("backlog"),
        Key={"request_id": {"S": values["request_id"]}},
        UpdateExpression="SET retry_count = :r",
        ExpressionAttributeValues={":r": {"S": "three"}},
    )
    return values


def other_strategy_row(env: Env) -> Values:
    """A rejected claim queued under ``re_research``, which a ``mark_for_review`` consumer leaves alone."""
    env.configure({"critic_auto_enqueue_enabled": True, "critic_dispatch_strategy": "re_research"})
    row = on_critic_verdict(env.services, CriticVerdict("claim-8", "reject", "No support found", "claim_review"))
    env.configure({})
    assert row is not None
    return {"request_id": row.request_id}


def claim(env: Env) -> Values:
    claim_id = new_id("claim-")
    status, body = env.call("POST", "/admin/v1/reasoning/claims-pending-review", ADMIN, {**CLAIM, "claim_id": claim_id})
    assert status == 201, body
    return {"claim_id": claim_id}


def audited_flow(env: Env) -> Values:
    return {"subject": f"flow:{open_flow(env)}"}


def checkpointed(env: Env) -> Values:
    flow_id = open_flow(env)
    env.job("ledger_checkpoint")
    return {"subject": f"flow:{flow_id}"}


def chat_session(env: Env) -> Values:
    """A session of alice's with one RUNNING run."""
    session_id, run_id = new_id("ses_"), new_id("run_")
    RunStore(env.services).create(session_id, run_id, CHATTER.sub, f"A {MARKER} question", "offline", True)
    return {"session_id": session_id, "run_id": run_id}


def flow_of_session(env: Env, values: Values) -> Values:
    """The flow a recorded chat turn opened: its trace is the session."""
    page = FlowService(env.base).flows_by_trace(values["session_id"], 10, None)
    assert len(page.flows) == 1, page
    return {"flow_id": page.flows[0].flow_id}


def weak_research_result(env: Env) -> Values:
    row = on_research_result(env.services, ResearchResult("user_question", "chat/run-9", "Which dose?", 0, 0.0))
    assert row is not None
    return {"request_id": row.request_id}


def backlog_recount(env: Env) -> Values:
    from flowledger.research.backlog_stats import BacklogStats

    BacklogStats(env.services).recount("cli:operator")
    return {}


def pathway_recount(env: Env) -> Values:
    from flowledger.pathways.stats import PathwayStats

    PathwayStats(env.services).recount("cli:operator")
    return {}


def rejected_verdict(env: Env) -> Values:
    row = on_critic_verdict(env.services, CriticVerdict("claim-9", "reject", "No support found", "claim_review"))
    assert row is not None
    return {"request_id": row.request_id}


def group_workspace(env: Env) -> Values:
    """A group workspace of dora's (the counterpart is no member of it), and a user to add."""
    status, body = env.call("POST", "/api/workspaces", DOCUMENTER, {"kind": "group", "name": f"{MARKER} team"})
    assert status == 201, body
    return {"workspace_id": body["workspace_id"], "user_id": "carol"}


def workspace_with_member(env: Env) -> Values:
    values = group_workspace(env)
    status, body = env.call(
        "PUT", "/api/workspaces/{workspace_id}/members/{user_id}".format(**values), DOCUMENTER, {"role": "viewer"}
    )
    assert status == 200, body
    return values


def hidden_public_workspace(env: Env) -> Values:
    """A public workspace of dora's that is not visible yet (so the counterpart cannot read it)."""
    status, body = env.call(
        "POST", "/api/workspaces", DOCUMENTER, {"kind": "public", "name": f"{MARKER} library", "visible": False}
    )
    assert status == 201, body
    return {"workspace_id": body["workspace_id"]}


NOTES = {
    "file_name": "notes.md",
    "kind": "markdown",
    "content_base64": base64.b64encode(f"# {MARKER} notes".encode()).decode(),
}


def stored_document(env: Env) -> Values:
    """A Markdown document of dora's, indexed in her group workspace."""
    values = group_workspace(env)
    status, body = env.call("POST", "/api/documents", DOCUMENTER, {**NOTES, "workspace_id": values["workspace_id"]})
    assert status == 201, body
    return {**values, "document_id": body["document"]["document_id"]}


def uploaded_version(env: Env) -> Values:
    """A presigned first version whose body was PUT to S3 (as the client does with the URL)."""
    values = group_workspace(env)
    text = f"# {MARKER} large notes".encode()
    declared = {"size_bytes": len(text), "sha256": hashlib.sha256(text).hexdigest()}
    status, body = env.call(
        "POST",
        "/api/documents",
        DOCUMENTER,
        {"file_name": "big.md", "kind": "markdown", "workspace_id": values["workspace_id"], **declared},
    )
    assert status == 201 and body["upload"], body
    document_id = body["document"]["document_id"]
    aws = env.services.aws
    aws.s3.put_object(Bucket=aws.bucket_name("documents"), Key=f"files/{document_id}/v1/original", Body=text)
    return {**values, "document_id": document_id, "version": 1}


def document_of_workspace(env: Env, values: Values) -> Values:
    status, page = env.call("GET", "/api/documents", DOCUMENTER, query={"workspace_id": values["workspace_id"]})
    assert status == 200 and len(page["documents"]) == 1, page
    return {"document_id": page["documents"][0]["document_id"]}


# ---- the table ----------------------------------------------------------------------------------------

W, P, A, D = WRITER.actor, PATIENT.actor, ADMIN.actor, DOCUMENTER.actor

START = Route("POST", "/api/reasoning/flows", WRITER, body=FLOW_START, status=201)
STEP_ROUTE = Route("POST", "/api/reasoning/flows/{flow_id}/steps", WRITER, active_flow, STEP, status=201, other=403)
STEP_BATCH = Route(
    "POST",
    "/api/reasoning/flows/{flow_id}/steps:batch",
    WRITER,
    active_flow,
    {
        "steps": [
            {**STEP, "step_id": "st_01JZ0000000000000000000001"},
            {**STEP, "step_id": "st_01JZ0000000000000000000002"},
        ]
    },
    status=201,
    other=403,
)
# OTLP/JSON as an exporter sends it: one trace of an agent span and its model call.
OTLP_TRACE_ID = "5b8efff798038103d269b633813fc60c"
OTLP_SPANS = {
    "resourceSpans": [
        {
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "audited-agent"}}]},
            "scopeSpans": [
                {
                    "spans": [
                        {
                            "traceId": OTLP_TRACE_ID,
                            "spanId": "eee19b7ec3c1b174",
                            "name": "invoke_agent triage",
                            "startTimeUnixNano": "1700000000000000000",
                            "endTimeUnixNano": "1700000001000000000",
                            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}}],
                        },
                        {
                            "traceId": OTLP_TRACE_ID,
                            "spanId": "eee19b7ec3c1b175",
                            "parentSpanId": "eee19b7ec3c1b174",
                            "name": "chat m",
                            "startTimeUnixNano": "1700000000100000000",
                            "endTimeUnixNano": "1700000000900000000",
                            "attributes": [
                                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                                {"key": "gen_ai.input.messages", "value": {"stringValue": f"{MARKER} question"}},
                            ],
                        },
                    ]
                }
            ],
        }
    ]
}
OTLP = Route(
    "POST",
    "/api/otlp/v1/traces",
    WRITER,
    body=OTLP_SPANS,
    found=lambda env, values: {"flow_id": flow_id_of(OTLP_TRACE_ID)},
    note="OTLP/JSON",
)


def otlp_spans(trace_id: str) -> dict[str, Any]:
    """The OTLP trace under another trace id: a flow of its own where rows share a store (the access matrix)."""
    return json.loads(json.dumps(OTLP_SPANS).replace(OTLP_TRACE_ID, trace_id))


def otlp_flow(env: Env, path: str = "/api/otlp/v1/traces", caller: Caller = WRITER) -> Values:
    """A new OTLP trace written as the caller's flow."""
    trace_id = uuid.uuid4().hex
    status, body = env.call("POST", path, caller, otlp_spans(trace_id))
    assert status == 200 and body == {}, body
    return {"flow_id": flow_id_of(trace_id), "trace_id": trace_id}


def waiting_span(env: Env) -> Values:
    """The trace's model call without its agent span, sent long enough ago that its wait is over."""
    env.at(T0 - timedelta(seconds=env.services.settings.otlp_parent_wait_seconds))
    child = copy.deepcopy(OTLP_SPANS)
    del child["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    status, body = env.call("POST", "/api/otlp/v1/traces", WRITER, child)
    assert status == 200 and body == {}, body
    env.at(T0)
    return {"flow_id": flow_id_of(OTLP_TRACE_ID)}


OTLP_EVALUATION = {
    "resourceLogs": [
        {
            "scopeLogs": [
                {
                    "logRecords": [
                        {
                            "traceId": "{trace_id}",
                            "spanId": "eee19b7ec3c1b175",
                            "eventName": "gen_ai.evaluation.result",
                            "attributes": [
                                {"key": "gen_ai.evaluation.name", "value": {"stringValue": "relevance"}},
                                {"key": "gen_ai.evaluation.score.value", "value": {"doubleValue": 0.5}},
                                {"key": "gen_ai.evaluation.explanation", "value": {"stringValue": f"{MARKER} why"}},
                            ],
                        }
                    ]
                }
            ]
        }
    ]
}
OTLP_LOGS = Route("POST", "/api/otlp/v1/logs", WRITER, otlp_flow, OTLP_EVALUATION, note="an evaluation event")
OTLP_RELEASE = Job("otlp_release", waiting_span, note="a span whose parent never came")


def signed_otlp_flow(env: Env) -> Values:
    """A new OTLP trace written as the admin's flow, through the signed route."""
    return otlp_flow(env, "/admin/v1/otlp/v1/traces", ADMIN)


OTLP_SIGNED_TRACE_ID = "6c9f0008a9149214e37ac744924fd71d"
OTLP_SIGNED = Route(
    "POST",
    "/admin/v1/otlp/v1/traces",
    ADMIN,
    body=otlp_spans(OTLP_SIGNED_TRACE_ID),
    found=lambda env, values: {"flow_id": flow_id_of(OTLP_SIGNED_TRACE_ID)},
    note="SigV4",
)
OTLP_LOGS_SIGNED = Route("POST", "/admin/v1/otlp/v1/logs", ADMIN, signed_otlp_flow, OTLP_EVALUATION, note="SigV4")
CLOSE = Route("PATCH", "/api/reasoning/flows/{flow_id}", WRITER, active_flow, COMPLETED, note="qualifies", other=403)
ABORT = Route("PATCH", "/api/reasoning/flows/{flow_id}", WRITER, active_flow, ABORTED, note="aborted")
NARRATIVE = Route("GET", "/api/reasoning/flows/{flow_id}", PATIENT, readable_flow, other=403)
MY_FLOWS = Route("GET", "/api/reasoning/flows", PATIENT, readable_flow, note="the patient's own list")
CONSENT = Route("PUT", "/api/reasoning/consent", PATIENT, body={"reasoning_read": True})
CONSENT_READ = Route("GET", "/api/reasoning/consent", PATIENT, note="the patient's own choice")
ADMIN_FLOW = Route("GET", "/admin/v1/reasoning/flows/{flow_id}", ADMIN, closed_flow)


def ann_with_a_flow(env: Env) -> Values:
    """Patient p-ann's closed flow (it seeded a pathway), and her subject id."""
    return {**closed_flow(env), **ann(env)}


def ann(env: Env) -> Values:
    """Patient p-ann, by id and by subject id."""
    return patient("p-ann")


def patient(patient_id: str) -> Values:
    return {"patient_id": patient_id, "subject_id": subject_id_of(patient_id)}


def cara(env: Env) -> Values:
    """A patient of her own for the hold rows: the access matrix's one deployment erases p-ann."""
    return patient("p-cara")


def dan_on_hold(env: Env) -> Values:
    status, body = env.call("PUT", "/admin/v1/subjects/p-dan/hold", ADMIN, {"reason": "Litigation hold"})
    assert status == 200, body
    return patient("p-dan")


SUBJECT = "/admin/v1/subjects/{patient_id}"
SUBJECT_READ = Route("GET", SUBJECT, ADMIN, ann_with_a_flow, note="what is held")
ERASURE = Route("POST", SUBJECT + "/erasure", ADMIN, ann_with_a_flow, {"reason": "gdpr_art17_request"})
HOLD = Route("PUT", SUBJECT + "/hold", ADMIN, cara, {"reason": "Litigation hold"})
HOLD_LIFT = Route("DELETE", SUBJECT + "/hold", ADMIN, dan_on_hold)
STEPS_PAGE = Route("GET", "/admin/v1/reasoning/flows/{flow_id}/steps", ADMIN, closed_flow, query={"limit": "2"})
SEALED_FIELD = Route(
    "GET",
    "/admin/v1/reasoning/flows/{flow_id}/steps/{step_id}/sealed",
    ADMIN,
    sealed_step,
    query={"side": "inputs", "field": "query"},
)
TRACE = Route("GET", "/admin/v1/reasoning/flows", ADMIN, traced_flow, query={"trace_id": "{trace_id}"})
FLOWS_LIST = Route("GET", "/admin/v1/reasoning/flows", ADMIN, closed_flow, query={"state": "completed"}, note="list")
ENQUEUE = Route(
    "POST", "/admin/v1/reasoning/research/deeper-request", ADMIN, body=fill(DEEPER, {"key": "new-0001"}), status=201
)
ENQUEUE_AGAIN = Route(
    "POST", "/admin/v1/reasoning/research/deeper-request", ADMIN, queued_key, DEEPER, note="same key again"
)
PULL = Route("POST", "/admin/v1/reasoning/research/backlog/next", ADMIN, pending_row, {})
PULL_EMPTY = Route("POST", "/admin/v1/reasoning/research/backlog/next", ADMIN, body={}, note="nothing pending")
COMPLETE = Route(
    "POST",
    "/admin/v1/reasoning/research/backlog/{request_id}/complete",
    ADMIN,
    dispatched_row,
    {"flow_id": "fl_01JD0000000000000000000000"},
)
FAIL = Route(
    "POST",
    "/admin/v1/reasoning/research/backlog/{request_id}/complete",
    ADMIN,
    dispatched_row,
    {"error": "engine_gave_up"},
    note="error",
)
BACKLOG = Route("GET", "/admin/v1/reasoning/research/backlog", ADMIN)
MARK = Route("POST", "/admin/v1/reasoning/claims-pending-review", ADMIN, body=CLAIM, status=201)
MARK_AGAIN = Route(
    "POST",
    "/admin/v1/reasoning/claims-pending-review",
    ADMIN,
    claim,
    {**CLAIM, "claim_id": "{claim_id}"},
    note="marked already",
)
CLAIMS = Route("GET", "/admin/v1/reasoning/claims-pending-review", ADMIN, claim)
RESOLVE = Route(
    "PATCH", "/admin/v1/reasoning/claims-pending-review/{claim_id}", ADMIN, claim, {"resolution": "dismissed"}
)
MATCH = Route(
    "GET",
    "/admin/v1/reasoning/pathways/match",
    ADMIN,
    closed_flow,
    query={"trigger_type": "{trigger_type}", "trigger_ref": "{trigger_ref}"},
)
HIT = Route("POST", "/admin/v1/reasoning/pathways/{pathway_id}/hit", ADMIN, closed_flow)
STATS = Route("GET", "/admin/v1/reasoning/pathways/stats", ADMIN, closed_flow)
COMPARE = Route(
    "POST", "/admin/v1/reasoning/pathways/compare", ADMIN, two_pathways, {"pathway_ids": ["{first}", "{second}"]}
)
EXTRACT = Route(
    "POST", "/admin/v1/reasoning/pathways/extract", ADMIN, unextracted_flow, {"flow_id": "{flow_id}"}, status=201
)
EXTRACT_AGAIN = Route(
    "POST", "/admin/v1/reasoning/pathways/extract", ADMIN, closed_flow, {"flow_id": "{flow_id}"}, note="exists"
)
PATHWAY = Route("GET", "/admin/v1/reasoning/pathways/{pathway_id}", ADMIN, closed_flow)
PATHWAYS = Route("GET", "/admin/v1/pathways", ADMIN, closed_flow, query={"trigger_type": "{trigger_type}"})
EVENTS = Route("GET", "/admin/v1/audit/events", ADMIN, audited_flow, query={"subject": "{subject}"})
CHECKPOINT = Route("GET", "/admin/v1/audit/checkpoints/latest", ADMIN, checkpointed)
CHECKPOINT_NOTE = Route("GET", "/admin/v1/audit/checkpoints/latest/note", ADMIN, checkpointed)
BUNDLE = Route("GET", "/admin/v1/audit/bundles", ADMIN, checkpointed, query={"subject": "{subject}"})
LEDGER_KEY = Route("GET", "/.well-known/flowledger/ledger-key", None)
HEALTH = Route("GET", "/health", None)
ME = Route("GET", "/api/me", PATIENT)
ADMIN_ME = Route("GET", "/admin/v1/me", ADMIN)
CHAT = Route("POST", "/api/chat", CHATTER, chat_session, {"query": "hello", "session_id": "{session_id}"}, other=403)
RECORDED_CHAT = Route(
    "POST",
    "/api/chat",
    CHATTER,
    chat_session,
    {"query": "hello", "session_id": "{session_id}"},
    settings={"reasoning_flow_capture_enabled": True},
    found=flow_of_session,
    note="REASONING_FLOW_CAPTURE_ENABLED",
)
SESSIONS = Route("GET", "/api/chat/sessions", CHATTER, chat_session)  # names no session: each caller sees their own
RUNS = Route("GET", "/api/chat/sessions/{session_id}/runs", CHATTER, chat_session, other=404)
CANCEL = Route("POST", "/api/chat/runs/{run_id}/cancel", CHATTER, chat_session, other=404)
WORKSPACE = "/api/workspaces/{workspace_id}"
WS_CREATE = Route("POST", "/api/workspaces", DOCUMENTER, body={"kind": "group", "name": f"{MARKER} team"}, status=201)
WS_LIST = Route("GET", "/api/workspaces", DOCUMENTER, group_workspace)
WS_GET = Route("GET", WORKSPACE, DOCUMENTER, group_workspace, other=404)
WS_MEMBER = Route("PUT", WORKSPACE + "/members/{user_id}", DOCUMENTER, group_workspace, {"role": "editor"}, other=404)
WS_REVOKE = Route("DELETE", WORKSPACE + "/members/{user_id}", DOCUMENTER, workspace_with_member, other=404)
WS_VISIBILITY = Route(
    "PATCH", WORKSPACE, DOCUMENTER, hidden_public_workspace, {"visible": True, "listed": True}, other=404
)
DOCUMENT = "/api/documents/{document_id}"
DOC_CREATE = Route(
    "POST",
    "/api/documents",
    DOCUMENTER,
    group_workspace,
    {**NOTES, "workspace_id": "{workspace_id}"},
    status=201,
    other=404,
    found=document_of_workspace,
)
DOC_LIST = Route(
    "GET", "/api/documents", DOCUMENTER, stored_document, query={"workspace_id": "{workspace_id}"}, other=404
)
DOC_GET = Route("GET", DOCUMENT, DOCUMENTER, stored_document, other=404)
DOC_VERSIONS = Route("GET", DOCUMENT + "/versions", DOCUMENTER, stored_document, other=404)
DOC_REPLACE = Route(
    "POST",
    DOCUMENT + "/versions",
    DOCUMENTER,
    stored_document,
    {**NOTES, "file_name": "notes-2.md"},
    status=201,
    other=404,
)
DOC_COMPLETE = Route("POST", DOCUMENT + "/versions/{version}/complete", DOCUMENTER, uploaded_version, other=404)
DOC_DELETE = Route("DELETE", DOCUMENT, DOCUMENTER, stored_document, other=404)

DECAY_FLOWS = Job("flow_decay", stale_flow)


def erasure_left_running(env: Env) -> Values:
    """Ann's erasure begun through the route's machine and left in its flows phase (its request ran out of time)."""
    from flowledger.identity import Principal
    from flowledger.subjects.erasure import SubjectErasure

    values = ann_with_a_flow(env)
    view = SubjectErasure(env.services).erase(Principal(kind="iam", id=ADMIN.arn), "p-ann", "gdpr_art17_request", 0.0)
    assert view.phase == "flows", view
    return values


RESUME = Job("subject_erasure_resume", erasure_left_running, note="an erasure left running")
RESUME_NONE = Job("subject_erasure_resume", note="none running")
RETENTION_OFF = Job("subject_retention", cold_pathway, note="no policy set")
RETENTION = Job("subject_retention", cold_pathway, {"retention_flows_days": 30}, note="flows after 30 days")
SWEEP = Job("backlog_stale_sweep", stale_dispatched_row, note="dispatched 31 min ago")
SWEEP_RETRIED = Job("backlog_stale_sweep", retried_out_row, note="after the retries")
SWEEP_STRANDED = Job("backlog_stale_sweep", stranded_row, note="ticket taken, never dispatched")
SWEEP_UNDECODABLE = Job("backlog_stale_sweep", undecodable_stale_row, note="a row it cannot read")
CONSUME_OFF = Job("backlog_consumer", pending_row, note="BACKLOG_CONSUMER_ENABLED off")
CONSUMING = {"backlog_consumer_enabled": True}
CONSUME = Job("backlog_consumer", pending_row, CONSUMING, note="the research agents")
CONSUME_CLAIM = Job("backlog_consumer", rejected_claim_row, CONSUMING, note="rejected claim, mark_for_review")
CONSUME_OTHER = Job("backlog_consumer", other_strategy_row, CONSUMING, note="row of the other strategy")
CONSUME_INVALID = Job("backlog_consumer", misreferenced_claim_row, CONSUMING, note="ref no claim id")
BACKFILL = Job("pathway_embedding_backfill", closed_flow)
BACKFILL_FAILS = Job("pathway_embedding_backfill", failing_pathway_scan, fails=True, note="fails")
DECAY_PATHWAYS = Job("pathway_decay", cold_pathway)
DECAY_PATHWAYS_FAILS = Job("pathway_decay", failing_pathway_scan, fails=True, note="fails")
RESEARCHER = Producer("on_research_result", weak_research_result, {"research_auto_enqueue_enabled": True})
CRITIC = Producer("on_critic_verdict", rejected_verdict, {"critic_auto_enqueue_enabled": True})
BACKLOG_RECOUNT = Producer("BacklogStats.recount", backlog_recount, prepare=pending_row)
PATHWAY_RECOUNT = Producer("PathwayStats.recount", pathway_recount)

FLOW, BACKLOG_ROW, PATHWAY_ID = "flow:{flow_id}", "backlog:{request_id}", "pathway:{pathway_id}"
ANN = "patient:{ann}"
SUBJECT_ID = "subject:{subject_id}"  # the ledger names patient p-ann by her pseudonym (subjects/keys.py), never her id
CHAT_RECORDER = "user:service:chat"
CONSUMER, SWEEPER = "system:backlog_consumer", "system:backlog_stale_sweep"
BACKFILLER, PATHWAY_DECAY = "system:pathway_embedding_backfill", "system:pathway_decay"

ROWS: list[Row] = [
    # client routes (actor user:<sub>)
    Row(START, "reasoning.flow.started", FLOW, W),
    Row(STEP_ROUTE, "reasoning.step.created", FLOW, W),
    Row(STEP_BATCH, "reasoning.step.created", FLOW, W, count=2),
    Row(OTLP, "reasoning.flow.started", FLOW, W),
    Row(OTLP, "reasoning.step.created", FLOW, W, count=2),
    Row(OTLP, "reasoning.otlp.received", FLOW, W),
    Row(OTLP_LOGS, "reasoning.step.created", FLOW, W),
    Row(OTLP_LOGS, "reasoning.otlp.received", FLOW, W),
    Row(OTLP_RELEASE, "reasoning.step.created", FLOW, W),
    Row(OTLP_SIGNED, "reasoning.flow.started", FLOW, A),
    Row(OTLP_SIGNED, "reasoning.step.created", FLOW, A, count=2),
    Row(OTLP_SIGNED, "reasoning.otlp.received", FLOW, A),
    Row(OTLP_LOGS_SIGNED, "reasoning.step.created", FLOW, A),
    Row(OTLP_LOGS_SIGNED, "reasoning.otlp.received", FLOW, A),
    Row(CLOSE, "reasoning.flow.completed", FLOW, W),
    Row(CLOSE, "reasoning.pathway.extracted", PATHWAY_ID, W),
    Row(ABORT, "reasoning.flow.aborted", FLOW, W),
    Row(ABORT, "reasoning.pathway.skipped", FLOW, W),
    Row(NARRATIVE, "patient.reasoning.flow.read", FLOW, P),
    Row(MY_FLOWS, "patient.reasoning.flows.listed", ANN, P),
    Row(CONSENT, "reasoning.read_consent.changed", ANN, P),
    Row(CONSENT_READ, None),
    # subjects (the subjects function); the erasure records each flow's tombstone on the flow
    Row(SUBJECT_READ, None),
    Row(ERASURE, "admin.subject.erasure_started", SUBJECT_ID, A),
    Row(ERASURE, "admin.subject.key_destroyed", SUBJECT_ID, A),
    Row(ERASURE, "admin.subject.flow_erased", FLOW, A),
    Row(ERASURE, "admin.subject.flows_erased", SUBJECT_ID, A),
    Row(ERASURE, "admin.subject.conversations_erased", SUBJECT_ID, A),
    Row(ERASURE, "admin.subject.uploads_erased", SUBJECT_ID, A),
    Row(ERASURE, "admin.subject.erased", SUBJECT_ID, A),
    Row(HOLD, "admin.subject.hold_placed", SUBJECT_ID, A),
    Row(HOLD_LIFT, "admin.subject.hold_lifted", SUBJECT_ID, A),
    Row(ME, None),
    Row(HEALTH, None),
    # chat (the chat app); a recorded turn is written by the chat service's own principal
    Row(CHAT, None),
    Row(RECORDED_CHAT, "reasoning.flow.started", FLOW, CHAT_RECORDER),
    Row(RECORDED_CHAT, "reasoning.step.created", FLOW, CHAT_RECORDER, count=2),
    Row(RECORDED_CHAT, "reasoning.flow.completed", FLOW, CHAT_RECORDER),
    Row(RECORDED_CHAT, "reasoning.pathway.skipped", FLOW, CHAT_RECORDER),
    Row(SESSIONS, None),
    Row(RUNS, None),
    Row(CANCEL, None),
    # workspaces and documents (scope documents)
    Row(WS_CREATE, "documents.workspace.created", "workspace:{workspace_id}", D),
    Row(WS_LIST, None),
    Row(WS_GET, None),
    Row(WS_MEMBER, "documents.workspace.member_added", "workspace:{workspace_id}", D),
    Row(WS_REVOKE, "documents.workspace.member_revoked", "workspace:{workspace_id}", D),
    Row(WS_VISIBILITY, "documents.workspace.visibility_changed", "workspace:{workspace_id}", D),
    Row(DOC_CREATE, "documents.document.created", "document:{document_id}", D),
    Row(DOC_LIST, None),
    Row(DOC_GET, None),
    Row(DOC_VERSIONS, None),
    Row(DOC_REPLACE, "documents.version.created", "document:{document_id}", D),
    Row(DOC_COMPLETE, "documents.version.completed", "document:{document_id}", D),
    Row(DOC_DELETE, "documents.document.deleted", "document:{document_id}", D),
    # admin routes (actor = the IAM principal's ARN)
    Row(ADMIN_ME, None),
    Row(ADMIN_FLOW, "admin.reasoning.flow.read", FLOW, A),
    Row(STEPS_PAGE, "admin.reasoning.flow.steps_read", FLOW, A),
    Row(SEALED_FIELD, "admin.reasoning.step.sealed_field_opened", FLOW, A),
    Row(TRACE, None),
    Row(FLOWS_LIST, None),
    Row(ENQUEUE, "reasoning.research.deeper_request_created", BACKLOG_ROW, A),
    Row(ENQUEUE, "admin.reasoning.research.deeper_requested", BACKLOG_ROW, A),
    Row(ENQUEUE_AGAIN, "reasoning.research.deeper_request_created", BACKLOG_ROW, A, count=0),
    # The operator's request is recorded again on a replayed key (created: false): they asked again.
    Row(ENQUEUE_AGAIN, "admin.reasoning.research.deeper_requested", BACKLOG_ROW, A),
    Row(PULL, "reasoning.research.backlog.dispatched", BACKLOG_ROW, A),
    Row(PULL_EMPTY, None),
    Row(COMPLETE, "reasoning.research.backlog.completed", BACKLOG_ROW, A),
    Row(FAIL, "reasoning.research.backlog.failed_voluntary", BACKLOG_ROW, A),
    Row(BACKLOG, "admin.reasoning.research.backlog_read", "backlog:all", A),
    Row(MARK, "reasoning.claims_pending_review.marked", "claim:{claim_id}", A),
    Row(MARK_AGAIN, "reasoning.claims_pending_review.marked", "claim:{claim_id}", A, count=0),
    Row(CLAIMS, "admin.reasoning.claims_pending_review.listed", "claims:pending_review", A),
    Row(RESOLVE, "reasoning.claims_pending_review.resolved", "claim:{claim_id}", A),
    Row(MATCH, "reasoning.pathway.match_requested", "family:{trigger_type}", A),
    Row(MATCH, "reasoning.pathway.matched", "family:{trigger_type}", A),
    Row(HIT, "reasoning.pathway.hit", PATHWAY_ID, A),
    Row(STATS, "admin.reasoning.pathway.stats_read", "pathways:all", A),
    Row(COMPARE, "admin.reasoning.pathway.compared", "pathway:{first}", A),
    Row(EXTRACT, "reasoning.pathway.extracted", PATHWAY_ID, A),
    Row(EXTRACT_AGAIN, "reasoning.pathway.skipped", FLOW, A),
    Row(PATHWAY, None),
    Row(PATHWAYS, None),
    Row(EVENTS, None),
    Row(CHECKPOINT, None),
    Row(CHECKPOINT_NOTE, None),
    Row(BUNDLE, None),
    Row(LEDGER_KEY, None),
    # jobs (actor system:<job>)
    Row(Job("heartbeat"), None),
    Row(Job("ledger_checkpoint", audited_flow), None),
    Row(RESUME_NONE, None),
    Row(RESUME, "admin.subject.flow_erased", FLOW, "system:subject_erasure_resume"),
    Row(RESUME, "admin.subject.flows_erased", SUBJECT_ID, "system:subject_erasure_resume"),
    Row(RESUME, "admin.subject.conversations_erased", SUBJECT_ID, "system:subject_erasure_resume"),
    Row(RESUME, "admin.subject.erased", SUBJECT_ID, "system:subject_erasure_resume"),
    Row(RETENTION_OFF, None),
    Row(RETENTION, "admin.subject.flow_erased", FLOW, "system:subject_retention"),
    Row(RETENTION, "subjects.retention.applied", "job:subject_retention", "system:subject_retention"),
    Row(DECAY_FLOWS, "reasoning.flow.aborted", FLOW, "system:flow_decay"),
    Row(DECAY_FLOWS, "reasoning.pathway.skipped", FLOW, "system:flow_decay"),
    Row(SWEEP, "reasoning.research.backlog.recovered", BACKLOG_ROW, SWEEPER),
    Row(SWEEP, "memory.job.backlog_stale_sweep.completed", "job:backlog_stale_sweep", SWEEPER),
    Row(SWEEP_RETRIED, "reasoning.research.backlog.failed_after_retries", BACKLOG_ROW, SWEEPER),
    Row(SWEEP_RETRIED, "memory.job.backlog_stale_sweep.completed", "job:backlog_stale_sweep", SWEEPER),
    Row(SWEEP_STRANDED, "reasoning.research.backlog.requeued", BACKLOG_ROW, SWEEPER),
    Row(SWEEP_STRANDED, "memory.job.backlog_stale_sweep.completed", "job:backlog_stale_sweep", SWEEPER),
    Row(SWEEP_UNDECODABLE, "memory.job.backlog_stale_sweep.row_failed", BACKLOG_ROW, SWEEPER),
    Row(SWEEP_UNDECODABLE, "memory.job.backlog_stale_sweep.completed", "job:backlog_stale_sweep", SWEEPER),
    Row(CONSUME_OFF, None),
    Row(CONSUME, "reasoning.research.backlog.dispatched", BACKLOG_ROW, CONSUMER),
    # The researcher ran on the row (no evidence in this deployment: insufficient, but done).
    Row(CONSUME, "reasoning.research.backlog.completed", BACKLOG_ROW, CONSUMER),
    Row(CONSUME_CLAIM, "reasoning.research.backlog.dispatched", BACKLOG_ROW, CONSUMER),
    Row(CONSUME_CLAIM, "reasoning.claims_pending_review.marked", "claim:claim-7", CONSUMER),
    Row(CONSUME_CLAIM, "reasoning.research.backlog.completed", BACKLOG_ROW, CONSUMER),
    Row(CONSUME_OTHER, "reasoning.research.backlog.parked", BACKLOG_ROW, CONSUMER),
    Row(CONSUME_INVALID, "reasoning.research.backlog.dispatched", BACKLOG_ROW, CONSUMER),
    Row(CONSUME_INVALID, "reasoning.research.backlog.failed_voluntary", BACKLOG_ROW, CONSUMER),
    Row(BACKFILL, "memory.job.pathway_embedding_backfill.started", "job:pathway_embedding_backfill", BACKFILLER),
    Row(BACKFILL, "reasoning.pathway.embedded", PATHWAY_ID, BACKFILLER),
    Row(BACKFILL, "reasoning.pathway.snapshot_published", "family:user_question", BACKFILLER),
    Row(BACKFILL, "memory.job.pathway_embedding_backfill.completed", "job:pathway_embedding_backfill", BACKFILLER),
    Row(BACKFILL_FAILS, "memory.job.pathway_embedding_backfill.started", "job:pathway_embedding_backfill", BACKFILLER),
    Row(BACKFILL_FAILS, "memory.job.pathway_embedding_backfill.error", "job:pathway_embedding_backfill", BACKFILLER),
    Row(DECAY_PATHWAYS, "memory.job.pathway_decay.started", "job:pathway_decay", PATHWAY_DECAY),
    Row(DECAY_PATHWAYS, "reasoning.pathway.demoted", PATHWAY_ID, PATHWAY_DECAY),
    Row(DECAY_PATHWAYS, "memory.job.pathway_decay.completed", "job:pathway_decay", PATHWAY_DECAY),
    Row(DECAY_PATHWAYS_FAILS, "memory.job.pathway_decay.started", "job:pathway_decay", PATHWAY_DECAY),
    Row(DECAY_PATHWAYS_FAILS, "memory.job.pathway_decay.error", "job:pathway_decay", PATHWAY_DECAY),
    # producers the research agents call in-process
    Row(RESEARCHER, "reasoning.research.deeper_request_created", BACKLOG_ROW, "system:researcher"),
    Row(CRITIC, "reasoning.research.deeper_request_created", BACKLOG_ROW, "system:critic"),
    # one-offs an operator runs from the CLI after an upgrade (actor cli:<user>)
    Row(BACKLOG_RECOUNT, "memory.job.backlog_counters.recounted", "backlog:counters", "cli:operator"),
    Row(PATHWAY_RECOUNT, "memory.job.pathway_counters.recounted", "pathways:counters", "cli:operator"),
]


def recorded_by(trigger: Trigger) -> Counter[str]:
    """Every action the table says this trigger records, with its count: it must record nothing else."""
    counts: Counter[str] = Counter()
    for row in ROWS:
        if row.trigger is trigger and row.action is not None:
            counts[row.action] += row.count
    return +counts  # drops the rows that say "not again" (count 0)


def route_requests() -> dict[tuple[str, str], Route]:
    """One request per route for the access matrix: the route's first row in the table."""
    requests: dict[tuple[str, str], Route] = {}
    for row in ROWS:
        if isinstance(row.trigger, Route):
            requests.setdefault((row.trigger.method, row.trigger.path), row.trigger)
    return requests
