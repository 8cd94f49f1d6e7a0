"""The researcher: given a trigger and a question, it retrieves evidence with several queries over the
scopes it may read, synthesises an answer whose every citation is checked against the documents it
retrieved (exactly as the knowledge executor's), and scores the evidence with ``composite_k``.

Its flow is retrieval -> llm_prompt -> verdict. A weak result (no hits, or ``composite_k`` under 0.6)
enqueues deeper research when ``RESEARCH_AUTO_ENQUEUE_ENABLED`` is on, unless the run was itself
dispatched from the backlog (the loop-break marker).

``composite_k`` (0..1) = 0.5 x strength + 0.3 x agreement + 0.2 x breadth, where strength is the mean
coverage of the best three documents (the share of the question's salient terms each one's excerpt
holds: BM25 scores are unbounded and depend on the corpus, coverage does not), agreement the share of
queries that found anything, and breadth the distinct documents found over three. Evidence found by
one phrasing of the question only, or in one document only, scores lower than evidence every phrasing
agrees on and several documents hold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from flowledger.chat.executors import ANSWER_SCHEMA, MAX_EXCERPT_CHARS, ExecutionFailed, verified_answer
from flowledger.chat.models import PublicContent
from flowledger.ids import new_id
from flowledger.knowledge.bm25 import tokenize
from flowledger.knowledge.index import DocumentHit, KnowledgeIndex
from flowledger.knowledge.scopes import GLOBAL, MAX_SCOPES_PER_LOOKUP
from flowledger.llm.ports import ChatModel, Message, ModelError
from flowledger.llm.retry import HarnessRetryPolicies
from flowledger.reasoning.recorder import ReasoningFlowRecorder
from flowledger.reasoning.step_evidence import MAX_RECORDED_DOCUMENTS, clip
from flowledger.research.agents.recording import AgentGaveUp, AgentRecording, recorded, timed
from flowledger.research.producers import WEAK_COMPOSITE_K, ResearchResult, on_research_result
from flowledger.services import Services

AGENT = "researcher"
MAX_QUERIES = 3
HITS_PER_QUERY = 4
EVIDENCE_LIMIT = 6  # documents given to the synthesis
BREADTH_TARGET = 3
INSTRUCTIONS = (
    "You are a research agent. Answer the question only from the documents given. Every answer item "
    "must carry the invocation_id given and the document_ids it relies on, chosen only from those given. "
    "State limitations plainly. Answer with the JSON object only."
)


class ResearchGaveUp(AgentGaveUp):
    """The researcher could not finish (its model failed, or its answer cited what it did not retrieve)."""

    def __init__(self, reason: str) -> None:
        super().__init__("researcher", reason)


@dataclass(frozen=True)
class ResearchQuestion:
    trigger_type: str
    trigger_ref: str
    question: str
    dispatched_from_backlog: bool = False


@dataclass(frozen=True)
class Evidence:
    """One retrieved document: its best hit over every query, how many queries found it, and the share
    of the question's salient terms its excerpt holds."""

    hit: DocumentHit
    queries: int
    coverage: float


@dataclass(frozen=True)
class Gathered:
    """What the retrieval found: the queries run, the evidence (best first) and its score."""

    queries: list[str]
    evidence: tuple[Evidence, ...]
    answered: int  # queries that found anything
    composite_k: float
    latency_ms: int


@dataclass(frozen=True)
class Finding:
    """What one research run concluded; ``flow_id`` is None when nothing was recorded."""

    question: ResearchQuestion
    outcome: Literal["recommendation_delivered", "insufficient_evidence"]
    composite_k: float
    hits: int
    queries: int
    answer: PublicContent | None
    evidence: tuple[Evidence, ...] = field(default=())
    flow_id: str | None = None
    claim_id: str | None = None

    @property
    def weak(self) -> bool:
        return self.hits == 0 or self.composite_k < WEAK_COMPOSITE_K


def queries_for(question: ResearchQuestion) -> list[str]:
    """Up to three phrasings: the question as framed, its salient terms, and the trigger's reference words."""
    candidates = [
        question.question.strip(),
        " ".join(tokenize(question.question)),
        " ".join(tokenize(question.trigger_ref.replace("/", " ").replace("_", " ").replace("-", " "))),
    ]
    return [q for q in dict.fromkeys(candidates) if q][:MAX_QUERIES]


