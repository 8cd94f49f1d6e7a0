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
from flowledger.chat.executors import MAX_LIMITATIONS_CHARS, SYSTEM_CHAT_LIMITATION, Executor, ExecutorRun, TurnContext
from flowledger.chat.models import ChatEvent, Intent
from flowledger.chat.router import EXAMPLES
from flowledger.chat.runs import RunStore
from flowledger.chat.usecase import CancelToken, ChatApplicationUseCase
from flowledger.chat.wiring import build_use_case
from flowledger.diagnosis.draft import Claim, Draft, StopReason
from flowledger.diagnosis.executor import DiagnosisExecutor
from flowledger.diagnosis.observations import ObservationLedger
from flowledger.diagnosis.recording import DiagnosisRecording
from flowledger.diagnosis.release import DiagnosisRelease
from flowledger.diagnosis.semantic import SemanticGuard
from flowledger.diagnosis.tools import ToolOutcome, ToolResult
from flowledger.knowledge.index import KnowledgeIndex, LookupResult
from flowledger.llm.offline import OfflineChatModel
from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.llm.ports import Reply
from flowledger.llm.retry import HarnessRetryPolicies
from flowledger.services import Services
from tests.integration.provisioned import ProvisionedStates

pytestmark = pytest.mark.anyio
USER = {"sub": "alice", "scope": "chat", "patient_id": ""}
EVENTS = TypeAdapter(ChatEvent)


@pytest.fixture
def services(services: Services, provisioned_states: ProvisionedStates) -> Services:
    """Two documents in the knowledge index, indexed once for the test process and restored for each test."""

    def add_documents() -> None:
        index = KnowledgeIndex(services)
        index.add_document("ledger.md", b"# Ledger\n\nThe audit ledger checkpoints every five minutes into S3.")
        index.add_document("consent.md", b"# Consent\n\nPatients opt in before reading their narratives.")

    provisioned_states.seeded(services, "two-documents", add_documents)
    return services


class CountingIndex:
    """The real knowledge index, counting the lookups that reach it (the executor's own counter is not proof)."""

    def __init__(self, index: KnowledgeIndex) -> None:
        self._index = index
        self.queries: list[str] = []
        self.results: list[LookupResult] = []

    def lookup(self, query: str, limit: int = 4) -> LookupResult:
        self.queries.append(query)
        result = self._index.lookup(query, limit)
        self.results.append(result)
        return result


class RecordingExecutor:
    """Wraps a real executor and records every call, whether or not it would ask the model anything."""

    def __init__(self, inner: Executor, calls: list[str], name: str) -> None:
        self._inner, self._calls, self._name = inner, calls, name

    def execute(self, context: TurnContext) -> ExecutorRun:
        self._calls.append(self._name)
        return self._inner.execute(context)


