"""The DIAGNOSIS executor for real: the ReAct loop, its budget, the release guards and the persistence.

The model is the real OpenAI adapter against the scripted OpenAI-compatible server on loopback, the
tools are the real adapters (CloudWatch Logs and DynamoDB/S3 in moto, the knowledge index), and
every turn goes through the chat app over HTTP (ASGI), in both the SSE and the JSON variant.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from flowledger.api.chat_app import create_app
from flowledger.chat.executors import Budget, RunCancelled, TurnContext
from flowledger.chat.models import ChatRequest, ContentEvent, Intent
from flowledger.chat.runs import RunStore
from flowledger.chat.usecase import CancelToken
from flowledger.chat.wiring import build_use_case
from flowledger.diagnosis.demo_incident import ERROR_CODE, PAYMENTS_LOG_GROUP
from flowledger.diagnosis.demo_logs import seed_demo_logs
from flowledger.diagnosis.published import PublishedResult
from flowledger.diagnosis.tool_knowledge import LookupKnowledgeTool
from flowledger.diagnosis.tool_logs import QueryLogsTool
from flowledger.diagnosis.tools import DiagnosisTool
from flowledger.diagnosis.wiring import build_diagnosis_executor
from flowledger.identity import Principal
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.reasoning.recorder import InProcessTransport, ReasoningFlowRecorder
from flowledger.reasoning.service import FlowService
from flowledger.services import Services
from flowledger.store.envelope import is_sealed
from tests.integration.provisioned import ProvisionedStates
from tests.integration.test_chat_use_case import parse_sse

pytestmark = pytest.mark.anyio
USER = {"sub": "alice", "scope": "chat", "patient_id": ""}
ADMIN = Principal(kind="iam", id="arn:aws:iam::1:user/a")
RUNBOOK = (
    b"# Checkout failure runbook\n\nWhen payments-api logs DB_POOL_EXHAUSTED, the database connection pool is "
    b"too small for the load: compare max_connections with the last deployment and roll back."
)
GROUPS = ("/flowledger/demo/checkout", PAYMENTS_LOG_GROUP)
# The demo incident's logs are seeded once per test process, as at this instant, and put back into each test's
# moto (4,200 events took a third of the module's time); the windows the scripted model asks for come from it.
SEEDED_AT = datetime.now(UTC)


@pytest.fixture
def services(services: Services, provisioned_states: ProvisionedStates) -> Services:
    """The runbook indexed and the demo incident's logs in CloudWatch Logs."""

    def seed() -> None:
        KnowledgeIndex(services).add_document("checkout-runbook.md", RUNBOOK)
        seed_demo_logs(services.aws.logs, SEEDED_AT)

    provisioned_states.seeded(services, "diagnosis-demo", seed)
    return services


class Diagnosis:
    """One deployment's chat use case with the real diagnosis executor over the given tools and budget."""

    def __init__(
        self, services: Services, scripted: Any, tools: list[DiagnosisTool] | None = None, **budget: Any
    ) -> None:
        self.services, self.scripted = services, scripted
        model = OpenAIChatModel("scripted-model", "sk-test", scripted.base_url, tool_calling="native")
        index = KnowledgeIndex(services)
        self.tools = tools or [QueryLogsTool(services.aws.logs, GROUPS, services.clock), LookupKnowledgeTool(index)]
        self.use_case = build_use_case(services, model=model, index=index)
        self.use_case.executors[Intent.DIAGNOSIS] = build_diagnosis_executor(services, model, index, tools=self.tools)
        self.use_case.budget = lambda: Budget(**budget)
        writer = Principal(kind="user", id="service:chat", scopes=frozenset({"reasoning.write"}))
        self.use_case.recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(services), writer))
        self.app = create_app(lambda: services, lambda: self.use_case)
        self.log_queries: list[dict[str, Any]] = []
        services.aws.logs.meta.events.register(
            "provide-client-params.logs.FilterLogEvents", lambda params, **_: self.log_queries.append(params)
        )

    async def ask(self, via: str, query: str, session_id: str | None = None) -> dict[str, Any]:
        from flowledger.api.chat_app import final_body

        headers = {"x-amzn-request-context": json.dumps({"authorizer": USER})}
        body = {"query": query, **({"session_id": session_id} if session_id else {})}
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://chat.test", headers=headers) as client:
            if via == "json":
                response = await client.post("/api/chat", json=body, headers={"Accept": "application/json"})
                assert response.status_code == 200, response.text
                return dict(response.json())
            response = await client.post("/api/chat", json=body)
            return final_body(parse_sse(response.text))

    def run(self, outcome: dict[str, Any]) -> Any:
        """The run as stored: every attribute of its item, ``published_result`` included."""
        return stored_run(self.services, outcome["session_id"], outcome["run_id"])

    def flow_steps(self, outcome: dict[str, Any]) -> list[Any]:
        flows = FlowService(self.services).flows_by_trace(outcome["session_id"], 10, None).flows
        flow = next(f for f in flows if f.trigger_ref == f"chat/{outcome['run_id']}")
        return list(FlowService(self.services).admin_flow(ADMIN, flow.flow_id).steps)

    def model_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.scripted.requests if "messages" in r]


