"""The flow dataset record: one JSON line per closed flow, as ``flowledger flows export --format raw`` writes it.

The readers (``flows lint``, ``flows signature-check``) and the future exporter share this one definition::

    {"flow": {"flow_id", "trigger_type", "trigger_ref", "trace_id"?, "flow_state", "created_at", "closed_at",
              "outcome": {"type", "summary", "confidence"?}?, "abort_reason"?, "patient_safe_summary",
              "step_count", "agents": [...], "aggregate_confidence"?},
     "steps": [{"step_id", "step_kind", "agent", "summary_text", "summary_hidden", "confidence"?, "latency_ms"?,
                "parent_step_ids": [...], "back_refs": {"llm_call_log_ref": bool, "experiment_trace_ref": bool,
                                                        "decision_graph_node_ref": bool, "memory_claim_ref": bool}}]}

PHI-safe by construction: no step inputs or outputs, no trigger summary, no ``patient_id`` (an unknown key
is refused, so a record that carries one is not a record), back-refs as booleans only. The store keeps a
summary the guard flags and marks only the whole flow (``patient_safe_summary``); the export hides it
instead: ``summary_hidden`` is true and ``summary_text`` is :data:`HIDDEN_SUMMARY`. A visible summary (a
step's or the outcome's) must pass the guard, so a file cannot carry a summary the guard would flag.

Steps are in creation order and a step's parents are earlier steps of the same flow (the service refuses
a parent it does not hold, and a step cannot be added after its children). ``agents`` is the set of agents
the flow's steps name, in first-appearance order; ``aggregate_confidence`` the lowest confidence across the
steps and the outcome (the pathway qualifier's measure), absent when none carries one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    model_validator,
)

from flowledger.errors import InvalidInput
from flowledger.json_objects import ObjectInvalid, parse_object
from flowledger.reasoning.guard import check_summary
from flowledger.reasoning.models import (
    MAX_PARENTS,
    MAX_STEPS_PER_FLOW,
    Confidence,
    Name,
    OpaqueId,
    Outcome,
    Ref,
    StepId,
    Summary,
)

HIDDEN_SUMMARY = "Summary withheld: it did not pass the summary guard"
FlowId = Annotated[str, StringConstraints(strict=True, pattern=r"^fl_[0-9A-Z]{26}$")]
# ledger.events.timestamp: UTC, microseconds, fixed width, so text order is time order.
Timestamp = Annotated[str, StringConstraints(strict=True, pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")]
# A tool as its step names it (an unsealed ``inputs.tool``): an identifier, never free text.
ToolName = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")]
MAX_AGENTS = 64
# A full flow fits: 20,000 steps of at most about 2.6 KB each as JSON (a 280-character summary, 16 parents).
MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_RECORDS = 100_000  # one file of one export window; more is a sweep to split


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RecordBackRefs(_Record):
    """Whether the step points at each kind of record; never the ref itself."""

    llm_call_log_ref: StrictBool
    experiment_trace_ref: StrictBool
    decision_graph_node_ref: StrictBool
    memory_claim_ref: StrictBool


class RecordStep(_Record):
    step_id: StepId
    step_kind: Name
    agent: Name
    summary_text: Summary
    summary_hidden: StrictBool
    confidence: Confidence | None = None
    latency_ms: StrictInt | None = Field(None, ge=0, le=86_400_000)
    parent_step_ids: list[StepId] = Field(max_length=MAX_PARENTS)
    back_refs: RecordBackRefs
    tool: ToolName | None = None  # the tool a tool step called, when the step names it

    @model_validator(mode="after")
    def _summary_is_safe_or_hidden(self) -> RecordStep:
        if self.summary_hidden:
            if self.summary_text != HIDDEN_SUMMARY:
                raise ValueError("a hidden summary's summary_text must be the withheld placeholder")
        else:
            _require_safe(self.summary_text, "summary_text")
        return self


class RecordFlow(_Record):
    flow_id: FlowId
    trigger_type: Name
    trigger_ref: Ref
    trace_id: OpaqueId | None = None
    flow_state: Literal["completed", "aborted"]
    created_at: Timestamp
    closed_at: Timestamp
    outcome: Outcome | None = None
    abort_reason: Name | None = None
    patient_safe_summary: StrictBool
    step_count: StrictInt = Field(ge=0, le=MAX_STEPS_PER_FLOW)
    agents: list[Name] = Field(max_length=MAX_AGENTS)
    aggregate_confidence: Confidence | None = None

    @model_validator(mode="after")
    def _consistent(self) -> RecordFlow:
        if self.closed_at < self.created_at:
            raise ValueError("closed_at is before created_at")
        if self.abort_reason is not None and self.flow_state != "aborted":
            raise ValueError("only an aborted flow has an abort_reason")
        if len(set(self.agents)) != len(self.agents):
            raise ValueError("agents repeat")
        if self.outcome is not None and self.outcome.summary != HIDDEN_SUMMARY:
            _require_safe(self.outcome.summary, "outcome.summary")
        return self


class FlowRecord(_Record):
    """One closed flow and its steps in creation order."""

    flow: RecordFlow
    steps: list[RecordStep] = Field(max_length=MAX_STEPS_PER_FLOW)

    @model_validator(mode="after")
    def _steps_belong_together(self) -> FlowRecord:
        if self.flow.step_count != len(self.steps):
            raise ValueError(f"step_count is {self.flow.step_count} but the record holds {len(self.steps)} steps")
        earlier: set[str] = set()
        for index, step in enumerate(self.steps):
            if step.step_id in earlier:
                raise ValueError(f"steps.{index}: step_id {step.step_id} repeats")
            later = [p for p in step.parent_step_ids if p not in earlier]
            if later:
                raise ValueError(f"steps.{index}: parent {later[0]} is not an earlier step of the flow")
            earlier.add(step.step_id)
        return self

    @property
    def step_kinds(self) -> list[str]:
        return [step.step_kind for step in self.steps]


class RecordInvalid(InvalidInput):
    """A dataset file with a bad line; ``line`` is 1-based (blank lines count, as an editor counts)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


