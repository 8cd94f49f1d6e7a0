"""Pathways as stored, and the bodies and views of the pathway routes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from flowledger.reasoning.dimensions import Dimensions

PathwayId = Annotated[str, StringConstraints(strict=True, pattern=r"^pw_[0-9a-f]{26}$")]
Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")]
Ref = Annotated[str, StringConstraints(min_length=1, max_length=256)]
MatchReason = Literal["exact_ref", "prefix_ref", "trigger_type_only", "none"]
Maturity = Literal["mature", "growing", "sparse"]


class Pathway(BaseModel):
    """A reusable decision path, extracted from one high-confidence completed flow."""

    pathway_id: str
    seed_flow_id: str
    trigger_type: str
    trigger_ref: str
    trigger_summary: str  # guarded safe at the seed flow's close
    outcome_type: str
    step_kinds: list[str]
    min_confidence: float
    seed_dimensions: Dimensions
    hit_count: int = 0
    last_hit_at: str | None = None
    created_at: str
    changed_at: str
    embedding_model: str | None = None
    demoted_at: str | None = None
    demotion_reason: str | None = None

    @property
    def active(self) -> bool:
        return self.demoted_at is None


class PathwayView(BaseModel):
    """A pathway as the admin routes show it (no vector)."""

    pathway_id: str
    seed_flow_id: str
    trigger_type: str
    trigger_ref: str
    trigger_summary: str
    outcome_type: str
    hit_count: int
    last_hit_at: str | None
    created_at: str
    embedding_model: str | None
    demoted_at: str | None
    demotion_reason: str | None
    dimensions: Dimensions


class Candidate(BaseModel):
    pathway: PathwayView
    score: float
    reason: str = Field(description="exact_ref | prefix_ref | trigger_type_only | none, + '+semantic' when blended")


class MatchResult(BaseModel):
    trigger_type: str
    trigger_ref: str
    query_model: str | None
    snapshot_version: str | None
    candidates: list[Candidate]


class ExtractRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    flow_id: Annotated[str, StringConstraints(strict=True, pattern=r"^fl_[0-9A-Z]{26}$")]


class Extraction(BaseModel):
    pathway_id: str | None
    created: bool
    disqualifier: str | None = None


def _two_different(ids: list[str]) -> list[str]:
    if len(set(ids)) != len(ids):
        raise ValueError("compare two different pathways")
    return ids


class CompareRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Two different pathways: the model refuses one compared with itself, as uniqueItems says in the document.
    pathway_ids: Annotated[
        list[PathwayId],
        Field(min_length=2, max_length=2, json_schema_extra={"uniqueItems": True}),
        AfterValidator(_two_different),
    ]


class AxisDelta(BaseModel):
    axis: str
    first: int | None = Field(description="null when the first pathway's axis is not rated")
    second: int | None = Field(description="null when the second pathway's axis is not rated")
    delta: int | None = Field(description="second minus first; null unless both are rated")


class Comparison(BaseModel):
    first: PathwayView
    second: PathwayView
    deltas: list[AxisDelta] = Field(description="ranked by absolute delta, largest first")
    dominant: str | None = Field(description="the pathway id picked, or None when they are even")
    reasoning: str


class TopHit(BaseModel):
    pathway_id: str
    trigger_type: str
    hit_count: int


class Stats(BaseModel):
    total: int
    active: int
    embedded: int
    by_model: dict[str, int]
    by_trigger_type: dict[str, int]
    maturity_by_trigger_type: dict[str, Maturity]
    demoted: int
    top_hits: list[TopHit] = Field(description="the most reused active pathways; among equal counts, by id")
    degraded_models: list[str] = Field(
        default_factory=list, description="the models of by_model whose vectors are a degraded form"
    )
