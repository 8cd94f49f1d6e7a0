"""The research loop's agents on moto, with the model a scripted OpenAI-compatible server on loopback
(the real adapter runs): the researcher, the critic and the correlator, each recording its flow;
the backlog consumer dispatching pulled rows to them; and the loop closing without looping."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import SecretStr

from flowledger.config import CriticDispatchStrategy
from flowledger.identity import Principal
from flowledger.jobs import run_job
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.knowledge.scopes import GLOBAL
from flowledger.llm.openai_adapter import OpenAIChatModel
from flowledger.pathways.store import PathwayStore
from flowledger.reasoning.recorder import NoOpRecorder, ReasoningFlowRecorder
from flowledger.reasoning.service import FlowService
from flowledger.research.agents.correlator import Correlator
from flowledger.research.agents.critic import Citation, Claim, Critic
from flowledger.research.agents.recording import RESEARCH_RECORDER, research_recorder
from flowledger.research.agents.researcher import (
    Evidence,
    Researcher,
    ResearchGaveUp,
    ResearchQuestion,
    composite_k,
    queries_for,
)
from flowledger.research.backlog import Backlog
from flowledger.research.claims import ClaimTriage
from flowledger.research.models import BacklogRow, BacklogStatus
from flowledger.services import Services
from flowledger.store import items

QUESTION = "Why does the HbA1c trend rise after a dose change?"
# Each excerpt holds every salient term of QUESTION: full coverage, so a strong result.
STRONG = {
    "hba1c-1.md": b"# HbA1c trend\n\nThe HbA1c trend can rise after a dose change when adherence drops.",
    "hba1c-2.md": b"# Reading a trend\n\nWhy does HbA1c rise? After a dose change the trend lags by months.",
    "hba1c-3.md": b"# Follow-up\n\nA dose change makes the HbA1c trend rise only after three months.",
}
UNRELATED = {"lunch.md": b"# Lunch\n\nThe canteen opens at noon and serves soup."}


def flags(services: Services, **values: Any) -> None:
    for name, value in values.items():
        services.settings.__dict__[name] = value


def payload(body: dict[str, Any]) -> dict[str, Any]:
    """The JSON the agent sent as its last (user) message."""
    return dict(json.loads(body["messages"][-1]["content"]))


def schema_of(body: dict[str, Any]) -> str:
    return str(body["response_format"]["json_schema"]["name"])


def cite_first(body: dict[str, Any]) -> dict[str, Any]:
    """A knowledge answer citing the first document given, with the invocation id given."""
    request = payload(body)
    first = request["documents"][0]
    return {
        "json": {
            "answer_items": [
                {
                    "text": first["text"][:200],
                    "invocation_id": request["invocation_id"],
                    "document_ids": [first["document_id"]],
                }
            ],
            "limitations": "Scripted.",
        }
    }


def judge(verdict: str, reason: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda body: {"json": {"verdict": verdict, "reason_code": reason}}


@pytest.fixture
def model(scripted_openai: Any) -> OpenAIChatModel:
    return OpenAIChatModel("scripted", "sk-test", scripted_openai.base_url)


@pytest.fixture
def capture(services: Services) -> ReasoningFlowRecorder:
    flags(services, reasoning_flow_capture_enabled=True)
    return research_recorder(services)


def add(services: Services, documents: dict[str, bytes]) -> None:
    index = KnowledgeIndex(services)
    for name, body in documents.items():
        index.add_document(name, body)


ADMIN = Principal(kind="iam", id="arn:aws:iam::123456789012:user/operator")


def steps_of(services: Services, flow_id: str) -> list[dict[str, Any]]:
    """The flow's steps as an operator reads them (parents first)."""
    return [s.model_dump() for s in FlowService(services).admin_flow(ADMIN, flow_id).steps]


def rows(services: Services, status: BacklogStatus) -> list[BacklogRow]:
    table = services.aws.table_name("backlog")
    found = [i for i in services.aws.dynamodb.scan(TableName=table)["Items"] if i["request_id"]["S"].startswith("rq_")]
    return [r for r in (BacklogRow.model_validate(items.from_item(i)) for i in found) if r.status is status]


def researcher(services: Services, model: Any, recorder: ReasoningFlowRecorder) -> Researcher:
    return Researcher(services, model, recorder, scopes=(GLOBAL,))


