"""Replay cases: what an agent is given, and the flow it is expected to record.

A case is one JSON file in a cases directory (the packaged corpus is ``flowledger/replay/cases/``)::

    {"id": "researcher-happy", "trigger_type": "user_question", "invoker": "researcher",
     "description": "...",
     "input": {"question": "...", "documents": {"hba1c.md": "# HbA1c ..."}},
     "expected": {"signature": "researcher_synthesis",
                  "steps": ["retrieval", "llm_prompt", "verdict"],
                  "outcomes": ["recommendation_delivered"]}}

``invoker`` names the agent that runs the case (chat and diagnosis both record ``chat_turn`` flows);
``input`` is what that agent needs, checked against the invoker's own input model. ``expected.steps``
uses the golden corpus's token language (``kind``, ``(kind|kind)``, then ``?``, ``*`` or ``+``), so a
case can pin an exact sequence or leave the number of tool calls open; ``expected.signature`` names the
corpus signature the recorded flow must match under its trigger type.

Loading is strict: an unknown key, a wrong type, an input that does not fit the invoker, a trigger type
that is not the invoker's, two files with one id, or an empty directory is :class:`CaseInvalid` naming
the file and the first problem.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

from flowledger.errors import InvalidInput
from flowledger.json_objects import ObjectInvalid, parse_object
from flowledger.reasoning.models import Name
from flowledger.reasoning.signatures import TOKEN_PATTERN, OutcomeType, Signature, Token

InvokerName = Literal["chat", "diagnosis", "researcher", "critic", "correlator"]
# The trigger type each real agent records its flows under (research/agents/*.py, chat/usecase.py).
TRIGGER_TYPES: dict[str, str] = {
    "researcher": "user_question",
    "critic": "claim_review",
    "correlator": "family_correlation",
    "chat": "chat_turn",
    "diagnosis": "chat_turn",
}
CASES_RESOURCE = "cases"
MAX_CASE_BYTES = 64 * 1024
MAX_CASES = 500
MAX_DOCUMENTS = 20
CaseId = Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
Text = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=2000)]
DocumentName = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.-]{1,100}\.(md|txt)$")]
DocumentText = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=16_000)]


class CaseInvalid(InvalidInput):
    """A case file (or a cases directory) that cannot be used; the message names it."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ResearcherInput(_Strict):
    """A question for the researcher over the given documents (the global scope, nothing else)."""

    question: Text
    trigger_ref: Annotated[str, StringConstraints(strict=True, min_length=1, max_length=256)] = "replay/question"
    documents: dict[DocumentName, DocumentText] = Field(default_factory=dict, max_length=MAX_DOCUMENTS)
    # The model fails every call (a transport error): the agent gives up and its flow is closed aborted.
    model_unavailable: bool = False


class CriticInput(_Strict):
    """A claim citing some of the given documents; ``gone`` are cited documents removed before the check."""

    statement: Text
    question: Text
    documents: dict[DocumentName, DocumentText] = Field(default_factory=dict, max_length=MAX_DOCUMENTS)
    cited: list[DocumentName] = Field(min_length=1, max_length=8)
    gone: list[DocumentName] = Field(default_factory=list, max_length=8)
    model_unavailable: bool = False

    @model_validator(mode="after")
    def _citations_exist(self) -> CriticInput:
        unknown = [name for name in [*self.cited, *self.gone] if name not in self.documents]
        if unknown:
            raise ValueError(f"{unknown[0]} is cited but not among the documents")
        if not set(self.gone) <= set(self.cited):
            raise ValueError("a gone document must be cited")
        return self


class SeedFlow(_Strict):
    """A closed flow recorded in the family before the correlator runs."""

    outcome: OutcomeType
    confidence: Annotated[float, Field(ge=0, le=1)] | None = None


class CorrelatorInput(_Strict):
    """The family to correlate and the flows it already holds."""

    family: Name
    seed_flows: list[SeedFlow] = Field(default_factory=list, max_length=50)
    model_unavailable: bool = False


class ChatInput(_Strict):
    """One chat turn over the given documents (the global scope)."""

    query: Text
    documents: dict[DocumentName, DocumentText] = Field(default_factory=dict, max_length=MAX_DOCUMENTS)


class DiagnosisInput(_Strict):
    """One chat turn routed to the diagnosis agent; ``demo_incident`` seeds the demo logs, database and runbook."""

    query: Text
    demo_incident: bool = True