class StoredRun:
    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.status = item["status"]
        self.release_outcome = item.get("release_outcome")
        self.published_result = item.get("published_result")
        self.budget_usage = {k: int(v) for k, v in (item.get("budget_usage") or {}).items()}
        self.reason_code = item.get("reason_code")


def stored_run(services: Services, session_id: str, run_id: str) -> StoredRun:
    from flowledger.store import items

    response = services.aws.dynamodb.get_item(
        TableName=services.aws.table_name("runs"),
        Key={"session_id": {"S": session_id}, "run_id": {"S": run_id}},
        ConsistentRead=True,
    )
    return StoredRun(items.from_item(response["Item"]))


# ---- scripting the model ----------------------------------------------------------------------


def route(intent: str = "DIAGNOSIS") -> dict[str, Any]:
    return {"json": {"intent": intent}}


def calls(*planned: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """One model turn that proposes these tool calls, in parallel."""
    return {
        "text": None,
        "tool_calls": [
            {"id": f"call_t{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(planned)
        ],
    }


def observations(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The observations the agent sent back to the model so far: id, outcome and result."""
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


def draft(
    claims: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    conclusion: Callable[[list[dict[str, Any]]], str],
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A concluding draft built from the observations the agent actually sent."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        seen = observations(request)
        return {
            "json": {
                "status": "concluded",
                "conclusion": conclusion(seen),
                "claims": claims(seen),
                "scope": "payments-api logs",
                "limitations": "Only the payments logs were read.",
                "missing": [],
            }
        }

    return answer


def verdict(supported: bool, reasons: str = "the logs show it") -> dict[str, Any]:
    return {"json": {"supported": supported, "reasons": reasons}}


def window() -> dict[str, Any]:
    from flowledger.diagnosis.demo_incident import incident_times

    times = incident_times(SEEDED_AT)
    return {
        "log_group": PAYMENTS_LOG_GROUP,
        "start": times.start.isoformat().replace("+00:00", "Z"),
        "end": times.end.isoformat().replace("+00:00", "Z"),
        "terms": [ERROR_CODE],
        "limit": 20,
    }


def first_event_time(seen: list[dict[str, Any]]) -> str:
    result = json.loads(seen[0]["result"])
    return str(result["events"][0]["timestamp"])


LOGS_CLAIM = draft(
    lambda seen: [
        {
            "text": f"payments-api logged {ERROR_CODE} from {first_event_time(seen)}.",
            "observation_ids": [seen[0]["observation_id"]],
        }
    ],
    lambda seen: f"Checkout failed because payments-api ran out of pooled connections ({ERROR_CODE}).",
)


class CancellingLookup(LookupKnowledgeTool):
    """``lookup_knowledge`` during which the client goes away: the turn's token is cancelled as it runs."""

    def __init__(self, index: KnowledgeIndex, token: CancelToken) -> None:
        super().__init__(index)
        self._token = token

    def run(self, arguments: dict[str, Any], *, timeout_seconds: float) -> Any:
        self._token.cancel()
        return super().run(arguments, timeout_seconds=timeout_seconds)


def cancelling_tools(services: Services, token: CancelToken) -> list[DiagnosisTool]:
    """A lookup that cancels the turn as it runs, then the log query a batch after it would run."""
    return [CancellingLookup(KnowledgeIndex(services), token), QueryLogsTool(services.aws.logs, GROUPS, services.clock)]


# ---- the seed's scenarios -----------------------------------------------------------------------


async def test_diagnosis_succeeds_with_a_conclusion(services: Services, scripted_openai: Any, via: str) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, verdict(True)]
    outcome = await harness.ask(via, "Why did checkout fail last night?")
    assert outcome["status"] == "SUCCESS" and outcome["release_outcome"] == "SUCCESS", outcome
    assert ERROR_CODE in outcome["content"]["text"]
    assert outcome["status_codes"] == [
        "ROUTING",
        "ROUTED_DIAGNOSIS",
        "DIAGNOSING",
        "QUERYING_LOGS",
        "CHECKING_EVIDENCE",
        "RELEASING",
    ]
    run = harness.run(outcome)
    published = json.loads(run.published_result)
    assert published["query"] == "Why did checkout fail last night?"
    assert set(published) == {"query", "conclusion", "scope", "limitations", "documents"}
    assert "obs-" not in run.published_result and "call_" not in run.published_result
    assert run.budget_usage == {"model_calls": 4, "tool_calls": 1, "tokens": 4 * 18}
    # The query went to the agent unchanged, and the tool call ran once, as asked.
    task = json.loads(harness.model_requests()[1]["messages"][1]["content"])
    assert task == {"query": "Why did checkout fail last night?", "previous_turn": None}
    assert [q["logGroupName"] for q in harness.log_queries] == [PAYMENTS_LOG_GROUP]


async def test_every_diagnosis_records_its_steps_in_a_flow(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, verdict(True)]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    steps = harness.flow_steps(outcome)
    assert [s.step_kind for s in steps] == [
        "routing",
        "model_call",
        "tool_call",
        "model_call",
        "draft",
        "evidence_guard",
        "semantic_guard",
        "release",
    ]
    refs = [s.back_refs.llm_call_log_ref for s in steps if s.step_kind == "model_call"]
    assert refs == [f"{outcome['run_id']}/model-1", f"{outcome['run_id']}/model-2"]
    for parent, child in itertools.pairwise(steps):
        assert child.parent_step_ids == [parent.step_id]  # one chain, routing first
    summaries = json.dumps([s.summary_text for s in steps])
    assert "checkout" not in summaries.lower() and "DB_POOL" not in summaries  # no query or evidence text


async def test_a_log_step_carries_its_query_window_and_matched_lines_sealed(
    services: Services, scripted_openai: Any
) -> None:
    harness = Diagnosis(services, scripted_openai)
    asked = window()
    scripted_openai.script = [route(), calls(("query_logs", asked)), LOGS_CLAIM, verdict(True)]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    steps = harness.flow_steps(outcome)
    routing, first_model, tool = steps[0], steps[1], steps[2]
    assert routing.outputs == {"intent": "DIAGNOSIS", "attempts": 1, "total_tokens": 18}
    assert first_model.outputs == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
        "usage_source": "server",
        "finish_reason": "stop",  # the scripted server says stop, even for tool calls
        "model": "scripted",
        "tool_calls": ["query_logs"],
    }
    assert first_model.inputs == {"max_tokens": 1024}
    guard = next(s for s in steps if s.step_kind == "semantic_guard")
    judged = (guard.outputs["passed"], guard.outputs["total_tokens"], guard.outputs["finish_reason"])
    assert judged == (True, 18, "stop")  # the judge's model call; its reasons are never recorded
    assert (tool.inputs["log_group"], tool.inputs["terms"], tool.inputs["limit"]) == (
        PAYMENTS_LOG_GROUP,
        [ERROR_CODE],
        20,
    )
    assert tool.inputs["start"] == asked["start"] and tool.inputs["end"] == asked["end"]
    lines = tool.outputs["matched_lines"]
    assert lines and all(ERROR_CODE in line["message"] for line in lines)
    assert tool.outputs["total_lines"] == len(lines) == tool.outputs["rows"]
    assert tool.outputs["lines_truncated"] is False
    assert (tool.pii_fields.inputs, tool.pii_fields.outputs) == (["terms"], ["matched_lines"])
    # What is stored holds the sealed envelopes, never the terms or the lines themselves.
    _, records = FlowService(services).flow_with_steps(steps[0].flow_id)
    stored = next(r for r in records if r["step_id"] == tool.step_id)
    assert is_sealed(stored["inputs"]["terms"]) and is_sealed(stored["outputs"]["matched_lines"])
    assert ERROR_CODE not in json.dumps(stored, default=str)
    assert stored["inputs"]["log_group"] == PAYMENTS_LOG_GROUP  # open: what was searched, not what was found


async def test_the_semantic_guards_reasons_never_leave_the_server(
    services: Services, scripted_openai: Any, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Diagnosis(services, scripted_openai)
    secret = "REASON-7f3a: the judge thinks otherwise"
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, verdict(False, secret)]
    with caplog.at_level(logging.DEBUG):
        outcome = await harness.ask("sse", "Why did checkout fail last night?")
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.published_result) == ("SUCCESS", "FALLBACK", None)
    assert "did not publish it" in outcome["content"]["text"]
    everywhere = json.dumps(outcome) + json.dumps(run.item, default=str) + caplog.text
    everywhere += json.dumps([s.model_dump() for s in harness.flow_steps(outcome)])
    assert "REASON-7f3a" not in everywhere


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param(
            lambda seen: [{"text": "It failed.", "observation_ids": ["run_01JD00000000000000000000AA/obs-1"]}],
            id="foreign-id",
        ),
        pytest.param(
            lambda seen: [{"text": "It failed.", "observation_ids": [seen[0]["observation_id"][:-1] + "9"]}],
            id="unknown-id",
        ),
        pytest.param(lambda seen: [{"text": "It failed.", "observation_ids": []}], id="uncited-claim"),
        pytest.param(
            lambda seen: [{"text": "4711 checkouts failed.", "observation_ids": [seen[0]["observation_id"]]}],
            id="number-found-nowhere",
        ),
        pytest.param(
            lambda seen: [{"text": "NO_SUCH_CODE was logged.", "observation_ids": [seen[0]["observation_id"]]}],
            id="error-code-found-nowhere",
        ),
    ],
)
async def test_the_evidence_guard_refuses_fabrication(
    services: Services, scripted_openai: Any, claims: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> None:
    harness = Diagnosis(services, scripted_openai)
    fabricated = draft(claims, lambda seen: "Checkout failed.")
    scripted_openai.script = [route(), calls(("query_logs", window())), fabricated, verdict(True)]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.published_result) == ("SUCCESS", "FALLBACK", None)
    assert "could not all be found" in outcome["content"]["text"]
    assert len(harness.model_requests()) == 3  # the semantic guard is never asked about a refused draft


