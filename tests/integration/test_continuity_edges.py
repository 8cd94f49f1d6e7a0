"""Conversation continuity at its edges: what the seed's turns left untested, found by mutating the wiring.

Each test here was written against a mutation of ``continuity/grounding.py``, ``continuity/engines.py``
or the executors that the turns of ``test_continuity_turns`` let through (a skipped check, a bound not
applied, a call made twice, a disclosure dropped). User-visible behaviour goes through ``POST /api/chat``
on moto with the offline model; the budget and cancellation of the grounding itself, which no response
shows apart from its end, are driven on the service. The only fake is at the ``ChatModel`` port: the
offline model behind :class:`Counting`, which counts calls by schema name and may replace a reply.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Generator
from typing import Any

import pytest

from flowledger.chat.executors import Budget, BudgetExhausted, RunCancelled
from flowledger.chat.models import ChatRequest, Intent, StatusCode
from flowledger.continuity.grounding import MAX_EVIDENCE_TOTAL_CHARS, ContinuityService, Grounding
from flowledger.identity import Principal
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.llm.offline import OfflineChatModel
from flowledger.llm.ports import Message, ModelTransportError, Reply
from flowledger.reasoning.recorder import InProcessTransport, ReasoningFlowRecorder
from flowledger.reasoning.service import FlowService
from flowledger.services import Services
from flowledger.store import items
from flowledger.tabular import TABULAR_PLAN_SCHEMA
from flowledger.workspaces.models import MemberChange
from tests.integration.test_continuity_turns import (
    ADMIN,
    ANN,
    BOB,
    POLICY,
    SALES,
    SALES_V2,
    Meanwhile,
    PinnedIntent,
    World,
    follow,
    sources,
    table_turn,
)

Step = Reply | Exception | Callable[[list[Message], Any], Reply]
INVALID_PLAN = Reply(data={"select": "everything"}, model="flowledger-offline-v1")  # not the plan schema


class Counting:
    """The offline model at the port: every call counted (and its messages kept) by schema name.

    ``script`` replaces the first replies of a schema, in order: a Reply is returned, an exception raised,
    a callable answers ``(messages, offline model)``;
    ``on_call`` runs before each call with the schema's name (to cancel a run while a plan is asked for).
    """

    def __init__(
        self,
        inner: Any = None,
        script: dict[str, list[Step]] | None = None,
        on_call: Callable[[str], None] | None = None,
    ) -> None:
        self._inner = inner or OfflineChatModel()
        self._script = {name: list(steps) for name, steps in (script or {}).items()}
        self._on_call = on_call
        self.calls: Counter[str] = Counter()
        self.messages: dict[str, list[list[Message]]] = defaultdict(list)

    name = "flowledger-offline-v1"
    offline = True

    def complete(self, messages: Any, *, schema: Any = None, tools: Any = None, **bounds: Any) -> Reply:
        key = schema.name if schema is not None else "chat"
        self.calls[key] += 1
        self.messages[key].append(list(messages))
        if self._on_call is not None:
            self._on_call(key)
        steps = self._script.get(key)
        if steps:
            step = steps.pop(0)
            if isinstance(step, Exception):
                raise step
            return step if isinstance(step, Reply) else step(list(messages), self._inner)
        return self._inner.complete(messages, schema=schema, tools=tools, **bounds)


@pytest.fixture
def world(services: Services) -> World:
    return World(services)


def run_item(world: World, outcome: dict[str, Any]) -> dict[str, Any]:
    item = world.services.aws.dynamodb.get_item(
        TableName=world.services.aws.table_name("runs"),
        Key={"session_id": {"S": outcome["session_id"]}, "run_id": {"S": outcome["run_id"]}},
    )["Item"]
    return dict(items.from_item(item))


def rows_csv(count: int) -> bytes:
    lines = [f"store-{n},{n}" for n in range(count)]
    return ("store,amount\n" + "\n".join(lines) + "\n").encode()


def selected(query: str, *documents: Any, **fields: Any) -> dict[str, Any]:
    return {"query": query, **selection(*documents, **fields)}


def selection(*documents: Any, **fields: Any) -> dict[str, Any]:
    return {"selection_mode": "selected", "document_ids": [d.document_id for d in documents], **fields}


def drive(stages: Generator[StatusCode, None, Grounding]) -> tuple[list[StatusCode], Grounding]:
    """Run the grounding to its end: the progress codes it yielded and its grounding."""
    codes = []
    while True:
        try:
            codes.append(next(stages))
        except StopIteration as done:
            return codes, done.value


def service(world: World) -> ContinuityService:
    assert world.use_case.continuity is not None
    return world.use_case.continuity


def ground_selection(
    world: World, who: Principal, query: str, documents: list[Any], budget: Budget, cancelled: Callable[[], bool]
) -> tuple[list[StatusCode], Generator[StatusCode, None, Grounding]]:
    """A fresh turn over ``documents`` on the service itself: its preflight, then its grounding."""
    request = ChatRequest(query=query, selection_mode="selected", document_ids=[d.document_id for d in documents])
    preflight = service(world).preflight(who, request, None)
    codes: list[StatusCode] = []
    return codes, service(world).ground(who, "ses_" + "0" * 26, False, request, query, budget, preflight, cancelled)


# ---- the table engine: its correction, its failure, its calls -------------------------------------


def _answer_the_original_request(messages: list[Message], offline: Any) -> Reply:
    # The offline model reads only the last message; the request it answers is the one before the refusal.
    reply: Reply = offline.complete(messages[:2], schema=TABULAR_PLAN_SCHEMA, timeout_seconds=1.0)
    return reply


def test_a_refused_plan_is_corrected_once_with_the_reason(services: Services) -> None:
    model = Counting(script={"tabular_plan": [INVALID_PLAN, _answer_the_original_request]})
    world = World(services, model=model)
    table = world.upload(world.workspace(), "sales.csv", SALES)
    outcome = table_turn(world, ANN, table, "total amount by region")
    assert model.calls["tabular_plan"] == 2
    # The second attempt is the first one plus why its plan was refused.
    correction = json.loads(model.messages["tabular_plan"][1][-1].content)
    assert set(correction) == {"plan_refused"} and correction["plan_refused"]
    assert sources(outcome) == [("sales.csv", "read", "tabular")]
    assert "north" in outcome["content"]["text"].lower()


def test_a_model_failure_on_the_plan_leaves_the_table_unread_and_says_so(services: Services) -> None:
    model = Counting(script={"tabular_plan": [ModelTransportError("the model is down")]})
    world = World(services, model=model)
    table = world.upload(world.workspace(), "sales.csv", SALES)
    outcome = table_turn(world, ANN, table, "total amount by region")
    assert model.calls["tabular_plan"] == 1  # a failed call is not a refused plan: no correction round
    assert sources(outcome) == [("sales.csv", "failed", "tabular")]
    assert "could not be read: sales.csv" in outcome["content"]["limitations"]
    assert world.grounding(outcome)["tabular_plans"] == []


def test_every_model_call_is_on_the_runs_budget_and_a_table_is_planned_once(services: Services) -> None:
    model = Counting()
    world = World(services, model=model)
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by month")
    assert model.calls["tabular_plan"] == 1
    assert run_item(world, first)["budget_usage"]["model_calls"] == sum(model.calls.values())
    before = sum(model.calls.values())
    second = world.ask(ANN, follow(first, "now break that down by region"))
    assert second["status"] == "SUCCESS"
    assert model.calls["tabular_plan"] == 2 and model.calls["history_assessment"] == 1
    assert run_item(world, second)["budget_usage"]["model_calls"] == sum(model.calls.values()) - before


def test_a_table_past_the_model_call_budget_is_not_planned(services: Services) -> None:
    model = Counting()
    world = World(services, model=model, diagnosis_max_model_calls=2)  # the routing call, then one plan
    workspace = world.workspace()
    tables = [world.upload(workspace, f"sales-{n}.csv", SALES) for n in range(2)]
    outcome = world.ask(ANN, selected("total amount by region", *tables))
    assert outcome["error"]["code"] == "BUDGET_EXHAUSTED" and "content" not in outcome
    assert model.calls["tabular_plan"] == 1
    assert run_item(world, outcome)["budget_usage"]["model_calls"] == 2


def test_a_table_cut_to_its_shown_rows_is_partly_covered_said_and_read_again(world: World) -> None:
    table = world.upload(world.workspace(), "stores.csv", rows_csv(60))
    first = table_turn(world, ANN, table, "show me the rows")
    [use] = world.grounding(first)["sources"]
    assert use["evidence_status"] == "partial" and 0 < use["coverage"] < 1
    assert "Only part of these sources was covered: stores.csv." in first["content"]["limitations"]
    # History built on part of a table does not answer a follow-up: the table is read again.
    second = world.ask(ANN, follow(first, "what does that mean?"))
    recorded = world.grounding(second)
    assert "PRIOR_PARTIAL_COVERAGE" in recorded["reasons"] and recorded["decision"] == "tabular"


# ---- the limits checked before the run -----------------------------------------------------------


def test_a_turn_naming_more_tables_than_its_bound_is_a_422_and_writes_no_run(world: World) -> None:
    workspace = world.workspace()
    tables = [world.upload(workspace, f"sales-{n}.csv", SALES) for n in range(6)]
    refused = world.ask(ANN, selected("total amount by region", *tables), status=422)
    assert refused["error"] == "too_many_tables" and "6" in refused["message"]
    assert world.services.aws.dynamodb.scan(TableName=world.services.aws.table_name("runs"))["Items"] == []


def test_include_prior_counts_the_prior_tables_against_the_bound(services: Services) -> None:
    model = Counting()
    world = World(services, model=model)
    workspace = world.workspace()
    tables = [world.upload(workspace, f"sales-{n}.csv", SALES) for n in range(6)]
    first = world.ask(ANN, selected("total amount by region", *tables[:5]))
    assert first["status"] == "SUCCESS" and model.calls["tabular_plan"] == 5
    world.ask(ANN, follow(first, "total amount by month", **selection(tables[5], include_prior=True)), status=422)
    assert model.calls["tabular_plan"] == 5  # nothing was computed on the sixth table


def test_analyze_all_shares_the_answer_models_reading_out(services: Services) -> None:
    model = Counting()
    world = World(services, model=model)
    workspace = world.workspace()
    filler = " ".join(["The walrus count is recorded in every ledger of the harbour office."] * 14)
    for n in range(40):
        world.upload(workspace, f"note-{n}.md", f"# Note {n}\n\n{filler} Number {n}.".encode())
    outcome = world.ask(ANN, {"query": "list the walrus counts", "selection_mode": "all", "action_mode": "analyze"})
    assert outcome["status"] == "SUCCESS" and len(sources(outcome)) == 40
    documents = json.loads(model.messages["knowledge_answer"][0][-1].content)["documents"]
    assert len(documents) == 40
    assert sum(len(document["text"]) for document in documents) <= MAX_EVIDENCE_TOTAL_CHARS


# ---- cancellation and budget of the grounding itself (the service) --------------------------------


def test_a_run_cancelled_between_tables_reads_no_further_table(services: Services) -> None:
    state = {"cancelled": False}
    model = Counting(on_call=lambda name: state.update(cancelled=state["cancelled"] or name == "tabular_plan"))
    world = World(services, model=model)
    workspace = world.workspace()
    tables = [world.upload(workspace, f"sales-{n}.csv", SALES) for n in range(2)]
    codes, stages = ground_selection(world, ANN, "total amount by region", tables, Budget(), lambda: state["cancelled"])
    with pytest.raises(RunCancelled):
        while True:
            codes.append(next(stages))
    assert codes.count(StatusCode.ANALYZING_TABLE) == 1
    assert model.calls["tabular_plan"] == 1


def test_a_run_cancelled_while_a_plan_is_corrected_asks_no_second_plan_and_ends_cancelled(services: Services) -> None:
    state = {"cancelled": False}
    model = Counting(
        script={"tabular_plan": [INVALID_PLAN]},
        on_call=lambda name: state.update(cancelled=state["cancelled"] or name == "tabular_plan"),
    )
    world = World(services, model=model)
    table = world.upload(world.workspace(), "sales.csv", SALES)
    codes, stages = ground_selection(
        world, ANN, "total amount by region", [table], Budget(), lambda: state["cancelled"]
    )
    with pytest.raises(RunCancelled):  # the last table's read is followed by a check too
        while True:
            codes.append(next(stages))
    assert model.calls["tabular_plan"] == 1


def test_the_budget_is_checked_before_a_table_is_planned(services: Services) -> None:
    model = Counting()
    world = World(services, model=model)
    table = world.upload(world.workspace(), "sales.csv", SALES)
    spent = Budget(max_model_calls=3, model_calls=3)
    _, stages = ground_selection(world, ANN, "total amount by region", [table], spent, lambda: False)
    with pytest.raises(BudgetExhausted):
        drive(stages)
    assert model.calls["tabular_plan"] == 0


def test_a_follow_up_with_no_budget_left_asks_the_model_nothing(services: Services) -> None:
    model = Counting()
    world = World(services, model=model)
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by month")
    before = Counter(model.calls)
    query = "now break that down by region"
    request = ChatRequest(query=query, session_id=first["session_id"])
    stages = service(world).ground(
        ANN,
        first["session_id"],
        True,
        request,
        query,
        Budget(max_model_calls=3, model_calls=3),
        service(world).preflight(ANN, request, first["session_id"]),
    )
    with pytest.raises(BudgetExhausted):
        drive(stages)
    assert model.calls == before


# ---- history turns --------------------------------------------------------------------------------


def test_a_history_turn_hands_the_table_plan_on_to_the_next_follow_up(world: World) -> None:
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by month")
    second = world.ask(ANN, follow(first, "what does that mean in simpler words?"))
    assert world.grounding(second)["decision"] == "history"
    third = world.ask(ANN, follow(second, "now break that down by region"))
    assert world.grounding(third)["tabular_plans"][0]["plan"]["group_by"] == ["month", "region"]


def test_with_reruns_off_a_changed_source_is_disclosed_and_its_old_answer_not_reused(services: Services) -> None:
    world = World(services, continuity_native_reruns=False)
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by region")
    assert "150" in first["content"]["text"]  # north: 100 + 50
    world.replace(table, SALES_V2)
    second = world.ask(ANN, follow(first, "what does that mean?"))
    assert sources(second) == [("sales.csv", "changed", None)]
    assert (
        "changed since the previous answer, so its results were not reused: sales.csv"
        in (second["content"]["limitations"])
    )
    assert "150" not in second["content"]["text"] and "999" not in second["content"]["text"]


def test_a_history_answer_is_withheld_when_any_source_it_rested_on_is_revoked(world: World) -> None:
    shared = world.workspace()
    world.workspaces.set_member(ANN, shared, "bob", MemberChange(role="viewer"))
    table = world.upload(shared, "sales.csv", SALES)
    policy = world.upload(world.workspace(owner=BOB), "refunds.md", POLICY, owner=BOB)
    first = world.ask(BOB, selected("total amount by region and the refund policy", table, policy))
    assert "150" in first["content"]["text"]  # the previous answer repeats the table's figures
    executor = world.use_case.executors[Intent.KNOWLEDGE_QUERY]
    world.use_case.executors[Intent.KNOWLEDGE_QUERY] = Meanwhile(
        executor, lambda: world.workspaces.revoke(ANN, shared, "bob")
    )
    second = world.ask(BOB, follow(first, "what does that mean in simpler words?"))
    assert world.grounding(second)["decision"] == "history"
    assert "150" not in second["content"]["text"]
    assert "stopped being available" in second["content"]["text"]


# ---- publishing -----------------------------------------------------------------------------------


def test_a_source_changed_while_the_answer_is_prepared_is_disclosed(world: World) -> None:
    policy = world.upload(world.workspace(), "refunds.md", POLICY)
    executor = world.use_case.executors[Intent.KNOWLEDGE_QUERY]
    newer = b"# Refund policy\n\nRefunds are paid within three days."
    world.use_case.executors[Intent.KNOWLEDGE_QUERY] = Meanwhile(executor, lambda: world.replace(policy, newer))
    outcome = world.ask(ANN, selected("what is the walrus clause?", policy))
    assert outcome["release_outcome"] == "SUCCESS"
    assert "refunds.md changed while this answer was prepared." in outcome["content"]["limitations"]
    assert [(r["document_id"], r["version"]) for r in outcome["content"]["references"]] == [(policy.document_id, 1)]


def test_a_source_revoked_while_prepared_is_recorded_revoked_and_not_remembered(world: World) -> None:
    workspace = world.workspace()
    world.workspaces.set_member(ANN, workspace, "bob", MemberChange(role="viewer"))
    policy = world.upload(workspace, "refunds.md", POLICY)
    executor = world.use_case.executors[Intent.KNOWLEDGE_QUERY]
    world.use_case.executors[Intent.KNOWLEDGE_QUERY] = Meanwhile(
        executor, lambda: world.workspaces.revoke(ANN, workspace, "bob")
    )
    first = world.ask(BOB, selected("what is the walrus clause?", policy))
    assert first["release_outcome"] == "FALLBACK"
    assert [use["outcome"] for use in world.grounding(first)["sources"]] == ["revoked"]
    world.use_case.executors[Intent.KNOWLEDGE_QUERY] = executor
    # The session does not remember a source it may no longer read: the follow-up has no history to rest on.
    second = world.ask(BOB, follow(first, "explain that in simpler words"))
    assert world.grounding(second)["source_reason"] == "NO_GROUNDED_REFS"


def test_include_prior_discloses_a_prior_source_no_longer_readable(world: World) -> None:
    shared = world.workspace()
    world.workspaces.set_member(ANN, shared, "bob", MemberChange(role="viewer"))
    policy = world.upload(shared, "refunds.md", POLICY)
    own = world.upload(world.workspace(owner=BOB), "sales.csv", SALES, owner=BOB)
    first = world.ask(BOB, selected("what is the walrus clause?", policy))
    world.workspaces.revoke(ANN, shared, "bob")
    merged = world.ask(BOB, follow(first, "total amount by region", **selection(own, include_prior=True)))
    assert sorted(sources(merged)) == [("refunds.md", "revoked", None), ("sales.csv", "read", "tabular")]
    assert "no longer have access to them: refunds.md" in merged["content"]["limitations"]
    assert "walrus" not in merged["content"]["text"].lower()


def test_search_never_cites_a_document_the_documents_service_refuses(world: World) -> None:
    workspace = world.workspace()
    ghost = world.upload(workspace, "ghost.md", b"# Ghost\n\nThe narwhal clause was withdrawn.")
    world.documents.delete(ANN, ghost.document_id)
    # What a delete leaves behind when its write committed but reported failure and the index was restored.
    KnowledgeIndex(world.services).add_document(
        "ghost.md", b"# Ghost\n\nThe narwhal clause was withdrawn.", scope=ghost.scope, document_id=ghost.document_id
    )
    outcome = world.ask(ANN, {"query": "what is the narwhal clause?"})
    assert world.grounding(outcome)["search"] is True
    assert "narwhal" not in json.dumps(outcome["content"]).lower()
    assert ghost.document_id not in json.dumps(outcome["content"])


# ---- the decision as recorded ---------------------------------------------------------------------


def test_the_run_records_why_and_whether_a_search_ran(world: World) -> None:
    table = world.upload(world.workspace(), "sales.csv", SALES)
    first = table_turn(world, ANN, table, "total amount by region")
    recorded = world.grounding(first)
    assert (recorded["reasons"], recorded["search"]) == (["EXPLICIT_SELECTION"], False)
    # History answered: the precedence allowed a search, and none ran.
    second = world.ask(ANN, follow(first, "what does that mean in simpler words?"))
    recorded = world.grounding(second)
    assert (recorded["source_reason"], recorded["search"]) == ("HISTORY_THEN_RELEVANCE", False)


def test_the_flow_counts_each_source_outcome(world: World) -> None:
    writer = Principal(kind="user", id="service:chat", scopes=frozenset({"reasoning.write"}))
    world.use_case.recorder = ReasoningFlowRecorder(InProcessTransport(FlowService(world.services), writer))
    workspace = world.workspace()
    table, policy = world.upload(workspace, "sales.csv", SALES), world.upload(workspace, "refunds.md", POLICY)
    first = world.ask(ANN, selected("total amount by month and the refund policy", table, policy))
    second = world.ask(ANN, follow(first, "break that down by region and explain the refund policy"))
    flows = FlowService(world.services).flows_by_trace(second["session_id"], 10, None).flows
    flow = next(f for f in flows if f.trigger_ref == f"chat/{second['run_id']}")
    step = next(
        s
        for s in FlowService(world.services).admin_flow(ADMIN, flow.flow_id).steps
        if s.step_kind == "source_grounding"
    )
    assert step.outputs["source_outcomes"] == {"rerun": 2}


# ---- diagnosis ------------------------------------------------------------------------------------


def test_the_diagnosis_agent_is_given_the_grounded_sources(services: Services) -> None:
    model = Counting(inner=PinnedIntent(Intent.DIAGNOSIS))
    world = World(services, model=model)
    table = world.upload(world.workspace(), "sales.csv", SALES)
    outcome = table_turn(world, ANN, table, "total amount by region")
    assert outcome["intent"] == "DIAGNOSIS"
    task = json.loads(next(m.content for m in model.messages["diagnosis_draft"][0] if m.role == "user"))
    [observation] = task["grounded_sources"]
    assert "north" in json.dumps(observation).lower() and table.document_id in json.dumps(observation)
