"""Bodies and views of the reasoning routes.

Bodies are strict where a scalar is meant: a boolean is only JSON ``true``/``false``, a number only
a JSON number (an integer is a valid float), a string only a string; lax coercion would let
``"confidence": false`` or ``"reasoning_read": 0`` through as a value nobody sent.

Free-form step payloads are checked before any write: what DynamoDB could not hold exactly is a
422 naming where it is (``store/storable.py``), never an item that breaks every later read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from flowledger.reasoning.dimensions import Dimensions
from flowledger.reasoning.guard import MAX_SUMMARY_CHARS
from flowledger.store.envelope import SEALED_MARKER
from flowledger.store.storable import refusal, require_storable

Name = Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z][a-z0-9_.-]{0,63}$")]
Ref = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=256)]
Summary = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=MAX_SUMMARY_CHARS)]
OpaqueId = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
StepId = Annotated[str, StringConstraints(strict=True, pattern=r"^st_[0-9A-Z]{26}$")]
FlowId = Annotated[str, StringConstraints(strict=True, pattern=r"^fl_[0-9A-Z]{26}$")]
Confidence = Annotated[StrictFloat, Field(ge=0, le=1), AfterValidator(require_storable)]
# Peers stop at 20k-25k (Langfuse, LangSmith); the flow page reads steps in pages, so none is read at once.
MAX_STEPS_PER_FLOW = 20_000
MAX_STEP_PAYLOAD_BYTES = 64 * 1024
MAX_PARENTS = 16


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _no_sealed_lookalike(fields: dict[str, Any]) -> dict[str, Any]:
    """A field's value that is a map holding the sealing marker would be read back as a sealed field."""
    for name, value in fields.items():
        if isinstance(value, dict) and SEALED_MARKER in value:
            raise refusal("reserved_key", f"{SEALED_MARKER} is reserved for sealed fields", (name, SEALED_MARKER))
    return fields


# AfterValidators run in order: storable first, so the sealing check sees only string keys.
StepFields = Annotated[dict[str, Any], AfterValidator(require_storable), AfterValidator(_no_sealed_lookalike)]


class FlowStart(_Strict):
    trigger_type: Name
    flow_id: FlowId | None = Field(
        None, description="client-chosen id (fl_ + ULID), so a caller can name the flow before it is written"
    )
    trigger_ref: Ref
    trigger_summary: Summary
    trace_id: OpaqueId | None = None
    patient_id: OpaqueId | None = None


class BackRefs(_Strict):
    llm_call_log_ref: Ref | None = None
    experiment_trace_ref: Ref | None = None
    decision_graph_node_ref: Ref | None = None
    memory_claim_ref: Ref | None = None


class PiiFields(_Strict):
    inputs: list[StrictStr] = Field(default_factory=list, max_length=64)
    outputs: list[StrictStr] = Field(default_factory=list, max_length=64)


class StepCreate(_Strict):
    step_id: StepId | None = Field(None, description="client-chosen id (st_ + ULID) so a retried write is recognised")
    step_kind: Name
    agent: Name
    summary_text: Summary
    inputs: StepFields = Field(default_factory=dict)
    outputs: StepFields = Field(default_factory=dict)
    pii_fields: PiiFields = Field(default_factory=PiiFields)
    latency_ms: StrictInt | None = Field(None, ge=0, le=86_400_000)
    confidence: Confidence | None = None
    back_refs: BackRefs = Field(default_factory=BackRefs)
    parent_step_ids: list[StepId] = Field(default_factory=list, max_length=MAX_PARENTS)

    @model_validator(mode="after")
    def _pii_fields_are_declared_fields(self) -> StepCreate:
        for side in ("inputs", "outputs"):
            missing = set(getattr(self.pii_fields, side)) - set(getattr(self, side))
            if missing:
                raise ValueError(f"pii_fields.{side} names fields not in {side}: {', '.join(sorted(missing))}")
        return self


class Outcome(_Strict):
    type: Literal["claim_created", "recommendation_delivered", "no_action", "insufficient_evidence", "error", "timeout"]
    summary: Summary
    confidence: Confidence | None = None


class FlowClose(_Strict):
    state: Literal["completed", "aborted"]
    outcome: Outcome
    reason: Name | None = None


class ConsentChange(_Strict):
    reasoning_read: StrictBool


class Consent(BaseModel):
    """A patient's ``reasoning.read`` choice; never changed means opted out (``changed_at`` null)."""

    patient_id: str
    reasoning_read: bool
    changed_at: str | None = Field(None, description="when the patient last changed it; null if never")


FlowSource = Literal["api", "agent", "otlp"]


class FirstStep(BaseModel):
    """A flow's first step, as the flows list shows it."""

    step_kind: str
    agent: str
    summary_text: str


class FlowView(BaseModel):
    flow_id: str
    trigger_type: str
    trigger_ref: str
    trigger_summary: str
    trace_id: str | None = None
    patient_id: str | None = None
    flow_state: Literal["active", "completed", "aborted"]
    created_by: str
    created_at: str
    closed_at: str | None = None
    step_count: int
    outcome: Outcome | None = None
    abort_reason: str | None = None
    patient_safe_summary: bool | None = None
    dimensions_snapshot: Dimensions | None = None
    # What wrote it (None for a flow from before this was kept): the API, an agent in process, or OTLP, with the
    # traces' service.name; the agents that recorded its steps; its first step.
    source: FlowSource | None = None
    source_service: str | None = None
    agents: list[str] = Field(default_factory=list)
    first_step: FirstStep | None = None


class StepView(BaseModel):
    step_id: str
    flow_id: str
    step_kind: str
    agent: str
    summary_text: str
    latency_ms: int | None = None
    confidence: float | None = None
    parent_step_ids: list[str] = []
    created_at: str


class AdminStepView(StepView):
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    pii_fields: PiiFields
    back_refs: BackRefs


class AdminFlowView(BaseModel):
    flow: FlowView
    steps: list[AdminStepView]
    dimensions: Dimensions


class FlowPage(BaseModel):
    flows: list[FlowView]
    next_cursor: str | None


class NarrativeStep(BaseModel):
    agent_label: str
    summary: str
    at: str


class RadarAxis(BaseModel):
    label: str
    score: int | None = Field(description="0-7, or null when the flow holds no data for this axis")
    bucket: str = Field(description="low, medium, high, or not_rated")


class Narrative(BaseModel):
    flow_id: str
    trigger_summary: str
    steps: list[NarrativeStep]
    outcome_summary: str
    radar: list[RadarAxis]
    disclaimer: str


class InProgress(BaseModel):
    flow_id: str
    state: Literal["active"]
    steps_so_far: int


class StepBatch(_Strict):
    """Steps of one flow written together: all of them or none (``POST .../steps:batch``)."""

    steps: list[StepCreate] = Field(min_length=1, description="in order; a parent may be an earlier step of the batch")


class StepBatchResult(BaseModel):
    """What a batch wrote now, and which of its steps an earlier attempt of it had already written."""

    flow_id: str
    recorded: list[str]
    already_recorded: list[str]
