"""Diagnosis release: the only way a diagnosis leaves the server, as a PublishedResult or a SafeFallback.

A draft with a conclusion goes through the EvidenceGuard (deterministic) and then the SemanticGuard
(a model judge); only if both accept is a bounded :class:`PublishedResult` built and the run ends
SUCCESS with it. Every other ending is decided here, not by the chat use case:

- a stop after at least one safe observation, or a refused draft → a SafeFallback (SUCCESS +
  FALLBACK, no PublishedResult) whose fixed text says truthfully why and what was checked;
- a hard budget limit, an invalid draft or an unavailable model *before* any safe observation →
  fail closed (:class:`ExecutionFailed`): nothing is fabricated from nothing;
- missing context → a fallback naming what is missing (a fixed vocabulary, never model text).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace

from flowledger.chat.executors import Execution, ExecutionFailed, TurnContext
from flowledger.chat.models import PublicContent, Reference, ReleaseOutcome, StatusCode
from flowledger.diagnosis.draft import Claim, Draft, MissingContext, StopReason
from flowledger.diagnosis.evidence import check_evidence
from flowledger.diagnosis.observations import ObservationLedger
from flowledger.diagnosis.published import MAX_DOCUMENTS, PublishedDocument, PublishedResult, scrub_ids
from flowledger.diagnosis.recording import DiagnosisRecording
from flowledger.diagnosis.semantic import SemanticGuard

DEFAULT_SCOPE = "What this run's diagnosis tools returned"
MISSING_WORDS = {
    MissingContext.LOGS: "the service's logs",
    MissingContext.DATABASE: "the application's database",
    MissingContext.KNOWLEDGE: "documentation on this system",
    MissingContext.TIME_WINDOW: "when the problem happened",
    MissingContext.AFFECTED_SERVICE: "which service is affected",
    MissingContext.ERROR_DETAILS: "the error that was seen",
}
# Stops that publish nothing at all when no safe observation was made.
FAIL_CLOSED_WITHOUT_EVIDENCE = {StopReason.BUDGET, StopReason.INVALID_DRAFT, StopReason.MODEL_UNAVAILABLE}


class DiagnosisRelease:
    def __init__(self, semantic: SemanticGuard) -> None:
        self._semantic = semantic

    def release(
        self, context: TurnContext, draft: Draft, ledger: ObservationLedger, recording: DiagnosisRecording
    ) -> Generator[StatusCode, None, Execution]:
        """Decide the run's ending from ``draft`` and the ledger; yields the release status codes."""
        if draft.stop is not None or not draft.conclusion:
            stop = draft.stop or StopReason.INVALID_DRAFT
            recording.draft(f"The diagnosis stopped: {stop.value}")
            return self._stopped(stop, draft, ledger, recording)
        draft = _scrubbed(draft, ledger.call_ids)
        cited = {i for claim in draft.claims for i in claim.observation_ids}
        recording.draft(f"Drafted a conclusion citing {len(cited)} observation{'s' if len(cited) != 1 else ''}")
        yield StatusCode.CHECKING_EVIDENCE
        verdict = check_evidence(draft, ledger)
        recording.evidence_guard(verdict.passed, verdict.reason)
        if not verdict.passed:
            return self._fallback(ledger, recording, "evidence", REFUSED_EVIDENCE)
        judgement = self._semantic.judge(context, draft, ledger)
        recording.semantic_guard(judgement.supported, judgement.model_call)
        if not judgement.supported:
            return self._fallback(ledger, recording, "semantic", REFUSED_SEMANTIC)
        yield StatusCode.RELEASING
        documents = _cited_documents(draft, ledger)
        published = PublishedResult(
            query=context.query,
            conclusion=draft.conclusion or "",
            scope=draft.scope or DEFAULT_SCOPE,
            limitations=draft.limitations,
            documents=documents,
        )
        recording.release(ReleaseOutcome.SUCCESS.value, "Published the diagnosis")
        content = PublicContent(
            text=published.conclusion,
            references=[Reference(document_id=d.document_id, title=d.title) for d in documents],
            limitations=published.limitations or None,
        )
        return Execution(content, ReleaseOutcome.SUCCESS, published_result=published.model_dump())

    def _stopped(
        self, stop: StopReason, draft: Draft, ledger: ObservationLedger, recording: DiagnosisRecording
    ) -> Execution:
        execution = self._stopped_answer(stop, draft, ledger, recording)
        execution.reason = draft.model_failure
        return execution

    def _stopped_answer(
        self, stop: StopReason, draft: Draft, ledger: ObservationLedger, recording: DiagnosisRecording
    ) -> Execution:
        if stop in FAIL_CLOSED_WITHOUT_EVIDENCE and not ledger.safe:
            recording.release(ReleaseOutcome.FAILED.value, f"Failed closed: {stop.value} before any safe observation")
            raise ExecutionFailed(
                f"the diagnosis stopped ({stop.value}) before any safe observation", draft.model_failure
            )
        if stop is StopReason.MISSING_CONTEXT:
            needed = ", ".join(MISSING_WORDS[m] for m in draft.missing) or MISSING_WORDS[MissingContext.ERROR_DETAILS]
            content = PublicContent(
                text=f"I cannot diagnose this with the tools I have: it needs {needed}, which none of them provides.",
                limitations="No conclusion was drawn. Add the missing context to the question, or connect a tool.",
            )
            return self._fallback(ledger, recording, stop.value, content)
        if stop is StopReason.BUDGET:
            limit = (draft.budget_limit or "budget").replace("_", " ")
            content = PublicContent(
                text=(
                    f"I could not finish this diagnosis within its {limit} limit. "
                    f"What I checked: {ledger.checked_summary()}. Nothing was concluded from it."
                ),
                limitations=f"The diagnosis stopped at its {limit} limit before it had enough evidence.",
            )
            return self._fallback(ledger, recording, stop.value, content)
        if stop is StopReason.SATURATED:
            content = PublicContent(
                text=(
                    "I stopped this diagnosis because further checks returned nothing new. "
                    f"What I checked: {ledger.checked_summary() or 'nothing that answered'}. "
                    "No conclusion was published."
                ),
                limitations="The evidence available to the tools did not settle the question.",
            )
            return self._fallback(ledger, recording, stop.value, content)
        content = PublicContent(
            text=(
                "The diagnosis did not produce a conclusion that could be checked. "
                f"What I checked: {ledger.checked_summary()}. Nothing was published as a finding."
            ),
            limitations="The model's final answer could not be verified.",
        )
        return self._fallback(ledger, recording, stop.value, content)

    @staticmethod
    def _fallback(
        ledger: ObservationLedger, recording: DiagnosisRecording, why: str, content: PublicContent
    ) -> Execution:
        recording.release(ReleaseOutcome.FALLBACK.value, f"Released a safe fallback: {why}")
        return Execution(content, ReleaseOutcome.FALLBACK, notes={"stopped_by": why, "observations": len(ledger.safe)})


