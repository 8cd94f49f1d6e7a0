"""The critic: checks a published claim against the evidence it cites and returns accept or reject with
a reason code. Its flow is graph_walk -> llm_prompt -> verdict.

The graph walk follows each citation to the document as it is now: present, changed since the claim
read it (another version), or gone. A claim none of whose citations can be read is rejected
(``evidence_missing``) without asking the model: there is nothing to judge it against. Otherwise the
model judges the claim against the current excerpts with a strict schema; its reason is one of
:data:`REASON_CODES`, never free text. A ``reject`` enqueues ``claim_rejected`` work when
``CRITIC_AUTO_ENQUEUE_ENABLED`` is on, unless the check itself ran from the backlog (loop break).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from flowledger.chat.executors import MAX_EXCERPT_CHARS
from flowledger.knowledge.index import KnowledgeIndex
from flowledger.llm.ports import ChatModel, JsonSchema, Message, ModelError
from flowledger.llm.retry import HarnessRetryPolicies
from flowledger.reasoning.recorder import ReasoningFlowRecorder
from flowledger.research.agents.recording import AgentGaveUp, AgentRecording, recorded, timed
from flowledger.research.agents.researcher import Finding
from flowledger.research.producers import CriticVerdict, on_critic_verdict
from flowledger.services import Services

AGENT = "critic"
# The critic's flows form their own family: a claim check is not another run of the claim's trigger.
TRIGGER_TYPE = "claim_review"
ACCEPT_CODES = ("supported",)
REJECT_CODES = ("unsupported", "contradicted", "evidence_missing", "evidence_changed")
REASON_CODES = ACCEPT_CODES + REJECT_CODES
MAX_CITATIONS = 8
CLAIM_CHECK_SCHEMA = JsonSchema(
    "claim_check",
    {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["accept", "reject"]},
            "reason_code": {"type": "string", "enum": list(REASON_CODES)},
        },
        "required": ["verdict", "reason_code"],
        "additionalProperties": False,
    },
)
INSTRUCTIONS = (
    "You are a critic. Decide whether the claim is supported by the evidence excerpts given, and only by "
    "them. accept with reason_code supported, or reject with unsupported (the evidence does not say it), "
    "contradicted (the evidence says otherwise) or evidence_changed (the documents no longer say it). "
    "Answer with the JSON object only."
)


class CriticGaveUp(AgentGaveUp):
    """The critic could not judge the claim (its model failed or answered outside the schema)."""

    def __init__(self, reason: str) -> None:
        super().__init__("critic", reason)


@dataclass(frozen=True)
class Citation:
    scope: str
    document_id: str
    version: int | None = None  # the version the claim read, when documents have versions


@dataclass(frozen=True)
class Claim:
    """A published claim: what it says, the question it answered, and what it cites."""

    claim_id: str
    trigger_type: str
    trigger_ref: str
    question: str
    statement: str
    citations: tuple[Citation, ...]
    dispatched_from_backlog: bool = False

    @classmethod
    def from_finding(cls, finding: Finding) -> Claim | None:
        """The claim a recommended research finding makes, or None when it made none."""
        if finding.claim_id is None or finding.answer is None:
            return None
        cited = {reference.document_id for reference in finding.answer.references}
        return cls(
            claim_id=finding.claim_id,
            trigger_type=finding.question.trigger_type,
            trigger_ref=finding.question.trigger_ref,
            question=finding.question.question,
            statement=finding.answer.text,
            citations=tuple(
                Citation(e.hit.scope, e.hit.document_id, e.hit.version)
                for e in finding.evidence
                if e.hit.document_id in cited
            ),
            dispatched_from_backlog=finding.question.dispatched_from_backlog,
        )


@dataclass(frozen=True)
class Walked:
    """The citations as they are now."""

    present: tuple[dict[str, Any], ...]
    changed: int
    missing: int


@dataclass(frozen=True)
class Review:
    claim_id: str
    verdict: Literal["accept", "reject"]
    reason_code: str
    flow_id: str | None = None


class Critic:
    """One claim check per call, one flow per check."""

    def __init__(
        self, services: Services, model: ChatModel, recorder: ReasoningFlowRecorder, index: KnowledgeIndex | None = None
    ) -> None:
        self._s = services
        self._model = model
        self._recorder = recorder
        self._index = index or KnowledgeIndex(services)
        self._timeout = services.settings.model_timeout_seconds

    def check(self, claim: Claim) -> Review:
        """Judge ``claim``; raises :class:`CriticGaveUp` (its flow aborted) when it cannot."""
        summary = f"Critic check of a claim on a {claim.trigger_type.replace('_', ' ')} trigger"
        with recorded(self._recorder, TRIGGER_TYPE, f"claim/{claim.claim_id}", summary) as recording:
            review = self._run(claim, recording)
            accepted = review.verdict == "accept"
            recording.flow.outcome(
                "claim_created" if accepted else "no_action",
                f"Claim {'accepted' if accepted else 'rejected'}: {review.reason_code.replace('_', ' ')}",
                confidence=None,
            )
        review = replace(review, flow_id=recording.flow_id)
        on_critic_verdict(
            self._s,
            CriticVerdict(
                claim_id=claim.claim_id,
                verdict=review.verdict,
                rejection_summary=f"Re-research a rejected claim ({review.reason_code}): {claim.question}"[:2000],
                trigger_type=claim.trigger_type,
                dispatched_from_backlog=claim.dispatched_from_backlog,
            ),
        )
        return review

    def _run(self, claim: Claim, recording: AgentRecording) -> Review:
        walked, latency = timed(lambda: self._walk(claim))
        recording.step(
            "graph_walk",
            AGENT,
            f"Followed {len(claim.citations)} citations: {len(walked.present)} present, "
            f"{walked.changed} changed, {walked.missing} gone",
            latency_ms=latency,
            back_refs={"memory_claim_ref": claim.claim_id},
            outputs={"present": len(walked.present), "changed": walked.changed, "missing": walked.missing},
        )
        if not walked.present:
            recording.step(
                "verdict",
                AGENT,
                "Rejected: none of the cited evidence can be read",
                back_refs={"memory_claim_ref": claim.claim_id},
                outputs={"verdict": "reject", "reason_code": "evidence_missing"},
            )
            return Review(claim.claim_id, "reject", "evidence_missing")
        payload = {"claim": claim.statement, "question": claim.question, "evidence": list(walked.present)}
        messages = [Message("system", INSTRUCTIONS), Message("user", json.dumps(payload))]
        try:
            reply, ref, latency = recording.model_call(
                AGENT, self._model, HarnessRetryPolicies.executor_answer(), messages, CLAIM_CHECK_SCHEMA, self._timeout
            )
        except ModelError as exc:
            raise CriticGaveUp("model_unavailable") from exc
        verdict, reason = _judgement(reply.data)
        recording.step(
            "llm_prompt",
            AGENT,
            f"The model judged the claim against {len(walked.present)} excerpts",
            latency_ms=latency,
            back_refs={"llm_call_log_ref": ref, "memory_claim_ref": claim.claim_id},
            outputs=recording.last_model_call,
        )
        recording.step(
            "verdict",
            AGENT,
            f"{'Accepted' if verdict == 'accept' else 'Rejected'}: {reason.replace('_', ' ')}",
            back_refs={"memory_claim_ref": claim.claim_id},
            outputs={"verdict": verdict, "reason_code": reason},
        )
        return Review(claim.claim_id, verdict, reason)

    def _walk(self, claim: Claim) -> Walked:
        readable: dict[tuple[str, str], bool] = {}  # (scope, document id) -> changed since the claim read it
        missing = 0
        for citation in claim.citations[:MAX_CITATIONS]:
            stored = self._index.document(citation.document_id, scope=citation.scope)
            if stored is None:
                missing += 1
                continue
            readable[(citation.scope, citation.document_id)] = (
                citation.version is not None and stored.version != citation.version
            )
        read = self._index.read_documents(claim.statement, list(readable)) if readable else None
        present = tuple(
            {
                "document_id": hit.document_id,
                "title": hit.title,
                "text": hit.excerpt[:MAX_EXCERPT_CHARS],
                "changed_since_claim": readable[(hit.scope, hit.document_id)],
            }
            for hit in (read.documents if read else ())
        )
        return Walked(present, sum(readable.values()), missing)


def _judgement(data: dict[str, Any] | None) -> tuple[Literal["accept", "reject"], str]:
    """The verdict and reason the schema allows; a mismatched pair (accept + a reject code) gives up."""
    verdict = (data or {}).get("verdict")
    reason = (data or {}).get("reason_code")
    if verdict == "accept" and reason in ACCEPT_CODES:
        return "accept", str(reason)
    if verdict == "reject" and reason in REJECT_CODES:
        return "reject", str(reason)
    raise CriticGaveUp("invalid_judgement")
