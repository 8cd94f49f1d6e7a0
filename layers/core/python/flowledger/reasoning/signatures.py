"""Agent-specific shapes (``flowledger flows signature-check``): each closed flow against the golden corpus.

The corpus (``expected_signatures.json`` beside this module) lists, per trigger type, the signatures the
agents that record under it produce: a step-kind pattern and the outcomes a flow of that shape may end
with. A pattern is a list of tokens, each a kind or ``(kind|kind)``, optionally followed by ``?`` (at most
once), ``*`` (any number of times) or ``+`` (at least once). A signature may name a ``trigger_ref_prefix``
(the evaluation runner's ``benchmark/``): a flow whose ref starts with one is compared only with the
signatures of the longest such prefix, any other flow with the signatures that name none.

A flow stopped early (an agent that gave up, a cancelled chat turn, the 24-hour decay) ends with an
outcome in the signature's ``cut_short`` and matches when its kinds are a prefix of the pattern.

Findings per flow: ``sequence_drift`` (no signature accepts its kinds), ``outcome_drift`` (a signature
accepts its kinds, none with its outcome) and ``skipped`` (its trigger type, or its trigger ref, is not in
the corpus). The drift share is the drifted flows over the compared (not skipped) flows; the check fails
when it exceeds the threshold (0 by default: any drift fails).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from flowledger.errors import InvalidInput
from flowledger.json_objects import ObjectInvalid, parse_object
from flowledger.reasoning.dataset import FlowRecord
from flowledger.reasoning.models import Name

# The outcome types of reasoning.models.Outcome (a test holds the two lists equal).
OutcomeType = Literal[
    "claim_created", "recommendation_delivered", "no_action", "insufficient_evidence", "error", "timeout"
]
_KIND = r"[a-z][a-z0-9_.-]{0,63}"
TOKEN_PATTERN = re.compile(rf"^(?:(?P<kind>{_KIND})|\((?P<alts>{_KIND}(?:\|{_KIND})+)\))(?P<quantifier>[?*+]?)$")
Token = Annotated[str, StringConstraints(strict=True, max_length=512)]
MAX_CORPUS_BYTES = 256 * 1024
CORPUS_RESOURCE = "expected_signatures.json"


class CorpusInvalid(InvalidInput):
    """The corpus file cannot be used: unreadable, not JSON, or not a corpus."""


@dataclass(frozen=True)
class _Step:
    kinds: frozenset[str]
    optional: bool
    repeats: bool


class Signature(BaseModel):
    """One shape a trigger type's flows may have, and the outcomes it may end with."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: Name
    agent: Name
    steps: list[Token] = Field(min_length=1, max_length=64)
    outcomes: list[OutcomeType] = Field(min_length=1)
    cut_short: list[OutcomeType] = Field(default_factory=list)
    trigger_ref_prefix: Annotated[str, StringConstraints(strict=True, min_length=1, max_length=256)] | None = None

    @field_validator("steps")
    @classmethod
    def _tokens_parse(cls, steps: list[str]) -> list[str]:
        for token in steps:
            if not TOKEN_PATTERN.match(token):
                raise ValueError(f"{token!r} is not a step kind, (kind|kind), with an optional ?, * or +")
        return steps

    def _program(self) -> list[_Step]:
        program: list[_Step] = []
        for token in self.steps:
            match = TOKEN_PATTERN.match(token)
            assert match is not None  # the validator checked every token
            kinds = frozenset((match["alts"] or match["kind"]).split("|"))
            quantifier = match["quantifier"]
            if quantifier == "+":  # one, then any number more
                program.append(_Step(kinds, optional=False, repeats=False))
                quantifier = "*"
            program.append(_Step(kinds, optional=quantifier in ("?", "*"), repeats=quantifier == "*"))
        return program

    def _states(self, kinds: Iterable[str]) -> set[int]:
        """The pattern positions reachable after ``kinds`` (empty: no completion of ``kinds`` fits)."""
        program = self._program()

        def closure(states: set[int]) -> set[int]:
            todo, seen = list(states), set(states)
            while todo:
                at = todo.pop()
                if at < len(program) and program[at].optional and at + 1 not in seen:
                    seen.add(at + 1)
                    todo.append(at + 1)
            return seen

        states = closure({0})
        for kind in kinds:
            moved: set[int] = set()
            for at in states:
                if at < len(program) and kind in program[at].kinds:
                    moved.add(at if program[at].repeats else at + 1)
            states = closure(moved)
            if not states:
                break
        return states

    def accepts(self, kinds: list[str]) -> bool:
        """Whether ``kinds`` is one whole sequence of the pattern."""
        return len(self._program()) in self._states(kinds)

    def accepts_prefix(self, kinds: list[str]) -> bool:
        """Whether ``kinds`` is the start of (or the whole of) some sequence of the pattern."""
        return bool(self._states(kinds))