async def test_a_number_in_the_conclusion_must_be_in_the_cited_evidence(
    services: Services, scripted_openai: Any
) -> None:
    harness = Diagnosis(services, scripted_openai)
    inflated = draft(
        lambda seen: [{"text": f"payments-api logged {ERROR_CODE}.", "observation_ids": [seen[0]["observation_id"]]}],
        lambda seen: f"{ERROR_CODE} hit 9999 checkouts.",
    )
    scripted_openai.script = [route(), calls(("query_logs", window())), inflated, verdict(True)]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    assert harness.run(outcome).release_outcome == "FALLBACK"


async def test_a_refused_observation_is_not_evidence(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    outside = {**window(), "log_group": "/aws/lambda/someone-else"}
    cites_refusal = draft(
        lambda seen: [{"text": "The logs were checked.", "observation_ids": [seen[0]["observation_id"]]}],
        lambda seen: "The logs were checked.",
    )
    scripted_openai.script = [route(), calls(("query_logs", outside)), cites_refusal, verdict(True)]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    assert harness.run(outcome).release_outcome == "FALLBACK"
    assert harness.log_queries == []  # a group outside the allow-list is never queried
    refused = observations(harness.model_requests()[2])[0]
    assert refused["outcome"] == "refused"


async def test_ids_in_the_models_text_are_scrubbed(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    with_ids = draft(
        lambda seen: [
            {
                "text": f"{ERROR_CODE} seen in {seen[0]['observation_id']}.",
                "observation_ids": [seen[0]["observation_id"]],
            }
        ],
        lambda seen: f"Pool exhausted ({ERROR_CODE}), see {seen[0]['observation_id']} and call_t0.",
    )
    scripted_openai.script = [route(), calls(("query_logs", window())), with_ids, verdict(True)]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    assert outcome["release_outcome"] == "SUCCESS"
    text = outcome["content"]["text"]
    assert "obs-" not in text and "call_t0" not in text and outcome["run_id"] not in text
    assert text.startswith("Pool exhausted")


async def test_knowledge_documents_become_references_once(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    runbook = draft(
        lambda seen: [
            {"text": f"The runbook names {ERROR_CODE}.", "observation_ids": [seen[0]["observation_id"]]},
            {"text": "It says to roll back.", "observation_ids": [seen[0]["observation_id"]]},
        ],
        lambda seen: f"Follow the checkout runbook for {ERROR_CODE}.",
    )
    scripted_openai.script = [route(), calls(("lookup_knowledge", {"query": "checkout pool"})), runbook, verdict(True)]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    assert outcome["release_outcome"] == "SUCCESS", outcome
    assert [r["title"] for r in outcome["content"]["references"]] == ["Checkout failure runbook"]
    assert json.loads(harness.run(outcome).published_result)["documents"][0]["title"] == "Checkout failure runbook"


# ---- stops: budget, saturation, missing context, cancellation ---------------------------------------


async def test_tool_budget_ends_after_finite_checks(services: Services, scripted_openai: Any, via: str) -> None:
    harness = Diagnosis(services, scripted_openai, max_tool_calls=2)
    scripted_openai.script = [
        route(),
        calls(("query_logs", window()), ("lookup_knowledge", {"query": "pool"})),  # exactly at the limit: runs
        calls(("lookup_knowledge", {"query": "deploy"})),  # one over: refused, not run
    ]
    outcome = await harness.ask(via, "Why did checkout fail last night?")
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.published_result) == ("SUCCESS", "FALLBACK", None)
    assert run.budget_usage["tool_calls"] == 2
    assert outcome["content"]["text"].startswith("I could not finish this diagnosis within its tool calls limit")
    # What was checked, in words a user reads: never the tool's internal name.
    assert "the logs 1 time" in outcome["content"]["text"] and "query_logs" not in outcome["content"]["text"]
    assert len(harness.model_requests()) == 3  # no extra model call to build the fallback
    assert "error" not in outcome


async def test_a_parallel_batch_that_would_overflow_is_refused_whole(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai, max_tool_calls=2)
    scripted_openai.script = [
        route(),
        calls(
            ("query_logs", window()),
            ("query_logs", {**window(), "terms": ["ERROR"]}),
            ("lookup_knowledge", {"query": "x"}),
        ),
    ]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    # Nothing ran, so nothing was observed: the run fails closed instead of inventing a fallback.
    assert harness.log_queries == []
    assert outcome["error"]["code"] == "EXECUTION_FAILED" and "content" not in outcome
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.published_result) == ("FAILED", "FAILED", None)


async def test_budget_ends_without_safe_publishable_progress(services: Services, scripted_openai: Any) -> None:
    # Routing takes 1 call and the guard's call is kept spare: a budget of 2 leaves the loop nothing.
    harness = Diagnosis(services, scripted_openai, max_model_calls=2)
    scripted_openai.script = [route()]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    assert outcome["error"]["code"] == "EXECUTION_FAILED"
    assert len(harness.model_requests()) == 1
    assert harness.run(outcome).budget_usage["model_calls"] == 1


async def test_model_budget_after_an_observation_is_a_fallback(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai, max_model_calls=3)
    scripted_openai.script = [route(), calls(("query_logs", window())), calls(("lookup_knowledge", {"query": "x"}))]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    assert outcome["release_outcome"] == "FALLBACK"
    assert "model calls limit" in outcome["content"]["text"]
    assert len(harness.model_requests()) == 2  # routing and one agent step; the third call is never made


async def test_token_and_time_budgets_stop_the_loop(services: Services, scripted_openai: Any) -> None:
    tokens = Diagnosis(services, scripted_openai, max_tokens=30)
    scripted_openai.script = [route(), calls(("query_logs", window())), calls(("lookup_knowledge", {"query": "x"}))]
    outcome = await tokens.ask("json", "Why did checkout fail last night?")
    assert outcome["release_outcome"] == "FALLBACK" and "tokens limit" in outcome["content"]["text"]
    expired = Diagnosis(services, scripted_openai, deadline=0.0)
    scripted_openai.script = [route()]
    outcome = await expired.ask("json", "Why did checkout fail last night?")
    assert outcome["error"]["code"] == "EXECUTION_FAILED"


async def test_the_same_call_twice_is_saturation(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window())), calls(("query_logs", window()))]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    assert outcome["release_outcome"] == "FALLBACK"
    assert outcome["content"]["text"].startswith("I stopped this diagnosis because further checks returned nothing new")
    assert len(harness.log_queries) == 1  # the repeat is never run


