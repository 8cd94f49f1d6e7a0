"""The evaluation runner: the researcher on a file of benchmark cases, one flow per case, and a report.

A case is one line of a JSONL file (:class:`Case`). Each case is researched as the researcher does it
(``Researcher.gather`` then ``Researcher.synthesise``) and recorded as a flow of trigger type
``user_question`` and trigger ref ``benchmark/{run_id}/{case_id}``, with the steps

    retrieval -> evidence_assembly -> summary -> provenance_check -> verdict

every case the same five, so the flows of a run compare step by step. Summaries are fixed texts with
counts and codes only, never the question or the evidence, so they pass the summary guard.

The runner does not call ``Researcher.research``: that records the researcher's own flow shape
(retrieval -> llm_prompt -> verdict) and then runs the deeper-research producer, and a benchmark
case is a measurement, not a question anyone is waiting on, so a weak case must never enqueue
follow-up research. Bypassing ``research`` means no producer runs at all, whatever
``RESEARCH_AUTO_ENQUEUE_ENABLED`` says.

Retrieval uses the question's phrasings only. The researcher's third phrasing is the trigger ref's
words, and a benchmark's ref names the run and the case: a case id that names its expected document
would otherwise lead retrieval to the answer it is meant to find.

A researcher that gives up (:class:`ResearchGaveUp`) fails its case with the reason, its flow is
closed aborted, and the run goes on. The recorder is fail-soft: a recording failure leaves the
verdicts exactly as they would have been.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from flowledger.chat.models import PublicContent
from flowledger.errors import InvalidInput
from flowledger.ids import new_id
from flowledger.json_objects import ObjectInvalid, parse_object
from flowledger.llm.ports import ChatModel
from flowledger.reasoning.recorder import ReasoningFlowRecorder
from flowledger.research.agents.recording import AgentRecording, recorded
from flowledger.research.agents.researcher import AGENT as RESEARCHER
from flowledger.research.agents.researcher import (
    Evidence,
    Gathered,
    Researcher,
    ResearchGaveUp,
    ResearchQuestion,
    is_weak,
)
from flowledger.services import Services

TRIGGER_TYPE = "user_question"
EVALUATOR = "evaluator"
TRIGGER_SUMMARY = "Benchmark case of an evaluation run"
STEP_KINDS = ("retrieval", "evidence_assembly", "summary", "provenance_check", "verdict")
MAX_CASES = 1000
MAX_QUESTION_CHARS = 2000
MAX_EXPECTED_DOCUMENTS = 20
MAX_LINE_CHARS = 16 * 1024  # a valid case is far shorter: a longer line is refused before it is parsed
MAX_FILE_BYTES = MAX_CASES * MAX_LINE_CHARS
RUN_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"

Outcome = Literal["recommendation_delivered", "insufficient_evidence"]
CaseOutcome = Literal["recommendation_delivered", "insufficient_evidence", "gave_up"]
CaseId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
DocumentId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]


class Case(BaseModel):
    """One benchmark case. Without ``expected_outcome`` a case expects an answer to be recommended."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    case_id: CaseId
    question: Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUESTION_CHARS)]
    expected_document_ids: list[DocumentId] = Field(default_factory=list, max_length=MAX_EXPECTED_DOCUMENTS)
    expected_outcome: Outcome = "recommendation_delivered"

    @field_validator("question")
    @classmethod
    def _not_blank(cls, question: str) -> str:
        if not question.strip():
            raise ValueError("the question is blank")
        return question


class CasesInvalid(InvalidInput):
    """A cases file with a bad line; ``line`` is 1-based."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def parse_cases(data: bytes) -> list[Case]:
    """Every case of a JSONL file, or :class:`CasesInvalid` naming the first bad line (blank lines are skipped)."""
    if len(data) > MAX_FILE_BYTES:
        raise CasesInvalid(1, f"the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    cases: list[Case] = []
    first_seen: dict[str, int] = {}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        case = _parse_line(number, raw)
        if case.case_id in first_seen:
            raise CasesInvalid(number, f"case_id {case.case_id!r} repeats line {first_seen[case.case_id]}")
        if len(cases) == MAX_CASES:
            raise CasesInvalid(number, f"more than {MAX_CASES} cases in one file")
        first_seen[case.case_id] = number
        cases.append(case)
    if not cases:
        raise CasesInvalid(1, "the file holds no cases")
    return cases


def _parse_line(number: int, raw: bytes) -> Case:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CasesInvalid(number, "not UTF-8") from None
    if len(text) > MAX_LINE_CHARS:
        raise CasesInvalid(number, f"longer than {MAX_LINE_CHARS} characters")
    try:
        return parse_object(raw, Case, "case")
    except ObjectInvalid as exc:
        raise CasesInvalid(number, exc.reason) from None


class CaseResult(BaseModel):
    """What one case came to; ``expected_found`` is None when the case names no expected document."""

    case_id: str
    outcome: CaseOutcome
    composite_k: float
    hits: int
    cited: int
    expected: int
    expected_found: int | None
    passed: bool
    reason: str | None
    flow_id: str | None


class Totals(BaseModel):
    cases: int
    passed: int
    failed: int
    gave_up: int
    mean_composite_k: float


class EvaluationReport(BaseModel):
    """A run's cases in file order and their totals; ``recorded`` says whether flows were captured."""

    run_id: str
    model: str
    recorded: bool
    cases: list[CaseResult]
    totals: Totals

    @property
    def all_passed(self) -> bool:
        return self.totals.failed == 0


