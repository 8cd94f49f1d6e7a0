"""Conversation continuity through the chat app (the seed's Tests list), on moto and the offline model.

Every turn goes through ``POST /api/chat`` (the JSON variant unless a test names the stream); the
documents are real workspace documents (a CSV converted to Parquet, Markdown indexed in its scope);
what a turn decided is read back from its run item and its answer's source context.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from typing import Any

import httpx
import pytest

from flowledger.api.chat_app import create_app, final_body
from flowledger.chat.executors import Executor, ExecutorRun, TurnContext
from flowledger.chat.models import Intent
from flowledger.chat.runs import RunStore
from flowledger.chat.wiring import build_use_case
from flowledger.identity import Principal
from flowledger.llm.offline import OfflineChatModel
from flowledger.llm.ports import Reply
from flowledger.reasoning.recorder import InProcessTransport, ReasoningFlowRecorder
from flowledger.reasoning.service import FlowService
from flowledger.services import Services
from flowledger.store import items
from flowledger.tabular import TabularColumn, parse_plan, run_plan
from flowledger.workspaces.documents import DocumentService
from flowledger.workspaces.models import (
    DocumentCreate,
    DocumentView,
    MemberChange,
    VersionCreate,
    VisibilityChange,
    WorkspaceCreate,
)
from flowledger.workspaces.service import WorkspaceService
from tests.integration.test_chat_use_case import parse_sse

SALES = (
    b"region,store,month,amount\n"
    b"north,n1,2026-01,100\nnorth,n2,2026-02,50\nsouth,s1,2026-01,70\nsouth,s1,2026-02,30\nwest,w1,2026-01,5\n"
)
SALES_V2 = b"region,store,month,amount\nnorth,n1,2026-01,999\nsouth,s1,2026-01,1\n"
POLICY = (
    b"# Refund policy\n\nRefunds are paid within fourteen days of a return. The walrus clause covers damaged goods."
)


def user(sub: str) -> Principal:
    return Principal(kind="user", id=sub, scopes=frozenset({"documents", "chat"}))


ANN, BOB = user("ann"), user("bob")
ADMIN = Principal(kind="iam", id="arn:aws:iam::1:user/a")


class PinnedIntent:
    """The offline model with the router's answer pinned: the same turn sent down either executor."""

    def __init__(self, intent: Intent) -> None:
        self._inner, self._intent = OfflineChatModel(), intent

    name = "flowledger-offline-v1"
    offline = True

    def complete(self, messages: Any, *, schema: Any = None, tools: Any = None, **bounds: Any) -> Reply:
        if schema is not None and schema.name == "intent_route":
            return Reply(data={"intent": self._intent.value}, model=self.name)
        return self._inner.complete(messages, schema=schema, tools=tools, **bounds)


class Meanwhile:
    """Wraps an executor; once it has answered, ``change`` runs (a revocation or a new version) before publishing."""

    def __init__(self, inner: Executor, change: Any) -> None:
        self._inner, self._change = inner, change

    def execute(self, context: TurnContext) -> ExecutorRun:
        result = yield from self._inner.execute(context)
        self._change()
        return result