def is_weak(hits: int, composite_k: float, cited: int) -> bool:
    """The one rule of a weak result: no hits, no citation, or ``composite_k`` under ``WEAK_COMPOSITE_K``."""
    return hits == 0 or cited == 0 or composite_k < WEAK_COMPOSITE_K


def coverage(text: str, terms: set[str]) -> float:
    """The share of ``terms`` that ``text`` holds (1.0 for no terms: nothing was asked for)."""
    return len(terms & set(tokenize(text))) / len(terms) if terms else 1.0


def composite_k(evidence: Sequence[Evidence], queries: int, queries_with_hits: int) -> float:
    """The evidence score of the module docstring (0 with no evidence)."""
    if not evidence or not queries:
        return 0.0
    best = sorted((e.coverage for e in evidence), reverse=True)[:BREADTH_TARGET]
    strength = sum(best) / len(best)
    agreement = queries_with_hits / queries
    breadth = min(1.0, len(evidence) / BREADTH_TARGET)
    return round(0.5 * strength + 0.3 * agreement + 0.2 * breadth, 4)


class Researcher:
    """One research run per call, one flow per run."""

    def __init__(
        self,
        services: Services,
        model: ChatModel,
        recorder: ReasoningFlowRecorder,
        index: KnowledgeIndex | None = None,
        scopes: Sequence[str] | None = None,
    ) -> None:
        self._s = services
        self._model = model
        self._recorder = recorder
        self._index = index or KnowledgeIndex(services)
        self._scopes = tuple(scopes) if scopes is not None else None
        self._timeout = services.settings.model_timeout_seconds

    def scopes(self) -> tuple[str, ...]:
        """What the researcher may read: the listed public workspaces and the global knowledge base."""
        if self._scopes is not None:
            return self._scopes
        from flowledger.research.agents.recording import RESEARCH_RECORDER
        from flowledger.workspaces.service import WorkspaceService

        readable = WorkspaceService(self._s).readable_scopes(RESEARCH_RECORDER)
        return (*readable[: MAX_SCOPES_PER_LOOKUP - 1], GLOBAL)

    def research(self, question: ResearchQuestion) -> Finding:
        """Research ``question``; raises :class:`ResearchGaveUp` (its flow aborted) when it cannot finish."""
        summary = f"Research on a {question.trigger_type.replace('_', ' ')} trigger"
        with recorded(self._recorder, question.trigger_type, question.trigger_ref, summary) as recording:
            finding = self._run(question, recording)
            recording.flow.outcome(
                finding.outcome,
                _outcome_summary(finding),
                confidence=finding.composite_k,
            )
        finding = replace(finding, flow_id=recording.flow_id)
        on_research_result(
            self._s,
            ResearchResult(
                trigger_type=question.trigger_type,
                trigger_ref=question.trigger_ref,
                question=question.question,
                hits=finding.hits,
                composite_k=finding.composite_k,
                dispatched_from_backlog=question.dispatched_from_backlog,
            ),
        )
        return finding

    def gather(self, question: ResearchQuestion) -> Gathered:
        """The multi-query retrieval and its evidence score (no model call, nothing recorded)."""
        queries = queries_for(question)
        (evidence, answered), latency = timed(lambda: self._retrieve(queries, set(tokenize(question.question))))
        return Gathered(queries, tuple(evidence), answered, composite_k(evidence, len(queries), answered), latency)

    def _run(self, question: ResearchQuestion, recording: AgentRecording) -> Finding:
        gathered = self.gather(question)
        queries, evidence, score = gathered.queries, list(gathered.evidence), gathered.composite_k
        recording.step(
            "retrieval",
            AGENT,
            f"Ran {len(queries)} queries; {len(evidence)} documents found by {gathered.answered} of them",
            latency_ms=gathered.latency_ms,
            confidence=score,
            outputs={
                "queries": len(queries),
                "documents": len(evidence),
                "composite_k": score,
                "document_ids": [clip(e.hit.document_id, 128) for e in evidence[:MAX_RECORDED_DOCUMENTS]],
            },
        )
        if not evidence:
            recording.step(
                "verdict", AGENT, "No evidence: nothing to synthesise", confidence=0.0, outputs={"weak": True}
            )
            return Finding(question, "insufficient_evidence", 0.0, 0, len(queries), None)
        answer, ref, latency = self.synthesise(question, evidence, recording)
        cited = len(answer.references)
        recording.step(
            "llm_prompt",
            AGENT,
            f"Synthesised an answer citing {cited} of {len(evidence)} documents; every citation checked",
            latency_ms=latency,
            confidence=score,
            back_refs={"llm_call_log_ref": ref},
            outputs={"cited": cited, **recording.last_model_call},
        )
        weak = is_weak(len(evidence), score, cited)
        claim_id = None if weak else new_id("clm_")
        recording.step(
            "verdict",
            AGENT,
            f"Evidence score {score:.2f}: {'too weak to recommend' if weak else 'recommended'}",
            confidence=score,
            outputs={"weak": weak, "composite_k": score},
            back_refs={"memory_claim_ref": claim_id} if claim_id else {},
        )
        outcome: Literal["recommendation_delivered", "insufficient_evidence"] = (
            "insufficient_evidence" if weak else "recommendation_delivered"
        )
        return Finding(question, outcome, score, len(evidence), len(queries), answer, tuple(evidence), None, claim_id)

    def _retrieve(self, queries: list[str], terms: set[str]) -> tuple[list[Evidence], int]:
        """The union of each query's hits (best score per document) and how many queries found any."""
        scopes = self.scopes()
        best: dict[tuple[str, str], DocumentHit] = {}
        found_by: dict[tuple[str, str], int] = {}
        answered = 0
        for query in queries:
            result = self._index.lookup(query, HITS_PER_QUERY, scopes=scopes)
            answered += bool(result.documents)
            for hit in result.documents:
                key = (hit.scope, hit.document_id)
                found_by[key] = found_by.get(key, 0) + 1
                if key not in best or hit.score > best[key].score:
                    best[key] = hit
        evidence = [Evidence(hit, found_by[key], coverage(hit.excerpt, terms)) for key, hit in best.items()]
        evidence.sort(key=lambda e: (-e.queries, -e.hit.score, e.hit.document_id))
        return evidence[:EVIDENCE_LIMIT], answered

    def synthesise(
        self, question: ResearchQuestion, evidence: Sequence[Evidence], recording: AgentRecording
    ) -> tuple[PublicContent, str, int]:
        """The answer from ``evidence``, every citation checked: the answer, its model-call log ref, its latency.

        Raises :class:`ResearchGaveUp` (``model_unavailable`` or ``citation_check_failed``).
        """
        invocation_id = new_id("call_")
        documents = [
            {"document_id": e.hit.document_id, "title": e.hit.title, "text": e.hit.excerpt[:MAX_EXCERPT_CHARS]}
            for e in evidence
        ]
        payload: dict[str, Any] = {"query": question.question, "invocation_id": invocation_id, "documents": documents}
        messages = [Message("system", INSTRUCTIONS), Message("user", json.dumps(payload))]
        try:
            reply, ref, latency = recording.model_call(
                AGENT, self._model, HarnessRetryPolicies.executor_answer(), messages, ANSWER_SCHEMA, self._timeout
            )
        except ModelError as exc:
            raise ResearchGaveUp("model_unavailable") from exc
        try:
            answer = verified_answer(reply.data or {}, invocation_id, {d["document_id"]: d["title"] for d in documents})
        except ExecutionFailed as exc:
            raise ResearchGaveUp("citation_check_failed") from exc
        return answer, ref, latency


def _outcome_summary(finding: Finding) -> str:
    if finding.outcome == "recommendation_delivered":
        cited = len(finding.answer.references) if finding.answer else 0
        return f"Recommended an answer citing {cited} documents (evidence score {finding.composite_k:.2f})"
    return f"Insufficient evidence: {finding.hits} documents, evidence score {finding.composite_k:.2f}"