def outcome_for(hits: int, composite_k: float, cited: int) -> Outcome:
    """The researcher's rule: no hits, no citation or ``composite_k`` under the weak bound is insufficient."""
    return "insufficient_evidence" if is_weak(hits, composite_k, cited) else "recommendation_delivered"


def judge(case: Case, outcome: Outcome, expected_found: int | None, outside: int) -> str | None:
    """Why ``case`` fails, or None when it passes (pure): outcome, provenance, then expected documents."""
    if outside:
        return "citation_outside_evidence"
    if outcome != case.expected_outcome:
        return "outcome_mismatch"
    if expected_found is not None and expected_found < len(set(case.expected_document_ids)):
        return "expected_documents_missing"
    return None


def totals_of(results: Sequence[CaseResult]) -> Totals:
    passed = sum(r.passed for r in results)
    mean = round(sum(r.composite_k for r in results) / len(results), 4) if results else 0.0
    return Totals(
        cases=len(results),
        passed=passed,
        failed=len(results) - passed,
        gave_up=sum(r.outcome == "gave_up" for r in results),
        mean_composite_k=mean,
    )


@dataclass
class _Partial:
    """What a case had found when its researcher gave up."""

    gathered: Gathered | None = None


class EvaluationRunner:
    """Runs benchmark cases through the researcher, one flow per case."""

    def __init__(
        self,
        services: Services,
        model: ChatModel,
        recorder: ReasoningFlowRecorder,
        researcher: Researcher | None = None,
    ) -> None:
        self._model = model
        self._recorder = recorder
        self._researcher = researcher or Researcher(services, model, recorder)

    def run(
        self,
        cases: Sequence[Case],
        run_id: str | None = None,
        on_case: Callable[[CaseResult], None] | None = None,
    ) -> EvaluationReport:
        """Run every case in order (``on_case`` is told of each result as it comes) and report.

        ``run_id`` defaults to ``ev_`` + a ULID; raises :class:`InvalidInput` for a malformed one or
        repeated case ids, before any case runs.
        """
        run_id = run_id if run_id is not None else new_id("ev_")
        _check_run(run_id, cases)
        results: list[CaseResult] = []
        for case in cases:
            result = self._run_case(run_id, case)
            results.append(result)
            if on_case is not None:
                on_case(result)
        return EvaluationReport(
            run_id=run_id,
            model=self._model.name,
            recorded=not self._recorder.disabled,
            cases=results,
            totals=totals_of(results),
        )

    def _run_case(self, run_id: str, case: Case) -> CaseResult:
        partial = _Partial()
        try:
            with recorded(self._recorder, TRIGGER_TYPE, f"benchmark/{run_id}/{case.case_id}", TRIGGER_SUMMARY) as rec:
                result = self._measure(case, rec, partial)
                rec.flow.outcome(result.outcome, _outcome_summary(result), confidence=result.composite_k)
        except ResearchGaveUp as exc:  # the flow closed aborted on the way out; the run goes on
            gathered = partial.gathered
            expected = set(case.expected_document_ids)
            retrieved = {e.hit.document_id for e in gathered.evidence} if gathered else set()
            return CaseResult(
                case_id=case.case_id,
                outcome="gave_up",
                composite_k=gathered.composite_k if gathered else 0.0,
                hits=len(gathered.evidence) if gathered else 0,
                cited=0,
                expected=len(expected),
                expected_found=len(expected & retrieved) if expected else None,
                passed=False,
                reason=exc.reason,
                flow_id=rec.flow_id,
            )
        return result.model_copy(update={"flow_id": rec.flow_id})

    def _measure(self, case: Case, rec: AgentRecording, partial: _Partial) -> CaseResult:
        # An empty trigger ref: retrieval runs the question's phrasings only (see the module docstring).
        question = ResearchQuestion(TRIGGER_TYPE, "", case.question, dispatched_from_backlog=True)
        gathered = partial.gathered = self._researcher.gather(question)
        evidence = list(gathered.evidence)
        score = gathered.composite_k
        rec.step(
            "retrieval",
            RESEARCHER,
            f"Ran {len(gathered.queries)} queries; {len(evidence)} documents found by {gathered.answered} of them",
            latency_ms=gathered.latency_ms,
            confidence=score,
            outputs={"queries": len(gathered.queries), "documents": len(evidence), "composite_k": score},
        )
        retrieved = [e.hit.document_id for e in evidence]
        rec.step(
            "evidence_assembly",
            RESEARCHER,
            f"Kept {len(evidence)} documents for synthesis",
            outputs={"kept": len(evidence), "document_ids": retrieved},
        )
        answer = self._summarise(question, evidence, rec, score)
        cited = sorted({r.document_id for r in answer.references}) if answer else []
        outside = len(set(cited) - set(retrieved))
        expected = set(case.expected_document_ids)
        expected_found = len(expected & set(retrieved)) if expected else None
        expected_cited = len(expected & set(cited))
        rec.step(
            "provenance_check",
            EVALUATOR,
            f"{len(cited) - outside} of {len(cited)} citations are among the {len(retrieved)} retrieved documents;"
            f" {expected_found or 0} of {len(expected)} expected documents retrieved, {expected_cited} cited",
            outputs={
                "cited": len(cited),
                "outside_evidence": outside,
                "expected": len(expected),
                "expected_retrieved": expected_found or 0,
                "expected_cited": expected_cited,
            },
        )
        outcome = outcome_for(len(evidence), score, len(cited))
        reason = judge(case, outcome, expected_found, outside)
        rec.step(
            "verdict",
            EVALUATOR,
            f"Case {'passed' if reason is None else 'failed'}: evidence score {score:.2f},"
            f" {'recommended' if outcome == 'recommendation_delivered' else 'too weak to recommend'}",
            confidence=score,
            outputs={"passed": reason is None, "outcome": outcome, "reason": reason or "none"},
        )
        return CaseResult(
            case_id=case.case_id,
            outcome=outcome,
            composite_k=score,
            hits=len(evidence),
            cited=len(cited),
            expected=len(expected),
            expected_found=expected_found,
            passed=reason is None,
            reason=reason,
            flow_id=None,
        )

    def _summarise(
        self, question: ResearchQuestion, evidence: list[Evidence], rec: AgentRecording, score: float
    ) -> PublicContent | None:
        """The synthesis and its summary step (None with no evidence: there is nothing to synthesise)."""
        if not evidence:
            rec.step("summary", RESEARCHER, "No documents retrieved: nothing to synthesise", confidence=0.0)
            return None
        try:
            answer, ref, latency = self._researcher.synthesise(question, evidence, rec)
        except ResearchGaveUp as exc:
            rec.step("summary", RESEARCHER, f"Synthesis gave up: {exc.reason}", outputs={"gave_up": exc.reason})
            raise
        rec.step(
            "summary",
            RESEARCHER,
            f"Synthesised an answer citing {len(answer.references)} of {len(evidence)} documents",
            latency_ms=latency,
            confidence=score,
            back_refs={"llm_call_log_ref": ref},
            outputs={"cited": len(answer.references)},
        )
        return answer


def check_run_id(run_id: str) -> None:
    """Raises :class:`InvalidInput` unless ``run_id`` can name a run inside a trigger ref."""
    if not re.fullmatch(RUN_ID_PATTERN, run_id):
        raise InvalidInput(f"run id {run_id!r} must be 1 to 64 letters, digits, '_', '.' or '-'")


def _check_run(run_id: str, cases: Sequence[Case]) -> None:
    check_run_id(run_id)
    if len(cases) > MAX_CASES:
        raise InvalidInput(f"more than {MAX_CASES} cases in one run")
    ids = [c.case_id for c in cases]
    if len(set(ids)) != len(ids):
        raise InvalidInput("case ids repeat within the run")


def _outcome_summary(result: CaseResult) -> str:
    verdict = "passed" if result.passed else "failed"
    if result.outcome == "recommendation_delivered":
        return f"Benchmark case {verdict}: recommended an answer citing {result.cited} documents"
    return f"Benchmark case {verdict}: insufficient evidence in {result.hits} documents"