async def test_two_steps_without_a_new_observation_is_saturation(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    empty = {**window(), "terms": ["NOTHING_MATCHES_THIS"]}
    scripted_openai.script = [
        route(),
        calls(("query_logs", empty)),
        calls(("query_logs", {**empty, "limit": 10})),
        calls(("lookup_knowledge", {"query": "never asked"})),
    ]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    assert outcome["release_outcome"] == "FALLBACK" and "nothing new" in outcome["content"]["text"]
    assert len(harness.model_requests()) == 3


async def test_missing_context_names_what_is_missing(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    missing = {
        "json": {
            "status": "missing_context",
            "conclusion": None,
            "claims": [],
            "scope": "",
            "limitations": "",
            "missing": ["database", "affected_service"],
        }
    }
    scripted_openai.script = [route(), missing]
    outcome = await harness.ask("json", "Why is the billing export wrong?")
    assert outcome["release_outcome"] == "FALLBACK"
    assert "the application's database, which service is affected" in outcome["content"]["text"]
    assert harness.run(outcome).published_result is None


async def test_an_invalid_draft_is_retried_once_then_a_fallback(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window())), {"json": {"status": "?"}}, {"raw": "not json"}]
    outcome = await harness.ask("json", "Why did checkout fail last night?")
    assert outcome["release_outcome"] == "FALLBACK"
    assert "could be checked" in outcome["content"]["text"]
    assert len(harness.model_requests()) == 4


