"""ReplayHarness: run replay cases through an invoker and hold each recorded flow to two references.

Each case's recorded flow is compared with the case's own expectation (its step pattern and allowed
outcomes) and with the golden corpus entry of its trigger type, by the very rules of
``flowledger flows signature-check``; the corpus must match it with the signature the case names.
Findings per case:

- ``matched``: both references accept the flow;
- ``sequence_drift``: the steps fit the case's pattern or the corpus's signature not (or the flow was
  recorded under another trigger type, or matched another signature than the one named);
- ``outcome_drift``: the steps fit, the outcome is not one allowed;
- ``skipped``: the invoker does not run this case (a real invoker runs only its own agent's cases);
- ``error``: the invoker could not run the case or read back a flow.

The drift share is (sequence drift + outcome drift + error) over the compared (not skipped) cases; the
replay passes when it is at most the threshold (0 by default: any drift fails).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from pydantic import BaseModel

from flowledger.errors import InvalidInput
from flowledger.reasoning.dataset import FlowRecord
from flowledger.reasoning.signatures import Corpus, check_flow
from flowledger.replay.cases import ReplayCase
from flowledger.replay.invokers import AgentInvoker, ReplayOutcome

Finding = Literal["matched", "sequence_drift", "outcome_drift", "skipped", "error"]
FINDINGS: tuple[Finding, ...] = ("matched", "sequence_drift", "outcome_drift", "skipped", "error")


class NothingToReplay(InvalidInput):
    """The invoker runs none of the cases given: a green replay of nothing would prove nothing."""


class ReplayResult(BaseModel):
    """One case's finding; ``steps`` and ``outcome`` are what was recorded (absent when nothing was)."""

    case_id: str
    trigger_type: str
    finding: Finding
    detail: str
    signature: str | None = None
    flow_id: str | None = None
    steps: list[str] | None = None
    outcome: str | None = None


class ReplayReport(BaseModel):
    """``passed`` when ``drift_share`` is at most ``threshold``."""

    invoker: str
    passed: bool
    threshold: float
    cases: int
    compared: int
    matched: int
    sequence_drift: int
    outcome_drift: int
    skipped: int
    error: int
    drift_share: float
    results: list[ReplayResult]


# check_flow reads only these attributes of a record; the harness hands it a flow read back from the
# store (or the stub's) in that shape, so replay and signature-check cannot disagree on a flow.
@dataclass(frozen=True)
class _Outcome:
    type: str


@dataclass(frozen=True)
class _Flow:
    trigger_type: str
    trigger_ref: str
    outcome: _Outcome | None


@dataclass(frozen=True)
class _Shape:
    flow: _Flow
    step_kinds: list[str]


def compare(corpus: Corpus, case: ReplayCase, recorded: ReplayOutcome) -> tuple[Finding, str, str | None]:
    """(finding, detail, matched signature) for one recorded flow against the case and the corpus (pure)."""
    kinds = list(recorded.step_kinds)
    shown = " -> ".join(kinds) or "(no steps)"
    outcome = recorded.outcome_type or "no outcome"
    if recorded.trigger_type != case.trigger_type:
        return "sequence_drift", f"recorded under {recorded.trigger_type}, expected {case.trigger_type}", None
    expected = case.expected
    if not expected.pattern().accepts(kinds):
        return "sequence_drift", f"{shown} does not fit the case's steps {' -> '.join(expected.steps)}", None
    shape = _Shape(
        _Flow(
            recorded.trigger_type,
            recorded.trigger_ref,
            _Outcome(recorded.outcome_type) if recorded.outcome_type else None,
        ),
        kinds,
    )
    found, detail, name = check_flow(corpus, cast(FlowRecord, shape))
    if found == "skipped":
        return "sequence_drift", f"the corpus cannot judge it: {detail}", None
    if found == "sequence_drift":
        return "sequence_drift", f"corpus: {detail}", None
    if found == "matched" and name != expected.signature:
        return "sequence_drift", f"{shown} matched the corpus signature {name}, expected {expected.signature}", name
    if recorded.outcome_type not in expected.outcomes:
        return "outcome_drift", f"{shown} ends {outcome}, the case allows {' or '.join(expected.outcomes)}", None
    if found == "outcome_drift":
        return "outcome_drift", f"corpus: {detail}", None
    return "matched", shown, name


class ReplayHarness:
    """Runs cases through one invoker and compares each recorded flow (see the module docstring)."""

    def __init__(self, invoker: AgentInvoker, corpus: Corpus) -> None:
        self._invoker = invoker
        self._corpus = corpus

    def run(self, cases: Sequence[ReplayCase], threshold: float = 0.0) -> ReplayReport:
        """Every case's result in the order given and whether the drift share is within ``threshold``.

        Raises :class:`InvalidInput` for a threshold outside 0..1 and :class:`NothingToReplay` when the
        invoker runs none of ``cases``, before any case runs.
        """
        if not 0.0 <= threshold <= 1.0:
            raise InvalidInput(f"the threshold {threshold} is not between 0 and 1")
        runs = [self._invoker.handles(case) for case in cases]
        if not any(runs):
            raise NothingToReplay(f"none of the {len(cases)} cases is for the {self._invoker.name} invoker")
        results = [
            self._result(case) if run else _skipped(case, self._invoker.name)
            for case, run in zip(cases, runs, strict=True)
        ]
        counts = {kind: sum(r.finding == kind for r in results) for kind in FINDINGS}
        compared = len(results) - counts["skipped"]
        drifted = counts["sequence_drift"] + counts["outcome_drift"] + counts["error"]
        share = drifted / compared
        return ReplayReport(
            invoker=self._invoker.name,
            passed=share <= threshold,
            threshold=threshold,
            cases=len(results),
            compared=compared,
            matched=counts["matched"],
            sequence_drift=counts["sequence_drift"],
            outcome_drift=counts["outcome_drift"],
            skipped=counts["skipped"],
            error=counts["error"],
            drift_share=round(share, 6),
            results=results,
        )

    def _result(self, case: ReplayCase) -> ReplayResult:
        try:
            recorded = self._invoker.invoke(case)
        except Exception as exc:  # one broken case is a finding, and the replay goes on
            message = " ".join(str(exc).split())[:300]
            return ReplayResult(
                case_id=case.id,
                trigger_type=case.trigger_type,
                finding="error",
                detail=f"{type(exc).__name__}: {message}" if message else type(exc).__name__,
            )
        finding, detail, signature = compare(self._corpus, case, recorded)
        return ReplayResult(
            case_id=case.id,
            trigger_type=case.trigger_type,
            finding=finding,
            detail=detail,
            signature=signature if finding == "matched" else None,
            flow_id=recorded.flow_id,
            steps=list(recorded.step_kinds),
            outcome=recorded.outcome_type,
        )


def _skipped(case: ReplayCase, invoker: str) -> ReplayResult:
    return ReplayResult(
        case_id=case.id,
        trigger_type=case.trigger_type,
        finding="skipped",
        detail=f"a {case.invoker} case: the {invoker} invoker does not run it",
    )