CaseInput = ResearcherInput | CriticInput | CorrelatorInput | ChatInput | DiagnosisInput
INPUTS: dict[str, type[BaseModel]] = {
    "researcher": ResearcherInput,
    "critic": CriticInput,
    "correlator": CorrelatorInput,
    "chat": ChatInput,
    "diagnosis": DiagnosisInput,
}


class Expected(_Strict):
    """The flow the case must record: a step pattern, the outcomes allowed, the corpus signature it matches."""

    signature: Name
    steps: list[Token] = Field(min_length=1, max_length=64)
    outcomes: list[OutcomeType] = Field(min_length=1)

    @field_validator("steps")
    @classmethod
    def _tokens_parse(cls, steps: list[str]) -> list[str]:
        for token in steps:
            if not TOKEN_PATTERN.match(token):
                raise ValueError(f"{token!r} is not a step kind, (kind|kind), with an optional ?, * or +")
        return steps

    def pattern(self) -> Signature:
        """The expected steps as a corpus signature, so they match by the very rules the corpus uses."""
        return Signature(name="expected", agent="replay", steps=self.steps, outcomes=self.outcomes)

    def canonical_steps(self) -> list[str]:
        """The shortest sequence the pattern accepts (``?`` and ``*`` left out, ``+`` once, first alternative)."""
        kinds: list[str] = []
        for token in self.steps:
            match = TOKEN_PATTERN.match(token)
            assert match is not None  # the validator checked every token
            if match["quantifier"] in ("?", "*"):
                continue
            kinds.append((match["alts"] or match["kind"]).split("|")[0])
        return kinds


class ReplayCase(_Strict):
    """One replay case (see the module docstring)."""

    id: CaseId
    description: Annotated[str, StringConstraints(strict=True, max_length=500)] = ""
    trigger_type: Name
    invoker: InvokerName
    input: dict[str, Any]
    expected: Expected

    @model_validator(mode="after")
    def _fits_the_invoker(self) -> ReplayCase:
        agent_type = TRIGGER_TYPES[self.invoker]
        if self.trigger_type != agent_type:
            raise ValueError(f"the {self.invoker} invoker records {agent_type} flows, not {self.trigger_type}")
        try:
            INPUTS[self.invoker].model_validate(self.input)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise ValueError(f"input{'.' + where if where else ''}: {error['msg']}") from None
        return self

    def typed_input(self) -> Any:
        """The input as the invoker's model (:data:`INPUTS`)."""
        return INPUTS[self.invoker].model_validate(self.input)


def parse_case(data: bytes, source: str) -> ReplayCase:
    """The case in ``data``; :class:`CaseInvalid` names ``source`` and the first problem."""
    if len(data) > MAX_CASE_BYTES:
        raise CaseInvalid(f"{source}: larger than {MAX_CASE_BYTES // 1024} KB")
    try:
        return parse_object(data, ReplayCase, "case")
    except ObjectInvalid as exc:
        raise CaseInvalid(f"{source}: {exc.reason}") from None


def load_cases(directory: Traversable | Path, source: str | None = None) -> list[ReplayCase]:
    """Every ``*.json`` case of ``directory``, in file-name order; :class:`CaseInvalid` for the first bad one."""
    shown = source or str(directory)
    if not directory.is_dir():
        raise CaseInvalid(f"{shown}: not a directory of replay cases")
    files = sorted((f for f in directory.iterdir() if f.name.endswith(".json") and f.is_file()), key=lambda f: f.name)
    if not files:
        raise CaseInvalid(f"{shown}: holds no *.json case")
    if len(files) > MAX_CASES:
        raise CaseInvalid(f"{shown}: more than {MAX_CASES} cases")
    cases: list[ReplayCase] = []
    first: dict[str, str] = {}
    for file in files:
        where = f"{shown.rstrip('/')}/{file.name}"
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise CaseInvalid(f"{where}: {exc.strerror or type(exc).__name__}") from None
        case = parse_case(data, where)
        if case.id in first:
            raise CaseInvalid(f"{where}: id {case.id!r} repeats {first[case.id]}")
        first[case.id] = file.name
        cases.append(case)
    return cases


def packaged_cases() -> list[ReplayCase]:
    """The fixture corpus shipped with the package (``flowledger/replay/cases/*.json``)."""
    return load_cases(resources.files("flowledger.replay").joinpath(CASES_RESOURCE), "flowledger/replay/cases")