async def test_cancellation_is_checked_between_tool_calls(services: Services, scripted_openai: Any) -> None:
    token = CancelToken()
    harness = Diagnosis(services, scripted_openai, tools=cancelling_tools(services, token))
    scripted_openai.script = [route(), calls(("lookup_knowledge", {"query": "pool"}), ("query_logs", window()))]
    alice = Principal(kind="user", id="alice", scopes=frozenset({"chat"}))
    events = list(harness.use_case.run(alice, ChatRequest(query="Why did checkout fail last night?"), token))
    assert events[-1].type == "error" and events[-1].code == "CANCELLED"
    assert harness.log_queries == []  # the second call of the batch never ran
    assert len(harness.model_requests()) == 2  # and no model call followed
    run = stored_run(services, events[0].session_id, events[0].run_id)
    assert (run.status, run.release_outcome, run.published_result) == ("CANCELLED", "CANCELLED", None)


async def test_the_previous_turn_reaches_the_next_diagnosis(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, verdict(True)]
    first = await harness.ask("json", "Why did checkout fail last night?")
    scripted_openai.script = [route(), missing_context()]
    await harness.ask("json", "Is it fixed now?", session_id=first["session_id"])
    task = json.loads(harness.model_requests()[-1]["messages"][1]["content"])
    assert task["query"] == "Is it fixed now?"
    assert task["previous_turn"]["conclusion"] == first["content"]["text"]


