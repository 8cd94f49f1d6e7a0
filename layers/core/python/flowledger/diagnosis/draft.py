"""The agent's draft: what the model answers when it stops calling tools, and why a loop stopped.

The model answers with one object of ``DRAFT_SCHEMA`` (strict structured output); it is validated
again here, since OpenAI-compatible servers do not all enforce the schema. Raw evidence never sits
in a draft: claims cite observation ids, and release reads the evidence from the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from flowledger.llm.ports import JsonSchema

MAX_CONCLUSION_CHARS = 2000
MAX_CLAIM_CHARS = 600
MAX_CLAIMS = 12
MAX_SCOPE_CHARS = 500
MAX_LIMITATIONS_CHARS = 1000


class StopReason(StrEnum):
    """Why the loop ended without a conclusion; each has its own truthful fallback text."""

    BUDGET = "budget"  # a hard limit: model calls, tool calls, tokens or time
    SATURATED = "saturated"  # the same call twice, or two steps without a new observation
    MISSING_CONTEXT = "missing_context"  # the model says no tool can answer (and which context is missing)
    INVALID_DRAFT = "invalid_draft"  # the model's final answer was not a valid draft
    MODEL_UNAVAILABLE = "model_unavailable"  # the model failed after its retry


class MissingContext(StrEnum):
    """What a diagnosis may lack; a fixed set, so the fallback never repeats model text."""

    LOGS = "logs"
    DATABASE = "database"
    KNOWLEDGE = "knowledge"
    TIME_WINDOW = "time_window"
    AFFECTED_SERVICE = "affected_service"
    ERROR_DETAILS = "error_details"


DRAFT_SCHEMA = JsonSchema(
    "diagnosis_draft",
    {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["concluded", "missing_context"]},
            "conclusion": {"type": ["string", "null"]},
            "claims": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string"},
                        "observation_ids": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["text", "observation_ids"],
                    "additionalProperties": False,
                },
            },
            "scope": {"type": "string"},
            "limitations": {"type": "string"},
            "missing": {"type": "array", "items": {"type": "string", "enum": [m.value for m in MissingContext]}},
        },
        "required": ["status", "conclusion", "claims", "scope", "limitations", "missing"],
        "additionalProperties": False,
    },
)

Text = Annotated[str, StringConstraints(strip_whitespace=True)]


class ClaimOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_CLAIM_CHARS)]
    observation_ids: list[Annotated[str, StringConstraints(max_length=120)]] = Field(max_length=16)


class DraftOutput(BaseModel):
    """The model's final answer, as ``DRAFT_SCHEMA`` describes it, with this side's length caps."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["concluded", "missing_context"]
    conclusion: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_CONCLUSION_CHARS)] | None
    claims: list[ClaimOutput] = Field(max_length=MAX_CLAIMS)
    scope: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_SCOPE_CHARS)]
    limitations: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_LIMITATIONS_CHARS)]
    missing: list[MissingContext] = Field(max_length=len(MissingContext))


@dataclass(frozen=True)
class Claim:
    text: str
    observation_ids: tuple[str, ...]


@dataclass(frozen=True)
class Draft:
    """What the agent hands to release: a conclusion with cited claims, or the reason it stopped."""

    conclusion: str | None
    claims: tuple[Claim, ...] = ()
    scope: str = ""
    limitations: str = ""
    stop: StopReason | None = None
    missing: tuple[MissingContext, ...] = ()
    budget_limit: str | None = None  # which limit, when stop is BUDGET
    model_failure: str | None = None  # the reason code, when a model failure stopped the loop

    @classmethod
    def stopped(
        cls,
        reason: StopReason,
        *,
        limit: str | None = None,
        missing: tuple[MissingContext, ...] = (),
        model_failure: str | None = None,
    ) -> Draft:
        return cls(conclusion=None, stop=reason, budget_limit=limit, missing=missing, model_failure=model_failure)

    @classmethod
    def from_output(cls, output: DraftOutput) -> Draft:
        if output.status == "missing_context":
            missing = tuple(dict.fromkeys(output.missing)) or (MissingContext.ERROR_DETAILS,)
            return cls.stopped(StopReason.MISSING_CONTEXT, missing=missing)
        if not output.conclusion or not output.claims:
            return cls.stopped(StopReason.INVALID_DRAFT)
        return cls(
            conclusion=output.conclusion,
            claims=tuple(Claim(c.text, tuple(c.observation_ids)) for c in output.claims),
            scope=output.scope,
            limitations=output.limitations,
        )