class World:
    """A workspace world and a chat app with continuity on."""

    def __init__(self, services: Services, *, model: Any = None, **settings: Any) -> None:
        changed = services.settings.model_copy(update={"enable_mixed_source_conversation_continuity": True, **settings})
        self.services = dataclasses.replace(services, settings=changed)
        self.workspaces = WorkspaceService(self.services)
        self.documents = DocumentService(self.services)
        self.use_case = build_use_case(self.services, model=model or OfflineChatModel())
        self.app = create_app(lambda: self.services, lambda: self.use_case)

    def workspace(self, owner: Principal = ANN, kind: str = "group", **visibility: bool) -> str:
        body = WorkspaceCreate(kind=kind, name="Team", **visibility)  # type: ignore[arg-type]
        return self.workspaces.create(owner, body).workspace_id

    def upload(self, workspace_id: str, name: str, body: bytes, owner: Principal = ANN) -> DocumentView:
        kind = {"csv": "csv", "md": "markdown"}[name.rsplit(".", 1)[1]]
        create = DocumentCreate(
            workspace_id=workspace_id, file_name=name, kind=kind, content_base64=base64.b64encode(body).decode()
        )
        return self.documents.create(owner, create).document

    def replace(self, document: DocumentView, body: bytes, owner: Principal = ANN) -> None:
        kind = "csv" if document.file_name.endswith(".csv") else "markdown"
        self.documents.add_version(
            owner, document.document_id, VersionCreate(kind=kind, content_base64=base64.b64encode(body).decode())
        )

    def ask(self, who: Principal, body: dict[str, Any], via: str = "json", status: int = 200) -> dict[str, Any]:
        """One turn through the chat app; the JSON variant's shape either way."""
        headers = {"x-amzn-request-context": json.dumps({"authorizer": {"sub": who.id, "scope": "chat"}})}

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://chat.test", timeout=60) as client:
                accept = {"Accept": "application/json"} if via == "json" else {}
                return await client.post("/api/chat", json=body, headers={**headers, **accept})

        response = asyncio.run(send())
        assert response.status_code == status, response.text
        if status != 200:
            return dict(response.json())
        if via == "json":
            return dict(response.json())
        return final_body(parse_sse(response.text))

    def grounding(self, outcome: dict[str, Any]) -> dict[str, Any]:
        """The continuity decision as the run item records it."""
        item = self.services.aws.dynamodb.get_item(
            TableName=self.services.aws.table_name("runs"),
            Key={"session_id": {"S": outcome["session_id"]}, "run_id": {"S": outcome["run_id"]}},
        )["Item"]
        return dict(items.from_item(item)["grounding"])

    def runs_of(self, session_id: str) -> int:
        return len(RunStore(self.services).list_runs("ann", session_id, 100, None).runs)


@pytest.fixture
def world(services: Services) -> World:
    return World(services)