async def test_the_lambdas_remaining_time_bounds_the_diagnosis(services: Services, scripted_openai: Any) -> None:
    """LWA's ``x-amzn-lambda-context`` deadline, minus the margin, is the turn's deadline."""
    import time

    from flowledger.api.chat_app import final_body

    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window()))]
    # 2 s left in the invocation, and a 5 s margin: no agent step may start.
    lambda_context = json.dumps({"deadline": int(time.time() * 1000) + 2000, "request_id": "r-1"})
    headers = {"x-amzn-request-context": json.dumps({"authorizer": USER}), "x-amzn-lambda-context": lambda_context}
    transport = httpx.ASGITransport(app=harness.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://chat.test", headers=headers) as client:
        response = await client.post("/api/chat", json={"query": "Why did checkout fail last night?"})
    outcome = final_body(parse_sse(response.text))
    assert outcome["error"]["code"] == "EXECUTION_FAILED"
    assert len(harness.model_requests()) == 1  # routing only
    assert harness.log_queries == []


# ---- edges of the stops and guards (each once caught a mutant the tests above let live) ------------------

QUESTION = "Why did checkout fail last night?"
ALICE = Principal(kind="user", id="alice", scopes=frozenset({"chat"}))


def missing_context(**extra: Any) -> dict[str, Any]:
    return {
        "json": {
            "status": "missing_context",
            "conclusion": None,
            "claims": [],
            "scope": "",
            "limitations": "",
            "missing": ["logs"],
            **extra,
        }
    }


# ---- budget ----------------------------------------------------------------------------------------


async def test_tokens_exactly_at_the_limit_stop_the_next_step(services: Services, scripted_openai: Any) -> None:
    # Each scripted call spends 18 tokens: routing and one agent step spend exactly the 36 allowed.
    harness = Diagnosis(services, scripted_openai, max_tokens=36)
    scripted_openai.script = [route(), calls(("query_logs", window())), calls(("lookup_knowledge", {"query": "x"}))]
    outcome = await harness.ask("json", QUESTION)
    assert outcome["release_outcome"] == "FALLBACK" and "tokens limit" in outcome["content"]["text"]
    assert len(harness.model_requests()) == 2
    assert harness.run(outcome).budget_usage["tokens"] == 36


async def test_an_expired_deadline_makes_no_agent_model_call(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai, deadline=0.0)
    scripted_openai.script = [route(), calls(("query_logs", window()))]
    outcome = await harness.ask("json", QUESTION)
    assert outcome["error"]["code"] == "EXECUTION_FAILED"
    assert len(harness.model_requests()) == 1  # routing only: the time is checked before the call
    assert harness.log_queries == []


async def test_the_deadline_is_checked_before_a_tool_batch(services: Services, scripted_openai: Any) -> None:
    # The clock passes the deadline while the first agent step is with the model: its tool batch never runs.
    harness = Diagnosis(services, scripted_openai, deadline=500.0)
    harness.use_case.budget = lambda: Budget(
        deadline=500.0, clock=lambda: 0.0 if len(harness.model_requests()) < 2 else 1000.0
    )
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, verdict(True)]
    outcome = await harness.ask("json", QUESTION)
    assert harness.log_queries == []
    assert outcome["error"]["code"] == "EXECUTION_FAILED"
    assert len(harness.model_requests()) == 2


async def test_the_semantic_guard_never_calls_past_the_token_budget(services: Services, scripted_openai: Any) -> None:
    # Routing, the tool step and the draft spend exactly the 54 tokens allowed: the judge is not asked.
    harness = Diagnosis(services, scripted_openai, max_tokens=54)
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, verdict(True)]
    outcome = await harness.ask("json", QUESTION)
    assert len(harness.model_requests()) == 3
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.published_result) == ("SUCCESS", "FALLBACK", None)
    assert run.budget_usage["tokens"] == 54


async def test_a_nearer_lambda_deadline_wins_over_the_budgets_own(services: Services, scripted_openai: Any) -> None:
    from flowledger.api.chat_app import final_body

    harness = Diagnosis(services, scripted_openai, deadline=time.monotonic() + 3600)
    scripted_openai.script = [route(), calls(("query_logs", window()))]
    lambda_context = json.dumps({"deadline": int(time.time() * 1000) + 2000, "request_id": "r-2"})
    headers = {"x-amzn-request-context": json.dumps({"authorizer": USER}), "x-amzn-lambda-context": lambda_context}
    transport = httpx.ASGITransport(app=harness.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://chat.test", headers=headers) as client:
        response = await client.post("/api/chat", json={"query": QUESTION})
    outcome = final_body(parse_sse(response.text))
    assert outcome["error"]["code"] == "EXECUTION_FAILED"
    assert len(harness.model_requests()) == 1
    assert harness.log_queries == []


# ---- saturation --------------------------------------------------------------------------------------


async def test_the_same_call_twice_in_one_batch_is_saturation(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window()), ("query_logs", window()))]
    outcome = await harness.ask("json", QUESTION)
    assert outcome["release_outcome"] == "FALLBACK" and "nothing new" in outcome["content"]["text"]
    assert harness.log_queries == []  # neither copy runs