# ---- composite_k and the queries -------------------------------------------------------------------


def test_composite_k_weighs_strength_agreement_and_breadth() -> None:
    from flowledger.knowledge.index import DocumentHit

    def evidence(coverage: float) -> Evidence:
        return Evidence(DocumentHit("d", "t", 1, "x", 1.0), 1, coverage)

    assert composite_k([], 3, 0) == 0.0
    assert composite_k([evidence(1.0)] * 3, 3, 3) == 1.0
    assert composite_k([evidence(1.0)], 3, 3) == round(0.5 + 0.3 + 0.2 / 3, 4)  # one document: less breadth
    assert composite_k([evidence(1.0)] * 3, 3, 1) == round(0.5 + 0.1 + 0.2, 4)  # one query of three agreed
    assert composite_k([evidence(0.5)] * 3, 3, 3) == 0.75


def test_queries_are_the_question_its_terms_and_the_trigger_ref() -> None:
    queries = queries_for(ResearchQuestion("user_question", "lab/hba1c-trend", QUESTION))
    assert queries[0] == QUESTION and "hba1c" in queries[1] and queries[2] == "lab hba1c trend"
    assert len(queries_for(ResearchQuestion("t", "x", "x"))) == 1  # identical phrasings are one query


# ---- researcher ---------------------------------------------------------------------------------------


def test_a_strong_result_records_retrieval_prompt_and_verdict_and_becomes_a_pathway(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, STRONG | UNRELATED)
    scripted_openai.script = [cite_first]
    finding = researcher(services, model, capture).research(
        ResearchQuestion("user_question", "lab/hba1c-trend", QUESTION)
    )
    assert (finding.outcome, finding.composite_k, finding.hits) == ("recommendation_delivered", 1.0, 3)
    assert finding.answer is not None and len(finding.answer.references) == 1
    ((request),) = scripted_openai.requests
    assert schema_of(request) == "knowledge_answer"
    assert {d["title"] for d in payload(request)["documents"]} == {"HbA1c trend", "Reading a trend", "Follow-up"}
    steps = steps_of(services, finding.flow_id or "")
    assert [s["step_kind"] for s in steps] == ["retrieval", "llm_prompt", "verdict"]
    assert [s["parent_step_ids"] for s in steps[1:]] == [[steps[0]["step_id"]], [steps[1]["step_id"]]]
    assert steps[1]["back_refs"]["llm_call_log_ref"].endswith("/model-1")
    assert (steps[1]["outputs"]["total_tokens"], steps[1]["outputs"]["finish_reason"]) == (18, "stop")
    assert len(steps[0]["outputs"]["document_ids"]) == 3  # the documents retrieved, by id
    assert steps[2]["back_refs"]["memory_claim_ref"] == finding.claim_id
    for step in steps:  # summaries describe the step: counts, never the question or the evidence
        assert "HbA1c" not in step["summary_text"] and "adherence" not in step["summary_text"]
    assert steps[0]["summary_text"] == "Ran 3 queries; 3 documents found by 3 of them"
    (pathway,) = list(PathwayStore.of(services).scan())  # every confidence was 1.0: a pathway
    assert pathway["seed_flow_id"]["S"] == finding.flow_id


def test_a_weak_result_enqueues_deeper_research_once_when_the_producer_is_on(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, UNRELATED)
    question = ResearchQuestion("user_question", "lab/hba1c-trend", QUESTION)
    finding = researcher(services, model, capture).research(question)
    assert (finding.outcome, finding.hits, finding.composite_k) == ("insufficient_evidence", 0, 0.0)
    assert scripted_openai.requests == []  # nothing to synthesise: no model call
    assert Backlog(services).view().status_distribution["pending"] == 0  # producer off
    flags(services, research_auto_enqueue_enabled=True)
    researcher(services, model, capture).research(question)
    view = Backlog(services).view()
    assert view.status_distribution["pending"] == 1
    assert [s["step_kind"] for s in steps_of(services, finding.flow_id or "")] == ["retrieval", "verdict"]


