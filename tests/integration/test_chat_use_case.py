"""The seed's chat scenarios, through both adapters (SSE and JSON) of the one event generator.

The model is the real OpenAI adapter talking to a scripted OpenAI-compatible server on loopback;
AWS is moto in-process.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import TypeAdapter

from flowledger.api.chat_app import create_app, final_body
from flowledger.chat.executors import DiagnosisExecutor, DiagnosisRelease, Draft, TurnContext
from flowledger.chat.models import ChatEvent, Intent
from flowledger.chat.runs import RunStore
from flowledger.chat.usecase import ChatApplicationUseCase
from flowledger.chat.wiring import build_use_case
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.services import Services

pytestmark = pytest.mark.anyio
USER = {"sub": "alice", "scope": "chat", "patient_id": ""}
EVENTS = TypeAdapter(ChatEvent)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sse", "json"])
def via(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def services(services: Services) -> Services:
    index = KnowledgeIndex(services)
    index.add_document("ledger.md", b"# Ledger\n\nThe audit ledger checkpoints every five minutes into S3.")
    index.add_document("consent.md", b"# Consent\n\nPatients opt in before reading their narratives.")
    return services


class Harness:
    def __init__(self, services: Services, scripted: Any, agent: Any = None) -> None:
        self.services = services
        self.scripted = scripted
        model = OpenAIChatModel("scripted-model", "sk-test", scripted.base_url)
        self.use_case: ChatApplicationUseCase = build_use_case(services, model=model)
        if agent is not None:
            self.use_case.executors[Intent.DIAGNOSIS] = DiagnosisExecutor(agent, DiagnosisRelease())
        self.app = create_app(lambda: services, lambda: self.use_case)

    def client(self, live_url: str | None = None) -> httpx.AsyncClient:
        """In-process by default; over real HTTP (``live_url``) when a test needs frames as they happen."""
        headers = {"x-amzn-request-context": json.dumps({"authorizer": USER})}
        if live_url:
            return httpx.AsyncClient(base_url=live_url, headers=headers, timeout=30)
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://chat.test", headers=headers, timeout=30
        )

    async def ask(self, via: str, query: str, session_id: str | None = None) -> dict[str, Any]:
        """The turn's outcome through one adapter, in the JSON variant's shape."""
        body = {"query": query, **({"session_id": session_id} if session_id else {})}
        async with self.client() as client:
            if via == "json":
                response = await client.post("/api/chat", json=body, headers={"Accept": "application/json"})
                assert response.status_code == 200, response.text
                return dict(response.json())
            response = await client.post("/api/chat", json=body)
            assert response.headers["content-type"].startswith("text/event-stream")
            return final_body(parse_sse(response.text))

    def run(self, outcome: dict[str, Any]) -> Any:
        return RunStore(self.services).get(outcome["session_id"], outcome["run_id"])


def parse_sse(text: str) -> list[ChatEvent]:
    events = []
    for frame in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        event = EVENTS.validate_json(lines["data"])
        assert event.type == lines["event"]
        events.append(event)
    return events


def route(intent: str) -> dict[str, Any]:
    return {"json": {"intent": intent}}


def knowledge_answer(
    call_id: Callable[[str], str] | None = None, doc_ids: Callable[[list[str]], list[str]] | None = None
) -> Callable[[dict[str, Any]], Any]:
    """A scripted answer built from what the executor actually sent (its call id and documents)."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        sent = json.loads(request["messages"][-1]["content"])
        returned = [d["document_id"] for d in sent["documents"]]
        invocation = call_id(sent["invocation_id"]) if call_id else sent["invocation_id"]
        return {
            "json": {
                "answer_items": [
                    {
                        "text": "It checkpoints every five minutes.",
                        "invocation_id": invocation,
                        "document_ids": doc_ids(returned) if doc_ids else returned[:1],
                    }
                ],
                "limitations": "Only the ledger document was consulted.",
            }
        }

    return answer


@pytest.fixture
def harness(services: Services, scripted_openai: Any) -> Harness:
    return Harness(services, scripted_openai)