async def test_a_new_observation_resets_the_idle_count(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    empty = {**window(), "terms": ["NOTHING_MATCHES_THIS"]}
    scripted_openai.script = [
        route(),
        calls(("query_logs", window())),  # new
        calls(("query_logs", empty)),  # idle 1
        calls(("lookup_knowledge", {"query": "checkout pool"})),  # new: back to 0
        calls(("query_logs", {**empty, "limit": 10})),  # idle 1, not 2
        LOGS_CLAIM,
        verdict(True),
    ]
    outcome = await harness.ask("json", QUESTION)
    assert outcome["release_outcome"] == "SUCCESS", outcome
    assert len(harness.log_queries) == 3


# ---- cancellation ------------------------------------------------------------------------------------


async def test_the_agent_itself_checks_cancellation_before_a_tool_call(
    services: Services, scripted_openai: Any
) -> None:
    """Driven without the use case (which also checks after each status), the agent must stop by itself."""
    token = CancelToken()
    harness = Diagnosis(services, scripted_openai, tools=cancelling_tools(services, token))
    scripted_openai.script = [calls(("lookup_knowledge", {"query": "pool"}), ("query_logs", window()))]
    context = TurnContext(query=QUESTION, budget=Budget(), cancelled=lambda: token.cancelled, run_id="run_x")
    stages = harness.use_case.executors[Intent.DIAGNOSIS].execute(context)
    codes = []
    with pytest.raises(RunCancelled):
        for code in stages:
            codes.append(code.value)
    assert codes == ["DIAGNOSING", "LOOKING_UP_KNOWLEDGE"]  # no status for a call that will not run
    assert harness.log_queries == []
    assert len(harness.model_requests()) == 1


async def test_cancellation_is_checked_before_the_next_model_call(services: Services, scripted_openai: Any) -> None:
    token = CancelToken()
    harness = Diagnosis(services, scripted_openai, tools=cancelling_tools(services, token))
    # The last call of the batch is the cancelled one: only a check before the model call can stop the loop.
    scripted_openai.script = [route(), calls(("lookup_knowledge", {"query": "pool"})), calls(("query_logs", window()))]
    events = list(harness.use_case.run(ALICE, ChatRequest(query=QUESTION), token))
    assert events[-1].type == "error" and events[-1].code == "CANCELLED"
    assert len(harness.model_requests()) == 2  # routing and one step; no model call after the cancel
    run = stored_run(services, events[0].session_id, events[0].run_id)
    assert (run.status, run.release_outcome) == ("CANCELLED", "CANCELLED")


# ---- the evidence guard --------------------------------------------------------------------------------


async def test_a_fact_in_the_conclusion_must_be_in_a_cited_observation(
    services: Services, scripted_openai: Any
) -> None:
    harness = Diagnosis(services, scripted_openai)
    # The claim cites only the runbook; the conclusion quotes a log timestamp that no cited observation holds.
    cites_runbook_only = draft(
        lambda seen: [{"text": f"The runbook names {ERROR_CODE}.", "observation_ids": [seen[1]["observation_id"]]}],
        lambda seen: f"Checkout failed from {first_event_time(seen)}.",
    )
    scripted_openai.script = [
        route(),
        calls(("query_logs", window()), ("lookup_knowledge", {"query": "checkout pool"})),
        cites_runbook_only,
        verdict(True),
    ]
    outcome = await harness.ask("json", QUESTION)
    run = harness.run(outcome)
    assert (run.release_outcome, run.published_result) == ("FALLBACK", None)
    assert "could not all be found" in outcome["content"]["text"]
    assert len(harness.model_requests()) == 3


# ---- the semantic guard --------------------------------------------------------------------------------


async def test_the_judges_reasons_are_in_no_log_record(
    services: Services, scripted_openai: Any, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Diagnosis(services, scripted_openai)
    secret = "REASON-c0ffee: not supported"
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, verdict(True, secret)]
    with caplog.at_level(logging.DEBUG):
        outcome = await harness.ask("json", QUESTION)
    assert outcome["release_outcome"] == "SUCCESS"
    # Not only the formatted message: every attribute a JSON log formatter would write.
    records = json.dumps([vars(r) for r in caplog.records], default=str)
    assert "REASON-c0ffee" not in records


async def test_a_judge_that_fails_is_a_refusal(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, {"status": 500}, {"status": 500}]
    outcome = await harness.ask("json", QUESTION)
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.published_result) == ("SUCCESS", "FALLBACK", None)
    assert "did not publish it" in outcome["content"]["text"]


@pytest.mark.parametrize(
    "judgement",
    [{"supported": "yes", "reasons": "ok"}, {"supported": True}, {"verdict": "fine"}, None],
    ids=["string-true", "no-reasons", "other-schema", "not-json"],
)
async def test_a_judgement_outside_the_schema_is_a_refusal(
    services: Services, scripted_openai: Any, judgement: Any
) -> None:
    harness = Diagnosis(services, scripted_openai)
    answer = {"raw": "supported"} if judgement is None else {"json": judgement}
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, answer]
    outcome = await harness.ask("json", QUESTION)
    run = harness.run(outcome)
    assert (run.release_outcome, run.published_result) == ("FALLBACK", None)


# ---- release ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "see call_abcdef123",
        "see run_01JD0000000000000000000000/obs-1",
        "see obs-2",
        "see toolu_01abcdefgh",
    ],
)
def test_a_published_result_refuses_internal_ids_when_written(text: str) -> None:
    for field in ("conclusion", "scope", "limitations"):
        fields = {"query": "q", "conclusion": "c", "scope": "s", "limitations": "", field: text}
        with pytest.raises(ValidationError):
            PublishedResult(**fields)
    PublishedResult(query="q", conclusion="c", scope="s", limitations="")  # and a clean one is accepted


async def test_a_model_failure_before_any_observation_fails_closed(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), {"status": 500}, {"status": 500}]
    outcome = await harness.ask("json", QUESTION)
    assert outcome["error"]["code"] == "EXECUTION_FAILED" and "content" not in outcome
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.published_result) == ("FAILED", "FAILED", None)