REFUSED_EVIDENCE = PublicContent(
    text=(
        "I reached a draft conclusion but did not publish it: its facts could not all be found in what the "
        "diagnosis tools returned."
    ),
    limitations="Only conclusions whose every quoted fact is in the cited evidence are published.",
)
REFUSED_SEMANTIC = PublicContent(
    text="I reached a draft conclusion but did not publish it: a review found it does not follow from the evidence.",
    limitations="Only conclusions that follow from the cited evidence are published.",
)


def _scrubbed(draft: Draft, call_ids: tuple[str, ...]) -> Draft:
    """The draft's public texts without internal ids (claims keep their cited ids for the guard)."""
    return replace(
        draft,
        conclusion=scrub_ids(draft.conclusion or "", call_ids),
        claims=tuple(Claim(scrub_ids(c.text, call_ids), c.observation_ids) for c in draft.claims),
        scope=scrub_ids(draft.scope, call_ids),
        limitations=scrub_ids(draft.limitations, call_ids),
    )


def _cited_documents(draft: Draft, ledger: ObservationLedger) -> list[PublishedDocument]:
    """The knowledge documents of the cited observations, each once, in citation order."""
    documents: dict[str, PublishedDocument] = {}
    for claim in draft.claims:
        for observation_id in claim.observation_ids:
            observation = ledger.get(observation_id)
            for document in observation.result.documents if observation else ():
                documents.setdefault(
                    document["document_id"],
                    PublishedDocument(document_id=document["document_id"][:64], title=document["title"][:200]),
                )
    return list(documents.values())[:MAX_DOCUMENTS]