def _require_safe(text: str, where: str) -> None:
    verdict = check_summary(text)
    if not verdict.safe:
        raise ValueError(f"{where} does not pass the summary guard ({', '.join(verdict.reasons)}): hide it")


def read_records(stream: IO[bytes]) -> Iterator[tuple[int, FlowRecord]]:
    """Each record of a JSONL stream with its line number; raises :class:`RecordInvalid` at the first bad line.

    Reads one bounded line at a time, so a file of any length costs one record's memory; a flow id that
    repeats an earlier line is refused (a sweep would count it twice).
    """
    seen: dict[str, int] = {}
    number = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES:
            raise RecordInvalid(number, f"longer than {MAX_LINE_BYTES} bytes")
        if not raw.strip():
            continue
        record = parse_record(number, raw)
        first = seen.get(record.flow.flow_id)
        if first is not None:
            raise RecordInvalid(number, f"flow_id {record.flow.flow_id} repeats line {first}")
        if len(seen) == MAX_RECORDS:
            raise RecordInvalid(number, f"more than {MAX_RECORDS} flows in one file")
        seen[record.flow.flow_id] = number
        yield number, record


def parse_record(number: int, raw: bytes) -> FlowRecord:
    """One line as a :class:`FlowRecord`, or :class:`RecordInvalid` saying what is wrong and where."""
    try:
        return parse_object(raw, FlowRecord, "record")
    except ObjectInvalid as exc:
        raise RecordInvalid(number, exc.reason) from None


# ---- preference pairs: ``flowledger flows export --format dpo`` (reasoning/preference.py) -------------

Content = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=16_000)]


class Message(_Record):
    """One conversational message, as TRL's DPOTrainer reads ``prompt``, ``chosen`` and ``rejected``."""

    role: Literal["system", "user", "assistant"]
    content: Content


class PairMetadata(_Record):
    """Why the pair was made; every key has one type on every row (no null: "" and -1 stand for none)."""

    family: Name
    rule: Literal["pathway_reuse", "claim_review"]
    chosen_flow_id: FlowId
    rejected_flow_id: FlowId
    chosen_label: str
    rejected_label: str
    chosen_outcome: str  # the outcome type, "" when the flow has none
    rejected_outcome: str
    chosen_closed_at: Timestamp
    rejected_closed_at: Timestamp
    chosen_confidence: float  # aggregate_confidence, -1.0 when none
    rejected_confidence: float
    chosen_hit_count: StrictInt  # the seeded pathway's hit_count, -1 when the flow seeded none
    rejected_hit_count: StrictInt
    chosen_steps: StrictInt
    rejected_steps: StrictInt


class PreferenceRecord(_Record):
    """One DPO pair in TRL's conversational preference format, plus its metadata."""

    prompt: list[Message] = Field(min_length=1)
    chosen: list[Message] = Field(min_length=1, max_length=1)
    rejected: list[Message] = Field(min_length=1, max_length=1)
    metadata: PairMetadata

    @model_validator(mode="after")
    def _a_real_pair(self) -> PreferenceRecord:
        if self.metadata.chosen_flow_id == self.metadata.rejected_flow_id:
            raise ValueError("a flow cannot be preferred to itself")
        if any(m.role != "assistant" for m in (*self.chosen, *self.rejected)):
            raise ValueError("chosen and rejected are the assistant's answer")
        return self