async def test_a_model_failure_after_an_observation_is_a_fallback(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window())), {"status": 500}, {"status": 500}]
    outcome = await harness.ask("json", QUESTION)
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.published_result) == ("SUCCESS", "FALLBACK", None)
    assert "the logs 1 time" in outcome["content"]["text"] and "query_logs" not in outcome["content"]["text"]
    assert run.reason_code == "model_transport"  # why, for the operator; the public outcome is unchanged


async def test_the_missing_context_fallback_repeats_no_model_text(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    planted = "MODEL-TEXT-5e1f"
    scripted_openai.script = [
        route(),
        missing_context(conclusion=planted, scope=planted, limitations=planted),
    ]
    outcome = await harness.ask("json", QUESTION)
    assert outcome["release_outcome"] == "FALLBACK"
    assert "the service's logs" in outcome["content"]["text"]
    run = harness.run(outcome)
    assert planted not in json.dumps(outcome) + json.dumps(run.item, default=str)


# ---- the flow ---------------------------------------------------------------------------------------------


async def test_a_stopped_diagnosis_records_draft_and_release_steps(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai, max_tool_calls=1)
    scripted_openai.script = [route(), calls(("query_logs", window())), calls(("lookup_knowledge", {"query": "x"}))]
    outcome = await harness.ask("json", QUESTION)
    assert outcome["release_outcome"] == "FALLBACK"
    steps = harness.flow_steps(outcome)
    assert [s.step_kind for s in steps] == ["routing", "model_call", "tool_call", "model_call", "draft", "release"]
    for parent, child in itertools.pairwise(steps):
        assert child.parent_step_ids == [parent.step_id]
    release = steps[-1].model_dump()
    assert "FALLBACK" in json.dumps(release)


async def test_a_refused_draft_records_every_release_step(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, verdict(False)]
    outcome = await harness.ask("json", QUESTION)
    assert outcome["release_outcome"] == "FALLBACK"
    kinds = [s.step_kind for s in harness.flow_steps(outcome)]
    assert kinds[-4:] == ["draft", "evidence_guard", "semantic_guard", "release"]


async def test_the_flow_is_sent_only_after_the_answer(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    scripted_openai.script = [route(), calls(("query_logs", window())), LOGS_CLAIM, verdict(True)]
    events = harness.use_case.run(ALICE, ChatRequest(query=QUESTION), CancelToken())
    session_id = None
    for event in events:
        if event.type == "start":
            session_id = event.session_id
        if isinstance(event, ContentEvent):
            # The client has its answer; nothing of the flow has been sent yet.
            assert FlowService(services).flows_by_trace(session_id, 10, None).flows == []
    flows = FlowService(services).flows_by_trace(session_id, 10, None).flows
    assert len(flows) == 1


# ---- the query ---------------------------------------------------------------------------------------------


async def test_the_agent_gets_the_query_byte_for_byte(services: Services, scripted_openai: Any) -> None:
    harness = Diagnosis(services, scripted_openai)
    query = "  Why did  checkout\tfail last night ?\n"
    scripted_openai.script = [route(), missing_context()]
    await harness.ask("json", query)
    task = json.loads(harness.model_requests()[1]["messages"][1]["content"])
    assert task["query"] == query


async def test_a_new_session_reads_no_history(services: Services, scripted_openai: Any) -> None:
    """A turn that opens its session has no earlier turn: no run history is queried for it, only for a follow-up."""
    harness = Diagnosis(services, scripted_openai)
    runs_table = services.aws.table_name("runs")
    reads: list[str] = []

    def count(event_name: str, params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == runs_table and event_name.endswith(".Query"):
            reads.append(params.get("IndexName", "runs"))

    services.aws.dynamodb.meta.events.register("before-parameter-build.dynamodb.Query", count)
    scripted_openai.script = [route(), missing_context()]
    first = await harness.ask("json", QUESTION)
    assert reads == []
    scripted_openai.script = [route(), missing_context()]
    await harness.ask("json", QUESTION, session_id=first["session_id"])
    assert len(reads) == 2  # the last turn (for the router) and the last safe diagnosis


async def test_a_run_cancelled_through_the_api_stops_at_its_next_check(
    services: Services, scripted_openai: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel route's word reaches the working turn: no tool runs and no model call is made after it."""
    import flowledger.chat.usecase as usecase

    monkeypatch.setattr(usecase, "STORE_POLL_SECONDS", 0.0)  # look at the store at every check
    harness = Diagnosis(services, scripted_openai)

    def cancel_then_call_a_tool(body: dict[str, Any]) -> dict[str, Any]:
        runs = services.aws.dynamodb.scan(TableName=services.aws.table_name("runs"))["Items"]
        running = [r["run_id"]["S"] for r in runs if r.get("status", {}).get("S") == "RUNNING"]
        RunStore(services).cancel("alice", running[0])
        return calls(("query_logs", window()))

    scripted_openai.script = [route(), cancel_then_call_a_tool, calls(("query_logs", window()))]
    outcome = await harness.ask("sse", QUESTION)
    assert outcome["error"]["code"] == "CANCELLED" and outcome.get("content") is None
    assert len(harness.model_requests()) == 2  # the router and the step in flight when the cancel came
    assert "QUERYING_LOGS" not in outcome["status_codes"]  # the tool the step asked for never ran
    assert harness.run(outcome).status == "CANCELLED"