class TriggerSignatures(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    description: Annotated[str, StringConstraints(strict=True, max_length=500)] = ""
    signatures: list[Signature] = Field(min_length=1, max_length=32)


class Corpus(BaseModel):
    """The golden corpus: trigger type -> its signatures."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    version: Literal[1]
    trigger_types: dict[Name, TriggerSignatures] = Field(max_length=256)

    def applicable(self, trigger_type: str, trigger_ref: str) -> list[Signature] | None:
        """The signatures a flow is compared with; None when its trigger type is not in the corpus."""
        family = self.trigger_types.get(trigger_type)
        if family is None:
            return None
        prefixes = [s.trigger_ref_prefix for s in family.signatures if s.trigger_ref_prefix]
        matching = [p for p in prefixes if trigger_ref.startswith(p)]
        prefix = max(matching, key=len) if matching else None
        return [s for s in family.signatures if s.trigger_ref_prefix == prefix]


def parse_corpus(data: bytes, source: str) -> Corpus:
    """The corpus in ``data``; :class:`CorpusInvalid` names ``source`` and the first problem."""
    if len(data) > MAX_CORPUS_BYTES:
        raise CorpusInvalid(f"{source}: larger than {MAX_CORPUS_BYTES // 1024} KB")
    try:
        return parse_object(data, Corpus, "corpus")
    except ObjectInvalid as exc:
        raise CorpusInvalid(f"{source}: {exc.reason}") from None


def packaged_corpus() -> Corpus:
    """The corpus shipped with the package (``flowledger/reasoning/expected_signatures.json``)."""
    data = resources.files("flowledger.reasoning").joinpath(CORPUS_RESOURCE).read_bytes()
    return parse_corpus(data, CORPUS_RESOURCE)


Kind = Literal["matched", "sequence_drift", "outcome_drift", "skipped"]


class SignatureFinding(BaseModel):
    """One flow's result; ``signature`` names the one it matched (matched flows only)."""

    line: int
    flow_id: str
    trigger_type: str
    finding: Kind
    detail: str
    signature: str | None = None


class SignatureReport(BaseModel):
    """``passed`` when ``drift_share`` (drifted over compared flows) is at most ``threshold``."""

    passed: bool
    threshold: float
    flows: int
    compared: int
    matched: int
    sequence_drift: int
    outcome_drift: int
    skipped: int
    drift_share: float
    findings: list[SignatureFinding]


def check_flow(corpus: Corpus, record: FlowRecord) -> tuple[Kind, str, str | None]:
    """(finding, detail, matched signature's name) for one flow (pure)."""
    flow = record.flow
    kinds = record.step_kinds
    shown = " -> ".join(kinds) or "(no steps)"
    candidates = corpus.applicable(flow.trigger_type, flow.trigger_ref)
    if candidates is None:
        return "skipped", f"trigger type {flow.trigger_type} is not in the corpus", None
    if not candidates:
        return "skipped", f"no {flow.trigger_type} signature covers trigger ref {flow.trigger_ref}", None
    outcome = flow.outcome.type if flow.outcome else None
    for signature in candidates:
        whole = signature.accepts(kinds) and outcome in signature.outcomes
        early = outcome in signature.cut_short and signature.accepts_prefix(kinds)
        if whole or early:
            return "matched", shown, signature.name
    shaped = [s.name for s in candidates if s.accepts(kinds)]
    if shaped:
        allowed = sorted({o for s in candidates if s.name in shaped for o in s.outcomes})
        return "outcome_drift", f"{shown} ends {outcome or 'without an outcome'}, expected {' or '.join(allowed)}", None
    return "sequence_drift", f"{shown} fits no {flow.trigger_type} signature", None


def check_records(corpus: Corpus, records: Iterable[tuple[int, FlowRecord]], threshold: float = 0.0) -> SignatureReport:
    """Every flow's finding in file order, the counts, and whether the drift share is within ``threshold``."""
    if not 0.0 <= threshold <= 1.0:
        raise InvalidInput(f"the threshold {threshold} is not between 0 and 1")
    findings: list[SignatureFinding] = []
    for line, record in records:
        kind, detail, name = check_flow(corpus, record)
        findings.append(
            SignatureFinding(
                line=line,
                flow_id=record.flow.flow_id,
                trigger_type=record.flow.trigger_type,
                finding=kind,
                detail=detail,
                signature=name,
            )
        )
    counts = {
        kind: sum(f.finding == kind for f in findings)
        for kind in ("matched", "sequence_drift", "outcome_drift", "skipped")
    }
    compared = len(findings) - counts["skipped"]
    drifted = counts["sequence_drift"] + counts["outcome_drift"]
    share = drifted / compared if compared else 0.0
    return SignatureReport(
        passed=share <= threshold,
        threshold=threshold,
        flows=len(findings),
        compared=compared,
        matched=counts["matched"],
        sequence_drift=counts["sequence_drift"],
        outcome_drift=counts["outcome_drift"],
        skipped=counts["skipped"],
        drift_share=round(share, 6),
        findings=findings,
    )