class Harness:
    def __init__(self, services: Services, scripted: Any, agent: Any = None, model: Any = None) -> None:
        self.services = services
        self.scripted = scripted
        # Scripts answer as a native tool-calling server would (the next-action mode: test_openai_adapter).
        model = model or OpenAIChatModel("scripted-model", "sk-test", scripted.base_url, tool_calling="native")
        self.agent = agent
        self.index = CountingIndex(KnowledgeIndex(services))
        self.use_case: ChatApplicationUseCase = build_use_case(services, model=model, index=self.index)  # type: ignore[arg-type]
        if agent is not None:
            # The agent port is scripted here; release and its guards are real (the judge always agrees).
            release = DiagnosisRelease(SemanticGuard(AgreeingJudge(), HarnessRetryPolicies.executor_answer(), 5))
            self.use_case.executors[Intent.DIAGNOSIS] = DiagnosisExecutor(agent, release)
        self.executor_calls: list[str] = []
        for intent, executor in list(self.use_case.executors.items()):
            self.use_case.executors[intent] = RecordingExecutor(executor, self.executor_calls, intent.value)
        self.cancel_tokens: list[CancelToken] = []
        self.app = create_app(lambda: services, lambda: self.use_case)

    def capture_cancel_tokens(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Record the token the app hands each turn, so a test can wait for the app to cancel it."""
        run = self.use_case.run

        def recording(principal: Any, request: Any, cancel: CancelToken, *args: Any, **kwargs: Any) -> Any:
            self.cancel_tokens.append(cancel)
            return run(principal, request, cancel, *args, **kwargs)

        monkeypatch.setattr(self.use_case, "run", recording)

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


def held(arrived: threading.Event, release: threading.Event, entry: dict[str, Any]) -> Callable[[Any], Any]:
    """A scripted answer that is sent only once the test releases it: no race with a sleep."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        arrived.set()
        release.wait(timeout=30)  # bounded only so that a failing test cannot hang the suite
        return entry

    return answer


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for something the test caused to be observed by the server (bounded, never asserted on time)."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


def only_run(services: Services) -> Any:
    """The one run a test made (the JSON variant tells nothing before it ends)."""
    found = [
        i
        for i in services.aws.dynamodb.scan(TableName=services.aws.table_name("runs"))["Items"]
        if i["run_id"]["S"].startswith("run_")
    ]
    assert len(found) == 1
    return RunStore(services).get(found[0]["session_id"]["S"], found[0]["run_id"]["S"])


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
    """The use case with a scripted diagnosis agent: these tests are about routing, executors and transport
    (the real agent has its own tests)."""
    return Harness(services, scripted_openai, ScriptedAgent())


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
            {"query": "   "},
            {"query": "\t\n \u3000"},  # whitespace of every kind, ideographic space included
            {"query": "x" * 4001},
            {"query": "q", "session_id": "not-a-session"},
            {"query": "q", "extra": 1},
        ):
            response = await client.post("/api/chat", json=body)
            assert response.status_code == 422 and response.json()["error"] == "validation_error"
        blank = await client.post("/api/chat", json={"query": " \n "}, headers={"Accept": "application/json"})
        assert "query must contain a character other than whitespace" in blank.json()["fields"][0]["msg"]
    assert harness.services.aws.dynamodb.scan(TableName=harness.services.aws.table_name("runs"))["Count"] == 0
    assert harness.scripted.requests == [] and harness.executor_calls == []


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
    messages = harness.scripted.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["system", *["user", "assistant"] * len(EXAMPLES), "user"]
    # Before the query: the instructions and the router's own worked examples, nothing of this session.
    assert "checkout" not in json.dumps(messages[:-1]).lower() and "ledger" not in json.dumps(messages[:-1]).lower()
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
    assert len(harness.scripted.requests) == 2
    assert harness.executor_calls == []  # no executor was called, not even one that asks no model
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.intent) == ("FAILED", "FAILED", None)


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_a_model_server_refusal_is_routing_unavailable_without_a_retry(
    harness: Harness, via: str, status: int
) -> None:
    harness.scripted.script = [{"status": status}, route("SYSTEM_CHAT"), {"text": "never sent"}]
    outcome = await harness.ask(via, "hello")
    assert outcome["error"]["code"] == "ROUTING_UNAVAILABLE" and "content" not in outcome
    assert len(harness.scripted.requests) == 1  # the same request would be refused again: not retried
    assert harness.executor_calls == []
    run = harness.run(outcome)
    assert (run.status, run.release_outcome, run.intent) == ("FAILED", "FAILED", None)
    assert run.budget_usage["model_calls"] == 1
    assert run.reason_code == "model_refused_request"  # beside the public code, for the operator


async def test_a_refused_response_format_steps_down_and_the_turn_answers(harness: Harness, via: str) -> None:
    refused = {"status": 500, "message": "response_format.type: Input should be 'text' or 'json_object'"}
    harness.scripted.script = [refused, route("SYSTEM_CHAT"), {"text": "Hello!"}]
    outcome = await harness.ask(via, "hello")
    assert outcome["content"]["text"] == "Hello!"
    first, second = (r.get("response_format", {}) for r in harness.scripted.requests[:2])
    assert (first["type"], second["type"]) == ("json_schema", "json_object")
    run = harness.run(outcome)
    assert run.model_modes == {"structured_output": "json_object_schema", "tool_calling": "native"}
    assert run.reason_code is None and run.budget_usage["model_calls"] == 2


async def test_a_model_server_refusal_of_the_answer_fails_the_run_cleanly(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"status": 400}, {"text": "never sent"}]
    outcome = await harness.ask(via, "hello")
    assert outcome["error"]["code"] == "EXECUTION_FAILED" and "content" not in outcome
    assert len(harness.scripted.requests) == 2


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
    assert outcome["content"] == {
        "text": "I can help with documents.",
        "references": [],
        "limitations": SYSTEM_CHAT_LIMITATION,
    }
    assert harness.run(outcome).budget_usage == {"model_calls": 2, "tool_calls": 0, "tokens": 36}  # 18 per call
    assert "tools" not in harness.scripted.requests[1]


