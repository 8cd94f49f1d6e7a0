"""Backlog rows, claim-review entries and the observability view.

Request bodies are strict where a scalar is meant (``dispatched_from_backlog: 0`` is refused, not
read as false); the enum fields stay lax so that their JSON string values still validate.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

Name = Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z][a-z0-9_.-]{0,63}$")]
Ref = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=256)]
FlowId = Annotated[str, StringConstraints(strict=True, pattern=r"^fl_[0-9A-Z]{26}$")]


class BacklogStatus(StrEnum):
    PENDING = "pending"
    DISPATCHED = "dispatched"
    COMPLETED = "completed"
    FAILED_VOLUNTARY = "failed_voluntary"
    FAILED_AFTER_RETRIES = "failed_after_retries"


class Reason(StrEnum):
    NO_EVIDENCE_HITS = "no_evidence_hits"
    WEAK_COMPOSITE_K = "weak_composite_k"
    CLAIM_REJECTED = "claim_rejected"
    OPERATOR_REQUEST = "operator_request"


class DeeperRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    idempotency_key: Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.:-]{8,128}$")]
    trigger_type: Name
    trigger_ref: Ref
    reason: Reason
    question_framing: Annotated[str, StringConstraints(strict=True, min_length=1, max_length=2000)]
    dispatched_from_backlog: StrictBool = False


class PullRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trigger_type: Name | None = None


class Completion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    flow_id: FlowId | None = None
    error: Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z][a-z0-9_]{0,63}$")] | None = Field(
        None, description="a failure reason code; flips the row to failed_voluntary"
    )


class BacklogRow(BaseModel):
    request_id: str
    trigger_type: str
    trigger_ref: str
    reason: Reason
    question_framing: str
    dispatched_from_backlog: bool
    status: BacklogStatus
    created_at: str
    created_by: str
    strategy: str | None = None
    retry_count: int = 0
    ticket: int | None = Field(
        None, description="the row's ticket while it is pending: enqueue order, not its place (queue_place.py)"
    )
    ticketed_at: str | None = None
    dispatched_at: str | None = None
    dispatched_to: str | None = None
    completed_at: str | None = None
    completed_flow_id: str | None = None
    failure_reason: str | None = None
    expires_at: int | None = None
    # None only on rows written before it existed, until the counters' recount stamps them.
    status_changed_at: str | None = Field(None, description="when the row entered its current status")
    open_key: str | None = Field(
        None, description="a producer's open-request key: held while the row is open, released when it ends"
    )


class Pulled(BaseModel):
    request: BacklogRow | None


class RecentFailure(BaseModel):
    request_id: str
    status: BacklogStatus
    failure_reason: str | None
    completed_at: str | None


class BacklogView(BaseModel):
    status_distribution: dict[str, int] = Field(
        description="rows per status: exact for pending and dispatched; lifetime totals for the terminal"
        " statuses, whose rows expire 30 days after completion"
    )
    oldest_pending_age_seconds: int | None
    oldest_dispatched_age_seconds: int | None
    retry_distribution: dict[str, int]
    recent_failures: list[RecentFailure]
    loop_health: Literal["healthy", "warn", "critical"]


class ClaimMark(BaseModel):
    model_config = ConfigDict(extra="forbid")

    claim_id: Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
    reason: Reason = Reason.CLAIM_REJECTED
    rejection_summary: Annotated[str, StringConstraints(strict=True, min_length=1, max_length=1000)]
    flow_id: FlowId | None = None


class ClaimResolution(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resolution: Literal["resolved", "dismissed"]
    note: Annotated[str, StringConstraints(strict=True, max_length=1000)] | None = None


class ClaimEntry(BaseModel):
    claim_id: str
    reason: Reason
    rejection_summary: str
    flow_id: str | None = None
    status: Literal["pending", "resolved", "dismissed"]
    created_at: str
    marked_by: str
    resolved_at: str | None = None
    resolved_by: str | None = None
    note: str | None = None


class ClaimQueue(BaseModel):
    pending: list[ClaimEntry]
    recent_resolutions: list[ClaimEntry]