# Five salient terms (ferritin, fall, iron, infusion, course); each note holds two of them, and the trigger
# ref's query finds none: strength 0.4, agreement 2/3, breadth 1, so composite_k is the threshold itself.
AT_THRESHOLD_QUESTION = "Why does ferritin fall after an iron infusion course?"
AT_THRESHOLD = {
    "iron-1.md": b"# Notes\n\nFerritin can fall slowly.",
    "iron-2.md": b"# Notes\n\nAn iron course is long.",
    "iron-3.md": b"# Notes\n\nAn infusion takes a course.",
}


def test_evidence_scoring_exactly_the_threshold_is_recommended_with_a_claim(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, AT_THRESHOLD)
    scripted_openai.script = [cite_first]
    finding = researcher(services, model, capture).research(
        ResearchQuestion("user_question", "q/1", AT_THRESHOLD_QUESTION)
    )
    assert (finding.composite_k, finding.hits) == (0.6, 3)  # under 0.6 is weak; 0.6 is not
    assert finding.outcome == "recommendation_delivered" and finding.claim_id is not None
    verdict = steps_of(services, finding.flow_id or "")[-1]
    assert verdict["summary_text"] == "Evidence score 0.60: recommended"
    assert verdict["back_refs"]["memory_claim_ref"] == finding.claim_id


def test_no_flow_summary_carries_the_question_or_the_claim(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, STRONG)
    scripted_openai.script = [cite_first, judge("reject", "unsupported")]
    finding = researcher(services, model, capture).research(
        ResearchQuestion("user_question", "lab/hba1c-trend", QUESTION)
    )
    review = Critic(services, model, capture).check(claim_on(services, ["hba1c-1.md"]))
    for flow_id in (finding.flow_id, review.flow_id):
        read = FlowService(services).admin_flow(ADMIN, flow_id or "")
        assert read.flow.outcome is not None
        summaries = [read.flow.trigger_summary, read.flow.outcome.summary, *(s.summary_text for s in read.steps)]
        for summary in summaries:  # fixed texts with counts and codes: the question may hold what a patient said
            assert "HbA1c" not in summary and "dose" not in summary and "lags" not in summary, summary
    assert read.flow.trigger_summary == "Critic check of a claim on a user question trigger"