async def test_knowledge_query(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("KNOWLEDGE_QUERY"), knowledge_answer()]
    outcome = await harness.ask(via, "how often does the ledger checkpoint?")
    assert harness.index.queries == ["how often does the ledger checkpoint?"]  # one lookup, the query unchanged
    assert harness.run(outcome).budget_usage["tool_calls"] == 1
    assert harness.executor_calls == ["KNOWLEDGE_QUERY"]
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
        lambda request: {"json": {"answer_items": "none", "limitations": ""}},  # not a list: not an answer
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


async def test_a_heading_only_match_is_the_no_evidence_answer(
    services: Services, scripted_openai: Any, via: str
) -> None:
    KnowledgeIndex(services).add_document(
        "reconciliation.md", b"# Reconciliation\n\nNothing in this paragraph shares a word with the question."
    )
    harness = Harness(services, scripted_openai, model=OfflineChatModel())
    outcome = await harness.ask(via, "Reconciliation?")
    assert harness.index.results[0].evidence == "FOUND"  # the lookup did match: on the heading alone
    assert outcome["status"] == "SUCCESS" and "error" not in outcome
    assert outcome["content"]["text"] == "I could not find anything about this in the knowledge base."
    assert outcome["content"]["references"] == []


async def test_an_answer_with_no_items_is_the_no_evidence_answer(harness: Harness, via: str) -> None:
    harness.scripted.script = [
        route("KNOWLEDGE_QUERY"),
        {"json": {"answer_items": [], "limitations": "The ledger document does not say; see call_x1."}},
    ]
    outcome = await harness.ask(via, "how often does the ledger checkpoint?")
    assert outcome["content"]["text"].startswith("I could not find anything") and outcome["status"] == "SUCCESS"
    assert "call_" not in json.dumps(outcome)  # the model's own limitations are not published either


async def test_public_knowledge_content_is_bounded_deduplicated_and_free_of_call_ids(
    harness: Harness, via: str
) -> None:
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        sent = json.loads(request["messages"][-1]["content"])
        ledger, call = sent["documents"][0]["document_id"], sent["invocation_id"]
        return {
            "json": {
                "answer_items": [
                    {
                        "text": f"It checkpoints every five minutes ({call}).",
                        "invocation_id": call,
                        "document_ids": [ledger, ledger],
                    },
                    {
                        "text": "Checkpoints go to S3, says call_AbC123xyz.",
                        "invocation_id": call,
                        "document_ids": [ledger],
                    },
                ],
                # Long but no loop (a repeated sentence would be refused as one): bounded when published.
                "limitations": f"Only what {call} returned was read. " + " ".join(f"Caveat {n}." for n in range(500)),
            }
        }

    harness.scripted.script = [route("KNOWLEDGE_QUERY"), answer]
    outcome = await harness.ask(via, "how often does the ledger checkpoint?")
    content = outcome["content"]
    assert [r["title"] for r in content["references"]] == ["Ledger"]  # cited three times, referenced once
    assert len(content["limitations"]) <= MAX_LIMITATIONS_CHARS
    assert content["text"].startswith("It checkpoints every five minutes")
    assert "call_" not in json.dumps(outcome).lower()
    stored = harness.run(outcome).content
    assert stored is not None and "call_" not in stored.model_dump_json().lower()  # nor in the history