def sources(outcome: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """(file name, outcome, engine) of each source the answer's source context lists."""
    context = outcome["content"]["source_context"]
    return [(s["file_name"], s["outcome"], s["engine"]) for s in context["sources"]]


def follow(outcome: dict[str, Any], query: str, **fields: Any) -> dict[str, Any]:
    return {"query": query, "session_id": outcome["session_id"], **fields}


def table_turn(world: World, who: Principal, table: DocumentView, query: str) -> dict[str, Any]:
    outcome = world.ask(who, {"query": query, "selection_mode": "selected", "document_ids": [table.document_id]})
    assert outcome["status"] == "SUCCESS", outcome
    return outcome


# ---- the seed's tests -----------------------------------------------------------------------------


def test_history_sufficient_tabular_follow_up_runs_no_engine(world: World) -> None:
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by region")
    assert "ANALYZING_TABLE" in first["status_codes"]
    second = world.ask(ANN, follow(first, "what does that mean in simpler words?"))
    assert second["status"] == "SUCCESS"
    assert "ANALYZING_TABLE" not in second["status_codes"]
    recorded = world.grounding(second)
    assert (recorded["decision"], recorded["engines_run"], recorded["reasons"]) == ("history", [], ["HISTORY_REPHRASE"])
    assert recorded["tabular_plans"] == []
    assert sources(second) == [("sales.csv", "reused", "history")]
    references = [(r["document_id"], r["title"], r["version"]) for r in second["content"]["references"]]
    assert references == [(table.document_id, "sales.csv (previous answer)", 1)]
    # The previous answer is the evidence: its table figures are what the history answer repeats.
    assert "north" in second["content"]["text"].lower()


def test_fresh_tabular_calculation_follow_up_reruns_the_prior_plan_with_a_new_group_by(world: World) -> None:
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by month")
    prior = world.grounding(first)["tabular_plans"][0]["plan"]
    assert prior["group_by"] == ["month"]
    second = world.ask(ANN, follow(first, "now break that down by region"))
    assert second["status"] == "SUCCESS" and "ANALYZING_TABLE" in second["status_codes"]
    recorded = world.grounding(second)
    assert recorded["decision"] == "tabular" and "NEW_GROUPING" in recorded["reasons"]
    rerun = recorded["tabular_plans"][0]
    assert rerun["plan"]["group_by"] == ["month", "region"]
    assert rerun["plan"]["aggregates"] == prior["aggregates"]  # the prior table's plan, refined
    assert sources(second) == [("sales.csv", "rerun", "tabular")]
    # The stored plan replays to the same rows on the same version.
    _, version, parquet = world.documents.table(ANN, table.document_id)
    replayed = run_plan(parquet, parse_plan(rerun["plan"]), [TabularColumn(**c) for c in version.conversion.columns])
    assert replayed.rows_digest == rerun["rows_digest"]
    assert "south" in second["content"]["text"].lower()


def test_mixed_prior_grounding_requires_both_engines(world: World) -> None:
    workspace = world.workspace()
    table, policy = world.upload(workspace, "sales.csv", SALES), world.upload(workspace, "refunds.md", POLICY)
    first = world.ask(
        ANN,
        {
            "query": "total amount by month and the refund policy",
            "selection_mode": "selected",
            "document_ids": [table.document_id, policy.document_id],
        },
    )
    assert first["status"] == "SUCCESS"
    second = world.ask(ANN, follow(first, "break that down by region and explain the refund policy"))
    recorded = world.grounding(second)
    assert recorded["decision"] == "both" and recorded["engines_run"] == ["narrative", "tabular"]
    assert sorted(sources(second)) == [("refunds.md", "rerun", "narrative"), ("sales.csv", "rerun", "tabular")]


def test_explicit_selection_supersedes_history(world: World) -> None:
    workspace = world.workspace()
    table, policy = world.upload(workspace, "sales.csv", SALES), world.upload(workspace, "refunds.md", POLICY)
    first = table_turn(world, ANN, table, "total amount by region")
    second = world.ask(
        ANN,
        follow(first, "what does the refund policy say?", selection_mode="selected", document_ids=[policy.document_id]),
    )
    assert second["status"] == "SUCCESS"
    assert sources(second) == [("refunds.md", "read", "narrative")]  # the table is not merged in
    assert world.grounding(second)["source_reason"] == "EXPLICIT_SELECTION"
    # The newly selected document is now the conversation's grounding: a follow-up rests on it alone.
    third = world.ask(ANN, follow(second, "what does that mean?"))
    assert [name for name, _, _ in sources(third)] == ["refunds.md"]
    # include_prior merges the previous sources in, explicitly.
    merged = world.ask(
        ANN,
        follow(
            third,
            "total amount by region and the walrus clause",
            selection_mode="selected",
            document_ids=[table.document_id],
            include_prior=True,
        ),
    )
    assert sorted(name for name, _, _ in sources(merged)) == ["refunds.md", "sales.csv"]


def test_group_membership_revoked_between_turns(world: World) -> None:
    workspace = world.workspace()
    world.workspaces.set_member(ANN, workspace, "bob", MemberChange(role="viewer"))
    table = world.upload(workspace, "sales.csv", SALES)
    first = table_turn(world, BOB, table, "total amount by region")
    world.workspaces.revoke(ANN, workspace, "bob")
    second = world.ask(BOB, follow(first, "now break that down by month"))
    assert "ANALYZING_TABLE" not in second["status_codes"]  # nothing is computed on a revoked table
    assert sources(second) == [("sales.csv", "revoked", None)]
    assert "no longer have access" in second["content"]["limitations"]
    assert "ACCESS_REVOKED" in world.grounding(second)["outcomes"]
    assert "north" not in second["content"]["text"].lower()  # nothing of the table is repeated
    # The loss is said once: the conversation now has no grounded source, and the next turn searches.
    third = world.ask(BOB, follow(second, "and by store?"))
    assert "no longer have access" not in (third["content"]["limitations"] or "")
    assert world.grounding(third)["source_reason"] == "NO_GROUNDED_REFS"


def test_public_workspace_visibility_revoked(world: World) -> None:
    workspace = world.workspace(kind="public", visible=True)
    policy = world.upload(workspace, "refunds.md", POLICY)
    first = world.ask(
        BOB, {"query": "what is the walrus clause?", "selection_mode": "selected", "document_ids": [policy.document_id]}
    )
    assert sources(first) == [("refunds.md", "read", "narrative")]
    world.workspaces.set_visibility(ANN, workspace, VisibilityChange(visible=False))
    second = world.ask(BOB, follow(first, "explain that in simpler words"))
    assert sources(second) == [("refunds.md", "revoked", None)]
    assert "no longer have access" in second["content"]["limitations"]
    assert "walrus" not in second["content"]["text"].lower()


def test_source_version_changed_between_turns_is_read_again_and_said(world: World) -> None:
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by region")
    world.replace(table, SALES_V2)
    second = world.ask(ANN, follow(first, "what does that mean?"))  # history would do, but the table changed
    recorded = world.grounding(second)
    assert "SOURCE_VERSION_CHANGED" in recorded["reasons"] and recorded["decision"] == "tabular"
    assert recorded["outcomes"] == ["NEW_VERSION"]
    context = second["content"]["source_context"]["sources"]
    assert [(s["outcome"], s["version"]) for s in context] == [("rerun", 2)]
    assert "changed since the previous answer" in second["content"]["limitations"]
    assert "999" in second["content"]["text"]


def test_no_current_selection_and_no_grounded_refs_searches_what_the_caller_may_read(world: World) -> None:
    mine = world.workspace()
    world.upload(mine, "refunds.md", POLICY)
    others = world.workspace(owner=BOB)
    world.upload(others, "secret.md", b"# Secret\n\nThe walrus clause of Bob's team is private.", owner=BOB)
    outcome = world.ask(ANN, {"query": "what is the walrus clause?"})
    recorded = world.grounding(outcome)
    assert (recorded["basis"], recorded["source_reason"]) == ("relevance", "NO_GROUNDED_REFS")
    assert recorded["search"] is True
    assert sources(outcome) == [("refunds.md", "read", "narrative")]  # Bob's workspace is not searched
    assert "private" not in outcome["content"]["text"]


def test_standard_and_streaming_turns_make_the_same_decision(world: World) -> None:
    table = world.upload(world.workspace(), "sales.csv", SALES)
    decisions = []
    for via in ("json", "sse"):
        first = world.ask(
            ANN,
            {"query": "total amount by month", "selection_mode": "selected", "document_ids": [table.document_id]},
            via,
        )
        second = world.ask(ANN, follow(first, "now break that down by region"), via)
        recorded = world.grounding(second)
        decisions.append(
            (recorded["decision"], recorded["reasons"], recorded["tabular_plans"][0]["plan"], second["content"])
        )
    assert decisions[0] == decisions[1]


def test_knowledge_and_diagnosis_make_the_same_decision(services: Services) -> None:
    recorded = []
    for intent in (Intent.KNOWLEDGE_QUERY, Intent.DIAGNOSIS):
        world = World(services, model=PinnedIntent(intent))
        table = world.upload(world.workspace(), "sales.csv", SALES)
        first = table_turn(world, ANN, table, "total amount by month")
        second = world.ask(ANN, follow(first, "now break that down by region"))
        assert second["intent"] == intent.value
        decision = world.grounding(second)
        recorded.append((decision["decision"], decision["reasons"], decision["tabular_plans"][0]["plan"]))
    assert recorded[0] == recorded[1]
    assert recorded[0][0] == "tabular"


def test_selection_panel_open_or_closed_sends_the_same_sources(world: World) -> None:
    workspace = world.workspace()
    table, policy = world.upload(workspace, "sales.csv", SALES), world.upload(workspace, "refunds.md", POLICY)
    body = {"query": "total amount by region", "selection_mode": "selected", "document_ids": [table.document_id]}
    closed = world.ask(ANN, body)
    opened = world.ask(ANN, {**body, "panel_open": True})
    assert world.grounding(closed)["sources"] == world.grounding(opened)["sources"]
    assert closed["content"] == opened["content"]
    assert policy.document_id not in json.dumps(opened["content"])


# ---- beyond the seed's list -----------------------------------------------------------------------


def test_a_re_upload_resolves_to_the_current_revision(world: World) -> None:
    policy = world.upload(world.workspace(), "refunds.md", POLICY)
    world.replace(policy, b"# Refund policy\n\nRefunds are paid within three days. The narwhal clause is new.")
    outcome = world.ask(
        ANN, {"query": "which clause is new?", "selection_mode": "selected", "document_ids": [policy.document_id]}
    )
    assert "narwhal" in outcome["content"]["text"] and "walrus" not in outcome["content"]["text"]
    assert [(r["document_id"], r["version"]) for r in outcome["content"]["references"]] == [(policy.document_id, 2)]


def test_analyze_all_over_its_limit_is_a_422_and_writes_no_run(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # The limit (100 documents) at its boundary is tests/unit/test_continuity_precedence.py's; here, a lower one
    # spares 95 uploads and still counts the workspace the store holds.
    monkeypatch.setattr("flowledger.continuity.precedence.MAX_ANALYZE_ALL_DOCUMENTS", 5)
    workspace = world.workspace()
    for n in range(6):
        world.upload(workspace, f"note-{n}.md", f"# Note {n}\n\nNumber {n}.".encode())
    refused = world.ask(
        ANN, {"query": "summarise everything", "selection_mode": "all", "action_mode": "analyze"}, status=422
    )
    assert refused["error"] == "analyze_limit_exceeded"
    assert "at most 5 documents and you may read 6" in refused["message"]
    runs = world.services.aws.dynamodb.scan(TableName=world.services.aws.table_name("runs"))["Items"]
    assert runs == []


def test_analyze_all_reads_every_readable_document_and_chat_all_is_relevance_bounded(world: World) -> None:
    workspace = world.workspace()
    for n in range(6):
        world.upload(workspace, f"note-{n}.md", f"# Note {n}\n\nThe walrus count is {n}.".encode())
    analyzed = world.ask(ANN, {"query": "list the walrus counts", "selection_mode": "all", "action_mode": "analyze"})
    assert sorted(name for name, _, _ in sources(analyzed)) == [f"note-{n}.md" for n in range(6)]
    chatted = world.ask(ANN, {"query": "list the walrus counts", "selection_mode": "all"})
    assert 0 < len(sources(chatted)) <= 4 and world.grounding(chatted)["source_reason"] == "ALL_RELEVANCE_BOUNDED"


def test_compare_without_source_and_targets_is_a_422(world: World) -> None:
    refused = world.ask(ANN, {"query": "compare them", "action_mode": "compare", "selection_mode": "all"}, status=422)
    assert refused["error"] == "validation_error"
    assert "explicit source" in json.dumps(refused)


def test_an_unreadable_selected_document_is_a_404_and_writes_no_run(world: World) -> None:
    secret = world.upload(world.workspace(owner=BOB), "secret.md", b"# Secret\n\nBob only.", owner=BOB)
    refused = world.ask(
        ANN, {"query": "what is in it?", "selection_mode": "selected", "document_ids": [secret.document_id]}, status=404
    )
    assert secret.document_id in refused["message"]
    assert world.services.aws.dynamodb.scan(TableName=world.services.aws.table_name("runs"))["Items"] == []


def test_a_source_revoked_while_the_answer_is_prepared_is_not_published(world: World) -> None:
    workspace = world.workspace()
    world.workspaces.set_member(ANN, workspace, "bob", MemberChange(role="viewer"))
    policy = world.upload(workspace, "refunds.md", POLICY)
    executor = world.use_case.executors[Intent.KNOWLEDGE_QUERY]
    world.use_case.executors[Intent.KNOWLEDGE_QUERY] = Meanwhile(
        executor, lambda: world.workspaces.revoke(ANN, workspace, "bob")
    )
    outcome = world.ask(
        BOB, {"query": "what is the walrus clause?", "selection_mode": "selected", "document_ids": [policy.document_id]}
    )
    assert outcome["release_outcome"] == "FALLBACK"
    assert "walrus" not in outcome["content"]["text"].lower()
    assert "stopped being available" in outcome["content"]["text"]


def test_with_native_reruns_off_a_follow_up_uses_history_and_search_only(services: Services) -> None:
    world = World(services, continuity_native_reruns=False)
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by month")
    second = world.ask(ANN, follow(first, "now break that down by region"))
    assert "ANALYZING_TABLE" not in second["status_codes"]
    recorded = world.grounding(second)
    assert recorded["engines_run"] == ["narrative"] and recorded["search"] is True  # the fallback search
    assert ("sales.csv", "reused", "history") in sources(second)


def test_with_continuity_off_source_fields_are_refused_and_plain_turns_are_unchanged(services: Services) -> None:
    world = World(services, enable_mixed_source_conversation_continuity=False)
    refused = world.ask(ANN, {"query": "what?", "selection_mode": "all"}, status=422)
    assert refused["error"] == "continuity_disabled"
    plain = world.ask(ANN, {"query": "hello"})
    assert "source_context" not in plain["content"]
    assert "RESOLVING_SOURCES" not in plain["status_codes"]


def test_the_flow_records_the_grounding_step_with_codes_only(world: World) -> None:
    writer = Principal(kind="user", id="service:chat", scopes=frozenset({"reasoning.write"}))
    world.use_case.recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(world.services), writer))
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by month")
    second = world.ask(ANN, follow(first, "now break that down by region"))
    flows = FlowService(world.services).flows_by_trace(second["session_id"], 10, None).flows
    flow = next(f for f in flows if f.trigger_ref == f"chat/{second['run_id']}")
    steps = list(FlowService(world.services).admin_flow(ADMIN, flow.flow_id).steps)
    assert [s.step_kind for s in steps][:2] == ["routing", "source_grounding"]
    grounding = steps[1]
    assert grounding.outputs["decision"] == "tabular" and "NEW_GROUPING" in grounding.outputs["reasons"]
    assert grounding.outputs["source_outcomes"] == {"rerun": 1}
    assert grounding.parent_step_ids == [steps[0].step_id]
    # Open fields hold codes, counts and ids only: no file name, no query, no figure of the table.
    open_outputs = {k: v for k, v in grounding.outputs.items() if k not in grounding.pii_fields.outputs}
    written = json.dumps([grounding.summary_text, open_outputs])
    assert "sales" not in written and "region" not in written.replace("NEW_GROUPING", "") and "north" not in written
    # The plan the table ran and the evidence it gave are recorded, sealed.
    assert (grounding.pii_fields.inputs, grounding.pii_fields.outputs) == (["table_plans"], ["documents"])
    assert "region" in json.dumps(grounding.inputs["table_plans"]) and grounding.outputs["documents"]