def test_a_run_dispatched_from_the_backlog_never_enqueues(
    services: Services, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    flags(services, research_auto_enqueue_enabled=True)
    question = ResearchQuestion("user_question", "q/1", QUESTION, dispatched_from_backlog=True)
    assert researcher(services, model, capture).research(question).hits == 0
    assert Backlog(services).view().status_distribution["pending"] == 0


def test_an_answer_citing_what_was_not_retrieved_gives_up_and_aborts_the_flow(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, STRONG)

    def cite_unknown(body: dict[str, Any]) -> dict[str, Any]:
        entry = cite_first(body)
        entry["json"]["answer_items"][0]["document_ids"] = ["doc_0000000000000000"]
        return entry

    scripted_openai.script = [cite_unknown]
    with pytest.raises(ResearchGaveUp) as gave_up:
        researcher(services, model, capture).research(ResearchQuestion("user_question", "q/1", QUESTION))
    assert gave_up.value.reason == "citation_check_failed"
    flows = list(services.aws.dynamodb.scan(TableName=services.aws.table_name("flows"))["Items"])
    assert [f["flow_state"]["S"] for f in flows] == ["aborted"]


def test_with_capture_off_nothing_is_recorded_and_the_result_is_the_same(
    services: Services, scripted_openai: Any, model: OpenAIChatModel
) -> None:
    add(services, STRONG)
    scripted_openai.script = [cite_first, cite_first]
    question = ResearchQuestion("user_question", "q/1", QUESTION)
    assert isinstance(research_recorder(services), NoOpRecorder)
    off = researcher(services, model, research_recorder(services)).research(question)
    assert off.flow_id is None
    assert services.aws.dynamodb.scan(TableName=services.aws.table_name("flows"))["Count"] == 0
    flags(services, reasoning_flow_capture_enabled=True)
    on = researcher(services, model, research_recorder(services)).research(question)
    assert on.flow_id is not None
    same = ("outcome", "composite_k", "hits", "queries", "answer")
    assert [getattr(off, f) for f in same] == [getattr(on, f) for f in same]
    assert off.composite_k == 0.9  # "q 1" finds nothing: two of three queries agree


def test_a_recording_failure_never_fails_the_researcher(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, caplog: pytest.LogCaptureFixture
) -> None:
    add(services, STRONG)
    scripted_openai.script = [cite_first]

    class Broken:
        def start(self, body: dict[str, Any]) -> str:
            raise ConnectionError("the flow store is down")

        def step(self, flow_id: str, body: dict[str, Any]) -> None:
            raise AssertionError("never reached")

        def close(self, flow_id: str, body: dict[str, Any]) -> None:
            raise AssertionError("never reached")

    finding = researcher(services, model, ReasoningFlowRecorder(Broken())).research(
        ResearchQuestion("user_question", "q/1", QUESTION)
    )
    assert (finding.outcome, finding.flow_id) == ("recommendation_delivered", None)
    assert any("recording failed" in r.getMessage() for r in caplog.records)


# ---- critic -------------------------------------------------------------------------------------------


def claim_on(services: Services, names: list[str], statement: str = "The HbA1c trend lags a dose change") -> Claim:
    listed = {d.source_name: d for d in KnowledgeIndex(services).all_documents(GLOBAL)}
    return Claim(
        claim_id="clm_test",
        trigger_type="user_question",
        trigger_ref="q/1",
        question=QUESTION,
        statement=statement,
        citations=tuple(Citation(GLOBAL, listed[n].document_id, listed[n].version) for n in names),
    )


def test_the_critic_walks_the_citations_asks_the_model_and_records_its_verdict(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, STRONG)
    scripted_openai.script = [judge("accept", "supported")]
    review = Critic(services, model, capture).check(claim_on(services, ["hba1c-1.md", "hba1c-2.md"]))
    assert (review.verdict, review.reason_code) == ("accept", "supported")
    (request,) = scripted_openai.requests
    assert schema_of(request) == "claim_check"
    assert len(payload(request)["evidence"]) == 2
    steps = steps_of(services, review.flow_id or "")
    assert [s["step_kind"] for s in steps] == ["graph_walk", "llm_prompt", "verdict"]
    assert {s["back_refs"]["memory_claim_ref"] for s in steps} == {"clm_test"}
    assert steps[1]["back_refs"]["llm_call_log_ref"]
    assert (steps[1]["outputs"]["total_tokens"], steps[1]["outputs"]["usage_source"]) == (18, "server")
    assert steps[0]["summary_text"] == "Followed 2 citations: 2 present, 0 changed, 0 gone"


def test_a_claim_whose_evidence_is_gone_is_rejected_without_a_model_call(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, STRONG)
    claim = claim_on(services, ["hba1c-1.md"])
    KnowledgeIndex(services).remove_document(claim.citations[0].document_id)
    review = Critic(services, model, capture).check(claim)
    assert (review.verdict, review.reason_code) == ("reject", "evidence_missing")
    assert scripted_openai.requests == []
    assert [s["step_kind"] for s in steps_of(services, review.flow_id or "")] == ["graph_walk", "verdict"]


def test_a_rejection_enqueues_claim_rejected_work_when_the_critic_producer_is_on(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, STRONG)
    scripted_openai.script = [judge("reject", "unsupported"), judge("reject", "unsupported")]
    critic = Critic(services, model, capture)
    critic.check(claim_on(services, ["hba1c-1.md"]))
    assert Backlog(services).view().status_distribution["pending"] == 0
    flags(services, critic_auto_enqueue_enabled=True)
    critic.check(claim_on(services, ["hba1c-1.md"]))
    row = Backlog(services).pull_next("user:test")
    assert row is not None and (row.reason, row.trigger_ref) == ("claim_rejected", "clm_test")
    assert "unsupported" in row.question_framing and QUESTION in row.question_framing


def test_a_verdict_that_contradicts_its_reason_gives_up(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, STRONG)
    scripted_openai.script = [judge("accept", "contradicted")]
    with pytest.raises(Exception, match="invalid_judgement"):
        Critic(services, model, capture).check(claim_on(services, ["hba1c-1.md"]))


# ---- correlator ---------------------------------------------------------------------------------------


def test_the_correlator_aggregates_the_familys_closed_flows_and_recommends(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    add(services, STRONG)
    scripted_openai.script = [cite_first] * 3
    research = researcher(services, model, capture)
    for n in range(3):
        research.research(ResearchQuestion("user_question", f"q/{n}", QUESTION))
    research.research(ResearchQuestion("other_family", "q/x", "Lunch soup canteen?"))
    scripted_openai.script = [
        lambda body: {"json": {"recommendation": "reuse_pathways", "reason_code": "consistent_success"}}
    ]
    recommendation = Correlator(services, model, capture).correlate("user_question")
    assert (recommendation.recommendation, recommendation.reason_code) == ("reuse_pathways", "consistent_success")
    aggregate = payload(scripted_openai.requests[-1])
    assert aggregate == {
        "trigger_type": "user_question",
        "flows": 3,
        "outcomes": {"recommendation_delivered": 3},
        "aborted": 0,
        "mean_delivered_confidence": 0.9,  # "q n" finds nothing: two of three queries agree
        "distinct_trigger_refs": 3,
    }
    steps = steps_of(services, recommendation.flow_id or "")
    assert [s["step_kind"] for s in steps] == ["aggregation", "llm_prompt", "verdict"]


def test_the_correlators_prompt_step_points_to_the_log_line_of_its_model_call(
    services: Services,
    scripted_openai: Any,
    model: OpenAIChatModel,
    capture: ReasoningFlowRecorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    research = researcher(services, model, capture)
    for n in range(3):  # the knowledge base is empty: three closed flows without a model call
        research.research(ResearchQuestion("user_question", f"q/{n}", QUESTION))
    scripted_openai.script = [
        lambda body: {"json": {"recommendation": "research_deeper", "reason_code": "weak_evidence"}}
    ]
    with caplog.at_level(logging.INFO, logger="flowledger.research.agents"):
        recommendation = Correlator(services, model, capture).correlate("user_question")
    assert (recommendation.recommendation, recommendation.aggregate.flows) == ("research_deeper", 3)
    (logged,) = [r for r in caplog.records if r.getMessage() == "correlator model call"]
    steps = steps_of(services, recommendation.flow_id or "")
    assert [s["step_kind"] for s in steps] == ["aggregation", "llm_prompt", "verdict"]
    ref = str(getattr(logged, "model_call_ref", ""))  # the log line's extra
    assert ref.endswith("/model-1") and steps[1]["back_refs"]["llm_call_log_ref"] == ref
    assert steps[1]["outputs"]["total_tokens"] == getattr(logged, "tokens", None) == 18


def test_too_few_flows_keep_observing_without_a_model_call(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    recommendation = Correlator(services, model, capture).correlate("user_question")
    assert (recommendation.recommendation, recommendation.aggregate.flows) == ("keep_observing", 0)
    assert scripted_openai.requests == []


# ---- the loop, end to end -----------------------------------------------------------------------------


def use_scripted_model(services: Services, scripted_openai: Any) -> None:
    flags(services, openai_base_url=scripted_openai.base_url, openai_api_key=SecretStr("sk-test"))


def test_the_loop_closes_a_weak_result_is_dispatched_rerun_and_completed_with_its_flow(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    use_scripted_model(services, scripted_openai)
    flags(services, research_auto_enqueue_enabled=True, critic_auto_enqueue_enabled=True, backlog_consumer_enabled=True)
    question = ResearchQuestion("user_question", "lab/hba1c-trend", QUESTION)
    weak = researcher(services, model, capture).research(question)  # the knowledge base is empty: weak
    (pending,) = rows(services, BacklogStatus.PENDING)
    add(services, STRONG)  # the evidence arrives before the consumer runs
    scripted_openai.script = [cite_first, judge("accept", "supported")]
    outcome = run_job("backlog_consumer", services)
    assert (outcome["pulled"], outcome["completed"]) == (1, 1)
    row = Backlog(services).get(pending.request_id)
    assert row is not None and row.status is BacklogStatus.COMPLETED
    assert row.completed_flow_id not in (None, weak.flow_id)
    rerun = FlowService(services).admin_flow(ADMIN, row.completed_flow_id or "")
    assert rerun.flow.created_by == RESEARCH_RECORDER.id and rerun.flow.outcome is not None
    assert rerun.flow.outcome.type == "recommendation_delivered"
    assert [schema_of(r) for r in scripted_openai.requests] == ["knowledge_answer", "claim_check"]
    # The re-run's strong flow became a pathway; nothing new was enqueued: the queue is empty.
    assert [p["seed_flow_id"]["S"] for p in PathwayStore.of(services).scan()] == [row.completed_flow_id]
    assert run_job("backlog_consumer", services)["pulled"] == 0


def test_a_weak_rerun_makes_no_claim_and_is_not_sent_to_the_critic(
    services: Services, scripted_openai: Any, model: OpenAIChatModel, capture: ReasoningFlowRecorder
) -> None:
    use_scripted_model(services, scripted_openai)
    flags(services, research_auto_enqueue_enabled=True, critic_auto_enqueue_enabled=True, backlog_consumer_enabled=True)
    researcher(services, model, capture).research(ResearchQuestion("user_question", "lab/hba1c-trend", QUESTION))
    (pending,) = rows(services, BacklogStatus.PENDING)
    add(services, {"dose.md": b"# Dose\n\nA dose is taken daily."})  # one term of five: evidence, but weak
    scripted_openai.script = [cite_first]
    assert run_job("backlog_consumer", services)["completed"] == 1
    row = Backlog(services).get(pending.request_id)
    assert row is not None and row.completed_flow_id is not None
    rerun = FlowService(services).admin_flow(ADMIN, row.completed_flow_id)
    assert rerun.flow.outcome is not None and rerun.flow.outcome.type == "insufficient_evidence"
    verdict = steps_of(services, row.completed_flow_id)[-1]
    assert verdict["step_kind"] == "verdict" and verdict["back_refs"]["memory_claim_ref"] is None
    assert [schema_of(r) for r in scripted_openai.requests] == ["knowledge_answer"]  # no claim: nothing to check


@pytest.mark.parametrize("strategy", [CriticDispatchStrategy.MARK_FOR_REVIEW, CriticDispatchStrategy.RE_RESEARCH])
def test_a_rejected_claim_is_triaged_or_re_researched_and_nothing_loops(
    services: Services,
    scripted_openai: Any,
    model: OpenAIChatModel,
    capture: ReasoningFlowRecorder,
    strategy: CriticDispatchStrategy,
) -> None:
    use_scripted_model(services, scripted_openai)
    flags(
        services,
        research_auto_enqueue_enabled=True,
        critic_auto_enqueue_enabled=True,
        backlog_consumer_enabled=True,
        critic_dispatch_strategy=strategy,
    )
    add(services, STRONG)
    scripted_openai.script = [judge("reject", "unsupported")]
    Critic(services, model, capture).check(claim_on(services, ["hba1c-1.md"]))
    # Re-research rejects again: the loop break keeps it from enqueueing a second time.
    scripted_openai.script = [cite_first, judge("reject", "unsupported")]
    outcome = run_job("backlog_consumer", services)
    if strategy is CriticDispatchStrategy.MARK_FOR_REVIEW:
        assert outcome["marked_for_review"] == 1
        entry = ClaimTriage(services).get("clm_test")
        assert entry is not None and entry.status == "pending" and "unsupported" in entry.rejection_summary
        assert len(scripted_openai.requests) == 1  # the first check only: triage runs no agent
    else:
        assert outcome["completed"] == 1
        assert ClaimTriage(services).get("clm_test") is None
        rerun = scripted_openai.requests[1:]
        assert [schema_of(r) for r in rerun] == ["knowledge_answer", "claim_check"]
        assert QUESTION in payload(rerun[0])["query"]
    assert run_job("backlog_consumer", services)["pulled"] == 0  # bounded: the queue is empty


def test_an_agent_that_gives_up_fails_the_row_with_its_reason(
    services: Services, scripted_openai: Any, capture: ReasoningFlowRecorder
) -> None:
    use_scripted_model(services, scripted_openai)
    flags(services, research_auto_enqueue_enabled=True, backlog_consumer_enabled=True)
    add(services, STRONG)
    weak = ResearchQuestion("user_question", "q/none", "soup canteen noon")  # no term of STRONG: no hits
    Researcher(services, OpenAIChatModel("scripted", "sk-test", scripted_openai.base_url), capture).research(weak)
    scripted_openai.script = [{"status": 500}, {"status": 500}]  # the research model fails, retried once
    add(services, {"soup.md": b"# Soup\n\nThe canteen serves soup at noon."})
    outcome = run_job("backlog_consumer", services)
    assert (outcome["pulled"], outcome["failed_voluntary"]) == (1, 1)
    (row,) = rows(services, BacklogStatus.FAILED_VOLUNTARY)
    assert row.failure_reason == "model_unavailable"