async def test_system_chat_text_is_free_of_call_ids(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hello! (call_01JD0000000000000000000000)"}]
    outcome = await harness.ask(via, "hello")
    assert outcome["content"]["text"].startswith("Hello!") and "call_" not in json.dumps(outcome)


# ---- diagnosis and release -----------------------------------------------------------------------------


class AgreeingJudge:
    """The semantic guard's model, for tests about the use case rather than the guards."""

    name, offline = "judge", False

    def complete(self, messages: Any, **kwargs: Any) -> Reply:
        return Reply(data={"supported": True, "reasons": "agreed"})


def observe(ledger: ObservationLedger, text: str = '{"events":["payment timeout"]}', **extra: Any) -> str:
    """Record one safe observation, as a tool call would, and return its id."""
    return ledger.record("query_logs", {}, ToolResult(ToolOutcome.OK, text, rows=1, **extra)).id


class ScriptedAgent:
    """Concludes with its latest conclusion; or stops (``fallback``); or has its run cancelled through the
    store, as the cancel route would, while it works (``cancel_own_run``)."""

    def __init__(self) -> None:
        self.contexts: list[TurnContext] = []
        self.conclusions = ["Conclusion one."]
        self.fallback = False
        self.cancel_own_run: tuple[Services, str] | None = None

    def diagnose(self, context: TurnContext, ledger: ObservationLedger, recording: DiagnosisRecording) -> Any:
        self.contexts.append(context)
        if self.cancel_own_run:
            services, session = self.cancel_own_run
            store = RunStore(services)
            running = [r for r in store.list_runs("alice", session, 10, None).runs if r.status == "RUNNING"]
            store.cancel("alice", running[0].run_id)
        evidence = observe(ledger)
        yield from ()
        if self.fallback:
            return Draft.stopped(StopReason.SATURATED)
        claim = Claim("The logs show a payment timeout.", (evidence,))
        return Draft(conclusion=self.conclusions[-1], claims=(claim,), scope="checkout", limitations="Logs only.")


class ConcludingAgent:
    def __init__(self) -> None:
        self.contexts: list[TurnContext] = []

    def diagnose(self, context: TurnContext, ledger: ObservationLedger, recording: DiagnosisRecording) -> Any:
        self.contexts.append(context)
        runbook = observe(
            ledger, '{"documents":["Runbook"]}', documents=({"document_id": "doc_1", "title": "Runbook"},)
        )
        yield from ()
        claim = Claim("The runbook covers payment timeouts.", (runbook,))
        return Draft(
            conclusion="The payment service times out.", claims=(claim,), scope="checkout", limitations="Logs only."
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
    harness.agent.fallback = True
    harness.scripted.script = [route("DIAGNOSIS")]
    outcome = await harness.ask(via, "why is checkout failing?")
    run = harness.run(outcome)
    assert (run.status, run.release_outcome) == ("SUCCESS", "FALLBACK")
    assert outcome["content"]["text"].startswith("I stopped this diagnosis because further checks returned nothing new")
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


async def test_client_disconnect_control(harness: Harness, live: str, monkeypatch: pytest.MonkeyPatch) -> None:
    harness.capture_cancel_tokens(monkeypatch)
    arrived, release = threading.Event(), threading.Event()
    harness.scripted.script = [route("SYSTEM_CHAT"), held(arrived, release, {"text": "too late"})]
    ids: dict[str, str] = {}
    try:
        async with harness.client(live) as client, client.stream("POST", "/api/chat", json={"query": "hi"}) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: ") and '"start"' in line:
                    ids = json.loads(line[6:])
                if "COMPOSING_ANSWER" in line:
                    # The answer call is in flight, the run not cancelled; now the client goes away.
                    assert await asyncio.to_thread(arrived.wait, 10)
                    assert not harness.cancel_tokens[0].cancelled
                    break
        token = harness.cancel_tokens[0]
        await eventually(lambda: token.cancelled, "the app cancelling the run when the client left")
    finally:
        release.set()  # the model answers only now, after the cancellation: a late result
    store = RunStore(harness.services)
    await eventually(lambda: store.status(ids["session_id"], ids["run_id"]) != "RUNNING", "the run ending")
    run = store.get(ids["session_id"], ids["run_id"])
    assert run is not None and (run.status, run.release_outcome, run.content) == ("CANCELLED", "CANCELLED", None)


async def test_a_json_client_that_disconnects_cancels_its_run(
    harness: Harness, live: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.capture_cancel_tokens(monkeypatch)
    arrived, release = threading.Event(), threading.Event()
    harness.scripted.script = [route("SYSTEM_CHAT"), held(arrived, release, {"text": "too late"})]
    host, port = live.removeprefix("http://").split(":")
    body = json.dumps({"query": "hi"}).encode()
    head = (
        f"POST /api/chat HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"x-amzn-request-context: {json.dumps({'authorizer': USER})}\r\n\r\n"
    )
    try:
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(head.encode() + body)
        await writer.drain()
        assert await asyncio.to_thread(arrived.wait, 10)  # the answer call is in flight
        token = harness.cancel_tokens[0]
        assert not token.cancelled
        writer.close()  # the client goes away before any byte of the answer
        await writer.wait_closed()
        await eventually(lambda: token.cancelled, "the app cancelling the run when the JSON client left")
    finally:
        release.set()
    await eventually(lambda: only_run(harness.services).status != "RUNNING", "the run ending")
    run = only_run(harness.services)
    assert (run.status, run.release_outcome, run.content) == ("CANCELLED", "CANCELLED", None)


async def test_a_json_client_that_stays_gets_its_answer(harness: Harness, live: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hello!"}]
    async with harness.client(live) as client:
        response = await client.post("/api/chat", json={"query": "hi"}, headers={"Accept": "application/json"})
    assert response.json()["content"]["text"] == "Hello!" and only_run(harness.services).status == "SUCCESS"


async def test_session_history_shows_each_runs_query_and_public_answer(
    services: Services, scripted_openai: Any
) -> None:
    harness = Harness(services, scripted_openai, ScriptedAgent())
    harness.scripted.script = [
        route("SYSTEM_CHAT"),
        {"text": "Hello!"},
        route("KNOWLEDGE_QUERY"),
        knowledge_answer(),
        route("DIAGNOSIS"),
        {"raw": "?"},
        {"raw": "?"},
    ]
    session = (await harness.ask("json", "hello"))["session_id"]
    await harness.ask("json", "how often does the ledger checkpoint?", session)
    await harness.ask("json", "why is checkout failing?", session)  # a published diagnosis
    await harness.ask("json", "and now?", session)  # routing fails: FAILED, nothing published
    pages = []
    async with harness.client() as client:
        cursor = None
        while True:
            response = await client.get(
                f"/api/chat/sessions/{session}/runs", params={"limit": 3, **({"cursor": cursor} if cursor else {})}
            )
            assert response.status_code == 200
            pages.append(response.json())
            cursor = response.json()["next_cursor"]
            if not cursor:
                break
    runs = [run for page in pages for run in page["runs"]]
    assert len(pages[0]["runs"]) == 3 and len(runs) == 4  # paginated, newest first
    assert [r["query"] for r in runs] == [
        "and now?",
        "why is checkout failing?",
        "how often does the ledger checkpoint?",
        "hello",
    ]
    assert runs[0]["status"] == "FAILED" and runs[0]["content"] is None
    assert runs[1]["content"] == {"text": "Conclusion one.", "references": [], "limitations": "Logs only."}
    assert runs[2]["content"]["text"] == "It checkpoints every five minutes."
    assert [r["title"] for r in runs[2]["content"]["references"]] == ["Ledger"]
    assert runs[3]["content"] == {"text": "Hello!", "references": [], "limitations": SYSTEM_CHAT_LIMITATION}
    everything = json.dumps(pages)
    assert "published_result" not in everything and '"scope"' not in everything  # never the internals
    assert "call_" not in everything and '"owner"' not in everything


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
    agent = ScriptedAgent()
    harness = Harness(services, scripted_openai, agent)
    harness.scripted.script = [route("DIAGNOSIS")] * 3 + [{"raw": "?"}, {"raw": "?"}] + [route("DIAGNOSIS")] * 2
    session = (await harness.ask("json", "why is checkout failing?"))["session_id"]  # qualifies
    agent.conclusions.append("Conclusion two.")
    await harness.ask("json", "is it the database?", session)  # qualifies, and is the most recent that does
    agent.fallback = True
    await harness.ask("json", "and the queue?", session)  # newer: FALLBACK
    await harness.ask("json", "and now?", session)  # newer: FAILED (routing)
    agent.fallback, agent.cancel_own_run = False, (harness.services, session)
    agent.conclusions.append("A conclusion of a cancelled run.")
    await harness.ask("json", "and the cache?", session)  # newer: CANCELLED while it concluded
    statuses = [(r.status, r.release_outcome) for r in RunStore(services).list_runs("alice", session, 10, None).runs]
    assert statuses == [
        ("CANCELLED", "CANCELLED"),
        ("FAILED", "FAILED"),
        ("SUCCESS", "FALLBACK"),
        ("SUCCESS", "SUCCESS"),
        ("SUCCESS", "SUCCESS"),
    ]
    raw = RunStore(services).latest_safe_diagnosis(session)
    assert raw is not None and json.loads(raw)["conclusion"] == "Conclusion two."
    agent.cancel_own_run = None
    await harness.ask("json", "so what was it?", session)
    previous = agent.contexts[-1].previous_turn
    assert previous is not None and previous.conclusion == "Conclusion two."  # what the next diagnosis gets
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
    summaries = [dag.flow.trigger_summary, *(s.summary_text for s in dag.steps)]
    assert "ledger" not in json.dumps(summaries)  # no user or model text in a summary (the query is a sealed input)


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


@pytest.mark.parametrize("failing_call", ["router", "answer"])
async def test_a_run_the_cancel_route_ended_streams_cancelled_whatever_failed_after(
    harness: Harness, via: str, failing_call: str
) -> None:
    """The cancel route wins the race while a model call is in flight, then that call fails: one story."""

    def cancel_then_refuse(body: dict[str, Any]) -> dict[str, Any]:
        runs = harness.services.aws.dynamodb.scan(TableName=harness.services.aws.table_name("runs"))["Items"]
        running = [r["run_id"]["S"] for r in runs if r.get("status", {}).get("S") == "RUNNING"]
        RunStore(harness.services).cancel("alice", running[0])
        return {"status": 401, "message": "Incorrect API key provided"}

    first = [cancel_then_refuse] if failing_call == "router" else [route("SYSTEM_CHAT"), cancel_then_refuse]
    harness.scripted.script = first
    outcome = await harness.ask(via, "hello")
    assert outcome["error"]["code"] == "CANCELLED" and outcome.get("content") is None
    run = harness.run(outcome)
    assert (run.status, run.release_outcome) == ("CANCELLED", "CANCELLED")


# ---- the flow a turn names ----------------------------------------------------------------------


async def stream_events(harness: Harness, query: str) -> list[ChatEvent]:
    async with harness.client() as client:
        response = await client.post("/api/chat", json={"query": query})
    return parse_sse(response.text)


def recording(harness: Harness, transport: Any = None) -> None:
    from flowledger.identity import Principal
    from flowledger.reasoning.recorder import InProcessTransport, ReasoningFlowRecorder
    from flowledger.reasoning.service import FlowService

    writer = Principal(kind="user", id="service:chat", scopes=frozenset({"reasoning.write"}))
    harness.use_case.recorder = ReasoningFlowRecorder(
        transport or InProcessTransport(FlowService(harness.services), writer)
    )


async def test_the_flow_named_at_the_start_is_the_flow_written_and_the_run_keeps_it(
    services: Services, scripted_openai: Any
) -> None:
    from flowledger.identity import Principal
    from flowledger.reasoning.service import FlowService

    harness = Harness(services, scripted_openai)
    recording(harness)
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hi"}]
    events = await stream_events(harness, "hello")
    start, done = events[0], events[-1]
    assert start.type == "start" and done.type == "done"
    assert start.flow_id is not None and done.flow_id == start.flow_id
    stored = FlowService(services).admin_flow(Principal(kind="iam", id="arn:aws:iam::1:user/a"), start.flow_id)
    assert stored.flow.trace_id == start.session_id and stored.flow.flow_state == "completed"
    assert harness.run({"session_id": start.session_id, "run_id": start.run_id}).flow_id == start.flow_id
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hi"}]
    answer = await harness.ask("json", "hello again", start.session_id)
    assert answer["flow_id"] is not None and answer["flow_id"] != start.flow_id
    assert harness.run(answer).flow_id == answer["flow_id"]


async def test_with_capture_off_every_place_says_no_flow(harness: Harness, via: str) -> None:
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hi"}]
    answer = await harness.ask(via, "hello")
    assert "flow_id" in answer and answer["flow_id"] is None  # said, not left out
    assert harness.run(answer).flow_id is None


async def test_a_flow_that_could_not_be_written_is_named_nowhere_once_the_turn_ends(
    services: Services, scripted_openai: Any
) -> None:
    class Down:
        def start(self, body: Any) -> str:
            raise ConnectionError("store down")

        def steps(self, flow_id: str, bodies: Any) -> None:
            raise ConnectionError("store down")

        def close(self, flow_id: str, body: Any) -> None:
            raise ConnectionError("store down")

    harness = Harness(services, scripted_openai)
    recording(harness, Down())
    harness.scripted.script = [route("SYSTEM_CHAT"), {"text": "Hi"}]
    events = await stream_events(harness, "hello")
    start, done = events[0], events[-1]
    assert start.type == "start" and start.flow_id is not None  # the id it was going to have
    assert done.type == "done" and done.status == "SUCCESS" and done.flow_id is None
    assert harness.run({"session_id": start.session_id, "run_id": start.run_id}).flow_id is None