class SmallTalkFirst:
    """A weak model's habit: it routes to SYSTEM_CHAT whenever it may; records the intents it was offered.

    ``obeys``: False is a server that does not enforce the schema (the model answers SYSTEM_CHAT anyway).
    """

    def __init__(self, obeys: bool = True) -> None:
        self._inner, self._obeys, self.offered = OfflineChatModel(), obeys, []

    name = "flowledger-offline-v1"
    offline = True

    def complete(self, messages: Any, *, schema: Any = None, tools: Any = None, **bounds: Any) -> Reply:
        if schema is not None and schema.name == "intent_route":
            offered = schema.schema["properties"]["intent"]["enum"]
            self.offered.append(offered)
            if "SYSTEM_CHAT" in offered or not self._obeys:
                return Reply(data={"intent": "SYSTEM_CHAT"}, model=self.name)
        return self._inner.complete(messages, schema=schema, tools=tools, **bounds)


@pytest.mark.parametrize(
    "sources",
    [
        {"selection_mode": "selected", "document_ids": ["POLICY"]},
        {"selection_mode": "all", "action_mode": "analyze"},
        {"selection_mode": "selected", "document_ids": ["POLICY"], "include_prior": True},
    ],
    ids=["selected", "all", "include_prior"],
)
def test_a_turn_that_names_its_sources_is_never_answered_by_system_chat(
    services: Services, sources: dict[str, Any]
) -> None:
    model = SmallTalkFirst()
    world = World(services, model=model)
    policy = world.upload(world.workspace(), "policy.md", POLICY)
    body = {k: [policy.document_id] if v == ["POLICY"] else v for k, v in sources.items()}
    first = world.ask(ANN, {"query": "hello, what is in here?", **body})
    # The router chose among the grounded executors only, and the answer read the sources.
    assert model.offered[-1] == ["KNOWLEDGE_QUERY", "DIAGNOSIS"]
    assert first["intent"] == "KNOWLEDGE_QUERY" and first["status"] == "SUCCESS"
    assert [s["file_name"] for s in first["content"]["source_context"]["sources"]] == ["policy.md"]
    # Without a named source the same greeting is small talk, and says it was checked against nothing.
    chat = world.ask(ANN, {"query": "hello, what is in here?", "session_id": first["session_id"]})
    assert model.offered[-1] == ["SYSTEM_CHAT", "KNOWLEDGE_QUERY", "DIAGNOSIS"] and chat["intent"] == "SYSTEM_CHAT"
    assert chat["content"]["limitations"].startswith("Not checked against any document")


def test_a_server_that_ignores_the_narrowed_routes_fails_the_turn_closed(services: Services) -> None:
    world = World(services, model=SmallTalkFirst(obeys=False))
    policy = world.upload(world.workspace(), "policy.md", POLICY)
    outcome = world.ask(ANN, {"query": "hi", "selection_mode": "selected", "document_ids": [policy.document_id]})
    assert outcome["error"]["code"] == "ROUTING_UNAVAILABLE" and outcome.get("content") is None
    run = RunStore(world.services).get(outcome["session_id"], outcome["run_id"])
    assert run is not None and (run.status, run.reason_code) == ("FAILED", "model_invalid_output")