@pytest.fixture
def live(harness: Harness) -> Iterator[str]:
    """The chat app under uvicorn on a free loopback port (ASGITransport buffers whole responses)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(harness.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


# ---- session and run lifecycle ------------------------------------------------------------------------


async def test_new_session_request(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hello!"}]
    outcome = await harness.ask(via, "hello")
    assert outcome["session_id"].startswith("ses_") and outcome["run_id"].startswith("run_")
    run = harness.run(outcome)
    assert (run.status, run.intent, run.release_outcome) == ("SUCCESS", "SYSTEM_CHAT", "SUCCESS")


async def test_existing_session_request(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hi"}, route("SYSTEM_CHAT"), {"text": "Hi again"}]
    first = await harness.ask(via, "hello")
    second = await harness.ask(via, "hello again", session_id=first["session_id"])
    assert second["session_id"] == first["session_id"] and second["run_id"] != first["run_id"]
    runs = RunStore(harness.services).list_runs("alice", first["session_id"], 10, None).runs
    assert [r.run_id for r in runs] == [second["run_id"], first["run_id"]]


async def test_another_users_session_is_refused(harness: Harness) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hi"}]
    outcome = await harness.ask("json", "hello")
    RunStore(harness.services).create(outcome["session_id"], "run_x", "alice", "q", "m", False)
    with pytest.raises(Exception, match="another user"):
        RunStore(harness.services).create(outcome["session_id"], "run_y", "mallory", "q", "m", False)


async def test_an_invalid_request_is_422_and_writes_nothing(harness: Harness) -> None:
    async with harness.client() as client:
        for body in (
            {"query": ""},
            {"query": "x" * 4001},
            {"query": "q", "session_id": "not-a-session"},
            {"query": "q", "extra": 1},
        ):
            response = await client.post("/api/chat", json=body)
            assert response.status_code == 422 and response.json()["error"] == "validation_error"
    assert harness.services.aws.dynamodb.scan(TableName=harness.services.aws.table_name("runs"))["Count"] == 0


async def test_chat_needs_the_chat_scope(harness: Harness) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=harness.app),
        base_url="http://chat.test",
        headers={"x-amzn-request-context": json.dumps({"authorizer": {"sub": "bob", "scope": "documents"}})},
    ) as client:
        assert (await client.post("/api/chat", json={"query": "q"})).status_code == 403
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=harness.app), base_url="http://chat.test") as c:
        assert (await c.post("/api/chat", json={"query": "q"})).status_code == 401


# ---- router ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("intent", "answer", "routed"),
    [
        ("SYSTEM_CHAT", {"text": "I am the assistant."}, "ROUTED_SYSTEM_CHAT"),
        ("KNOWLEDGE_QUERY", knowledge_answer(), "ROUTED_KNOWLEDGE_QUERY"),
        ("DIAGNOSIS", None, "ROUTED_DIAGNOSIS"),
    ],
)
async def test_three_valid_routes(harness: Harness, via: str, intent: str, answer: Any, routed: str) -> None:
    harness.scripted.script = [route(intent)] + ([answer] if answer else [])
    outcome = await harness.ask(via, "how often does the ledger checkpoint?")
    assert outcome["intent"] == intent and routed in outcome["status_codes"]
    assert len(harness.scripted.requests) == 1 + (1 if answer else 0)  # the router, then at most one answer


async def test_new_topic_overrides_history(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("DIAGNOSIS"), route("KNOWLEDGE_QUERY"), knowledge_answer()]
    first = await harness.ask(via, "why is checkout failing?")
    await harness.ask(via, "  How often does the LEDGER checkpoint?  ", session_id=first["session_id"])
    sent = json.loads(harness.scripted.requests[1]["messages"][-1]["content"])
    assert sent == {
        "query": "  How often does the LEDGER checkpoint?  ",
        "last_intent": "DIAGNOSIS",
        "last_user_query": "why is checkout failing?",
    }
    assert [m["role"] for m in harness.scripted.requests[1]["messages"]] == ["system", "user"]
    assert "tools" not in harness.scripted.requests[1]


async def test_invalid_output_then_valid_route(harness: Harness, via: str) -> None:
    harness.scripted.script = [{"json": {"intent": "WEATHER"}}, route("SYSTEM_CHAT"), {"text": "Hi"}]
    outcome = await harness.ask(via, "hello")
    assert outcome["intent"] == "SYSTEM_CHAT"
    router_calls = harness.scripted.requests[:2]
    assert router_calls[0]["messages"] == router_calls[1]["messages"]
    assert harness.run(outcome).budget_usage["model_calls"] == 3


async def test_two_invalid_outputs(harness: Harness, via: str) -> None:
    harness.scripted.script = [{"raw": "diagnosis?"}, {"json": {"intent": "NOPE"}}, {"text": "never sent"}]
    outcome = await harness.ask(via, "why is it failing?")
    assert outcome["error"]["code"] == "ROUTING_UNAVAILABLE" and "content" not in outcome
    assert len(harness.scripted.requests) == 2  # no executor was called
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.intent) == ("FAILED", "FAILED", None)


@pytest.mark.parametrize("failure", [{"delay": 1.5, "json": {}}, {"drop": True}])
async def test_timeout_or_transport_error_then_valid_route(harness: Harness, via: str, failure: Any) -> None:
    harness.services.settings.__dict__["model_timeout_seconds"] = 0.5
    harness.use_case = build_use_case(harness.services, model=OpenAIChatModel("m", "k", harness.scripted.base_url))
    harness.scripted.script = [failure, route("SYSTEM_CHAT"), {"text": "Hi"}]
    outcome = await harness.ask(via, "hello")
    assert outcome["status"] == "SUCCESS"


# ---- executors -----------------------------------------------------------------------------------------


async def test_system_chat(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "I can help with documents."}]
    outcome = await harness.ask(via, "what can you do?")
    assert outcome["content"] == {"text": "I can help with documents.", "references": [], "limitations": None}
    assert harness.run(outcome).budget_usage == {"model_calls": 2, "tool_calls": 0, "tokens": 36}  # 18 per call
    assert "tools" not in harness.scripted.requests[1]


async def test_knowledge_query(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("KNOWLEDGE_QUERY"), knowledge_answer()]
    outcome = await harness.ask(via, "how often does the ledger checkpoint?")
    assert harness.run(outcome).budget_usage["tool_calls"] == 1  # exactly one lookup_knowledge
    assert len(harness.scripted.requests) == 2  # router + one bounded answer call
    assert "tools" not in harness.scripted.requests[1]


async def test_supported_knowledge_answer(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("KNOWLEDGE_QUERY"), knowledge_answer()]
    outcome = await harness.ask(via, "how often does the ledger checkpoint?")
    content = outcome["content"]
    assert content["text"] == "It checkpoints every five minutes."
    assert [r["title"] for r in content["references"]] == ["Ledger"]
    assert content["limitations"] == "Only the ledger document was consulted."
    assert "call_" not in json.dumps(outcome)


@pytest.mark.parametrize(
    "answer",
    [
        knowledge_answer(call_id=lambda real: "call_01JD0000000000000000000000"),
        knowledge_answer(doc_ids=lambda returned: ["doc_fabricated0000"]),
        knowledge_answer(doc_ids=lambda returned: []),
    ],
)
async def test_fabricated_knowledge_reference(harness: Harness, via: str, answer: Any) -> None:
    harness.scripted.script = [route("KNOWLEDGE_QUERY"), answer]
    outcome = await harness.ask(via, "how often does the ledger checkpoint?")
    assert "content" not in outcome and outcome["error"]["code"] == "EXECUTION_FAILED"
    assert harness.run(outcome).status == "FAILED"


async def test_no_knowledge_evidence(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("KNOWLEDGE_QUERY"), {"text": "must not be asked"}]
    outcome = await harness.ask(via, "quantum gravity")
    assert outcome["content"]["text"].startswith("I could not find anything")
    assert len(harness.scripted.requests) == 1  # no answer call


# ---- diagnosis and release -----------------------------------------------------------------------------


class ConcludingAgent:
    def __init__(self) -> None:
        self.contexts: list[TurnContext] = []

    def diagnose(self, context: TurnContext) -> Draft:
        self.contexts.append(context)
        return Draft(
            conclusion="The payment service times out.",
            scope="checkout",
            limitations="Logs only.",
            observations=2,
            documents=({"document_id": "doc_1", "title": "Runbook"},),
        )


async def test_diagnosis_succeeds_with_a_conclusion(services: Services, scripted_openai: Any, via: str) -> None:
    agent = ConcludingAgent()
    harness = Harness(services, scripted_openai, agent)
    harness.scripted.script = [route("DIAGNOSIS"), route("DIAGNOSIS")]
    first = await harness.ask(via, "why is checkout failing?")
    assert first["release_outcome"] == "SUCCESS" and first["content"]["text"] == "The payment service times out."
    stored = json.loads(
        services.aws.dynamodb.get_item(
            TableName=services.aws.table_name("runs"),
            Key={"session_id": {"S": first["session_id"]}, "run_id": {"S": first["run_id"]}},
        )["Item"]["published_result"]["S"]
    )
    assert set(stored) == {"query", "conclusion", "scope", "limitations", "documents"}
    await harness.ask(via, "and is it fixed now?", session_id=first["session_id"])
    previous = agent.contexts[1].previous_turn
    assert previous is not None and previous.conclusion == "The payment service times out."
    assert agent.contexts[1].query == "and is it fixed now?"


async def test_diagnosis_stops_without_a_conclusion(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("DIAGNOSIS")]
    outcome = await harness.ask(via, "why is checkout failing?")
    run = harness.run(outcome)
    assert (run.status, run.release_outcome) == ("SUCCESS", "FALLBACK")
    assert outcome["content"]["text"].startswith("I could not reach a safe conclusion")
    assert RunStore(harness.services).latest_safe_diagnosis(outcome["session_id"]) is None


# ---- progress, streaming and cancellation --------------------------------------------------------------


async def test_observer_start_and_status_arrive_before_the_run_ends(harness: Harness, live: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"delay": 1.0, "text": "Slow hello"}]
    seen: list[tuple[str, str | None]] = []
    async with harness.client(live) as client, client.stream("POST", "/api/chat", json={"query": "hi"}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "start":
                    run = RunStore(harness.services).get(event["session_id"], event["run_id"])
                    seen.append(("start", run.status if run else None))
                else:
                    seen.append((event["type"], event.get("code")))
    assert seen[0] == ("start", "RUNNING")  # persisted before start is sent, and not finished yet
    assert seen[1] == ("status", "ROUTING")
    assert [kind for kind, _ in seen][-2:] == ["content", "done"]


async def test_client_disconnect_control(harness: Harness, live: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"delay": 1.0, "text": "too late"}]
    ids: dict[str, str] = {}
    async with harness.client(live) as client, client.stream("POST", "/api/chat", json={"query": "hi"}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"start"' in line:
                ids = json.loads(line[6:])
            if "COMPOSING_ANSWER" in line:
                break  # the client goes away while the answer is being composed
    store = RunStore(harness.services)
    for _ in range(50):
        run = store.get(ids["session_id"], ids["run_id"])
        if run and run.status != "RUNNING":
            break
        await asyncio.sleep(0.1)
    assert (run.status, run.release_outcome) == ("CANCELLED", "CANCELLED")


async def test_cancel_route_stops_the_run_and_late_results_cannot_complete_it(harness: Harness, live: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"delay": 1.0, "text": "too late"}]
    async with harness.client(live) as client:
        async with client.stream("POST", "/api/chat", json={"query": "hi"}) as response:
            frames = []
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    frames.append(event)
                    if event["type"] == "start":
                        cancelled = await client.post(f"/api/chat/runs/{event['run_id']}/cancel")
                        assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
        assert frames[-1]["type"] == "error" and frames[-1]["code"] == "CANCELLED"
        again = await client.post(f"/api/chat/runs/{frames[0]['run_id']}/cancel")
        assert again.status_code == 409
        history = await client.get(f"/api/chat/sessions/{frames[0]['session_id']}/runs")
        assert history.json()["runs"][0]["status"] == "CANCELLED"


async def test_last_run_is_fallback_failed_or_cancelled(services: Services, scripted_openai: Any) -> None:
    agent = ConcludingAgent()
    concluding = Harness(services, scripted_openai, agent)
    concluding.scripted.script = [route("DIAGNOSIS")]
    first = await concluding.ask("json", "why is checkout failing?")
    session = first["session_id"]
    fallback = Harness(services, scripted_openai)  # no agent: stops without a conclusion
    fallback.scripted.script = [route("DIAGNOSIS"), {"raw": "?"}, {"raw": "?"}]
    await fallback.ask("json", "and now?", session_id=session)  # a newer FALLBACK run
    await fallback.ask("json", "and now?", session_id=session)  # a newer FAILED run (routing)
    raw = RunStore(services).latest_safe_diagnosis(session)
    assert raw is not None and json.loads(raw)["conclusion"] == "The payment service times out."
    assert RunStore(services).latest_safe_diagnosis("ses_01JD0000000000000000000000") is None


async def test_with_capture_enabled_each_run_records_a_flow(services: Services, scripted_openai: Any) -> None:
    from flowledger.identity import Principal
    from flowledger.reasoning.recorder import InProcessTransport, ReasoningFlowRecorder
    from flowledger.reasoning.service import FlowService

    harness = Harness(services, scripted_openai)
    writer = Principal(kind="user", id="service:chat", scopes=frozenset({"reasoning.write"}))
    harness.use_case.recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(services), writer))
    harness.scripted.script = [route("KNOWLEDGE_QUERY"), knowledge_answer()]
    outcome = await harness.ask("json", "how often does the ledger checkpoint?")
    flows = FlowService(services).flows_by_trace(outcome["session_id"], 10, None).flows
    assert len(flows) == 1 and flows[0].flow_state == "completed"
    dag = FlowService(services).admin_flow(Principal(kind="iam", id="arn:aws:iam::1:user/a"), flows[0].flow_id)
    assert [s.step_kind for s in dag.steps] == ["routing", "knowledge_answer"]
    assert dag.flow.patient_safe_summary is True
    assert "ledger" not in json.dumps(dag.model_dump())  # no user or model text in the flow


async def test_a_failing_recorder_never_fails_the_run(services: Services, scripted_openai: Any) -> None:
    from flowledger.reasoning.recorder import ReasoningFlowRecorder

    class Broken:
        def start(self, body: Any) -> str:
            raise ConnectionError("store down")

        def step(self, flow_id: str, body: Any) -> None:
            raise ConnectionError("store down")

        def close(self, flow_id: str, body: Any) -> None:
            raise ConnectionError("store down")

    harness = Harness(services, scripted_openai)
    harness.use_case.recorder = ReasoningFlowRecorder(Broken())
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hi"}]
    outcome = await harness.ask("sse", "hello")
    assert outcome["status"] == "SUCCESS" and outcome["content"]["text"] == "Hi"


class BudgetAgent:
    def __init__(self, observations: int) -> None:
        self.observations = observations

    def diagnose(self, context: TurnContext) -> Draft:
        context.budget.tool_calls = context.budget.max_tool_calls  # the hard tool budget is spent
        return Draft(
            conclusion=None, scope="checkout", limitations="", observations=self.observations, stopped_by="budget"
        )


async def test_tool_budget_ends_after_finite_checks(services: Services, scripted_openai: Any, via: str) -> None:
    harness = Harness(services, scripted_openai, BudgetAgent(observations=1))
    harness.scripted.script = [route("DIAGNOSIS")]
    outcome = await harness.ask(via, "why is checkout failing?")
    run = harness.run(outcome)
    assert (run.status, run.release_outcome) == ("SUCCESS", "FALLBACK")
    assert run.budget_usage["tool_calls"] == 6
    assert outcome["content"]["text"].startswith("I could not reach a safe conclusion") and "error" not in outcome


async def test_budget_ends_without_safe_publishable_progress(
    services: Services, scripted_openai: Any, via: str
) -> None:
    harness = Harness(services, scripted_openai, BudgetAgent(observations=0))
    harness.scripted.script = [route("DIAGNOSIS")]
    outcome = await harness.ask(via, "why is checkout failing?")
    assert "content" not in outcome and outcome["error"]["code"] == "EXECUTION_FAILED"
    assert (harness.run(outcome).status, harness.run(outcome).release_outcome) == ("FAILED", "FAILED")
