"""Every table and bucket, declared once.

CDK (``infra/constructs/data.py``), the moto fixtures and the dev server all build from these
specs, so the key schema tested is the key schema deployed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KeyType = Literal["S", "N"]


@dataclass(frozen=True)
class Key:
    name: str
    type: KeyType = "S"


@dataclass(frozen=True)
class Index:
    name: str
    partition: Key
    sort: Key | None = None
    # None projects every attribute; a tuple projects the keys plus those attributes. Leaving
    # often-updated attributes out keeps updates of them from writing to the index too.
    include: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TableSpec:
    name: str
    partition: Key
    sort: Key | None = None
    indexes: tuple[Index, ...] = ()
    ttl_attribute: str | None = None

    def attributes(self) -> dict[str, KeyType]:
        """Every key attribute of the table and its indexes, with its type."""
        keys = [self.partition, self.sort]
        for index in self.indexes:
            keys += [index.partition, index.sort]
        return {key.name: key.type for key in keys if key is not None}


@dataclass(frozen=True)
class BucketSpec:
    name: str
    # Days each object version stays locked in compliance mode (nobody, root included, can delete
    # or overwrite it); None for no Object Lock.
    lock_days: int | None = None
    versioned: bool = True


_CREATED = Key("created_at")
# What a flow listing shows; none of it changes while steps are recorded.
_FLOW_SUMMARY = ("trigger_type", "trigger_ref", "trace_id", "patient_id", "flow_state", "closed_at", "created_by")
_FAMILY_AGGREGATE = (
    "trigger_ref",
    "trigger_summary",
    "flow_state",
    "created_at",
    "created_by",
    "step_count",
    "outcome",
)
# What the flows list filters on (reasoning/listing.py): none of it changes per step but agents, and that
# only when an agent records its first step in the flow. step_count stays out, so a step does not rewrite it.
_FLOW_LISTING = ("trigger_type", "flow_state", "outcome", "agents", "patient_id")
# What an exported flow record needs of the flow (reasoning/export.py): never trigger_summary or patient_id.
_EXPORT_RECORD = (
    "trigger_type",
    "trigger_ref",
    "trace_id",
    "flow_state",
    "created_at",
    "outcome",
    "abort_reason",
    "patient_safe_summary",
    "step_count",
)

TABLES: tuple[TableSpec, ...] = (
    TableSpec(
        "runs",
        Key("session_id"),
        Key("run_id"),
        indexes=(
            # Sparse: only SUCCESS diagnosis runs with a published result carry the attribute.
            Index("safe_diagnosis", Key("safe_diagnosis_session_id"), _CREATED),
            Index("by_run", Key("run_id"), include=()),  # run id -> session, for cancel
            # Sparse: only session headers carry session_owner; a user's sessions, most recently active first.
            Index("by_owner", Key("session_owner"), Key("last_active_at"), include=("title", "created_at")),
            # Sparse: only the headers of sessions a patient began carry session_subject; erasure finds them here.
            Index("by_subject", Key("session_subject"), _CREATED, include=()),
        ),
    ),
    TableSpec(
        "flows",
        Key("flow_id"),
        indexes=(
            Index("by_patient", Key("patient_id"), _CREATED, include=_FLOW_SUMMARY),
            Index("by_trace", Key("trace_id"), _CREATED, include=_FLOW_SUMMARY),
            # Sparse: only closed flows carry closed_at. A family's recent flows for the correlator,
            # newest first, with what its aggregate reads (nothing here changes after the close).
            Index("by_family", Key("trigger_type"), Key("closed_at"), include=_FAMILY_AGGREGATE),
            # Sparse and sharded: only active flows carry active_shard ("0".."15"), so the decay job
            # reads just them and no single "active" partition takes every flow's writes.
            Index("by_active", Key("active_shard"), _CREATED, include=()),
            # Sparse and sharded: only flows closed since closed_shard ("0".."15") existed carry it. The
            # export reads a closed_at window shard by shard and merges; nothing here changes after the close.
            Index("by_closed", Key("closed_shard"), Key("closed_at"), include=_EXPORT_RECORD),
            # The flows list, newest first: every flow carries listing_year (its created_at's year), so a
            # listing walks one partition per year, newest first, and filters with a FilterExpression.
            # Added alone: a deployed table gains one GSI per CloudFormation update. Years, not shards:
            # every write lands in the current bucket whatever its width, so narrower buckets would only
            # add empty partitions to walk; one partition key takes about 1,000 index writes a second
            # (some 250 flows a second at about four index writes each); past that, shard it
            # ("2026#0".."2026#n") and merge the shards' pages as the export does.
            Index("by_listing", Key("listing_year"), _CREATED, include=_FLOW_LISTING),
        ),
    ),
    # A flow's steps in creation order (ULIDs made in the same millisecond do not sort by time): the
    # admin flow page reads them a page at a time (reasoning/steps_page.py).
    TableSpec("steps", Key("flow_id"), Key("step_id"), indexes=(Index("by_created", Key("flow_id"), _CREATED),)),
    TableSpec("consents", Key("patient_id")),
    # Subjects (patients) by a digest of their id (subjects/): each one's data key, legal hold and erasure.
    TableSpec(
        "subjects",
        Key("subject_id"),
        Key("sk"),
        # Sparse: only an erasure still running carries erasure_state ("running"); the resume job finds it here.
        indexes=(Index("by_state", Key("erasure_state"), Key("started_at"), include=("patient_id", "reason")),),
    ),
    # OTLP spans waiting for a parent that has not arrived (otlp/waiting.py), each sealed whole. No TTL: a span
    # leaves only by being written, so nothing that was taken is ever dropped.
    TableSpec("otlp_waiting", Key("flow_id"), Key("waiting_key")),
    TableSpec(
        "ledger",
        Key("chain_id"),
        Key("seq", "N"),
        # Chains belong to writers, so a subject's events are found here: keys and action only.
        indexes=(Index("by_subject", Key("subject"), Key("at"), include=("action",)),),
    ),
    # Which writer holds which chain, and until when (ledger/leases.py): one item a chain, rewritten in place.
    TableSpec("ledger_leases", Key("chain_id")),
    # Each chain's RFC 6962 tree over its event hashes, a tile (up to 256 hashes) an item (ledger/tiles.py).
    TableSpec("ledger_tiles", Key("chain_id"), Key("tile")),
    # Also holds the backlog's status counters (request_id "#counts#00".., store/counters.py).
    TableSpec(
        "backlog",
        Key("request_id"),
        indexes=(
            Index("by_status", Key("status"), _CREATED),
            # Rows of a status by when they entered it: the longest dispatched and the latest failures,
            # each one bounded query (keys plus what a recent failure shows).
            Index(
                "by_status_changed",
                Key("status"),
                Key("status_changed_at"),
                include=("failure_reason", "completed_at"),
            ),
        ),
        ttl_attribute="expires_at",
    ),
    # The backlog's ticket queue: item 0 counts tickets issued and taken, items 1.. are slots.
    TableSpec("backlog_tickets", Key("ticket", "N"), ttl_attribute="expires_at"),
    # Also holds the library's counters (pathway_id "#counts#00".., store/counters.py).
    TableSpec(
        "pathways",
        Key("pathway_id"),
        indexes=(
            # What changed in a trigger family since a matcher snapshot was taken (keys only).
            Index("by_family_changed", Key("trigger_type"), Key("changed_at"), include=()),
            # Sparse and sharded: only active pathways reused at least once carry hit_shard ("0".."3"),
            # so the top hits are a few Limit queries, and no single index partition takes every hit.
            Index("by_hits", Key("hit_shard"), Key("hit_count", "N"), include=("trigger_type",)),
        ),
    ),
    TableSpec(
        "claims_review",
        Key("claim_id"),
        indexes=(
            Index("by_status", Key("status"), _CREATED),
            # Sparse: only terminal entries carry resolved_at; the recent resolutions, newest first.
            Index("by_resolved", Key("status"), Key("resolved_at")),
        ),
    ),
    TableSpec("knowledge", Key("pk"), Key("sk")),
    TableSpec("rate_limits", Key("key"), Key("window"), ttl_attribute="expires_at"),
    # Workspaces: a header item (sk "#workspace") and one item per member (sk "member#<user>").
    TableSpec(
        "workspaces",
        Key("workspace_id"),
        Key("sk"),
        indexes=(
            # Sparse: only member items carry member_id; a user's workspaces, by id.
            Index("by_member", Key("member_id"), Key("workspace_id")),
            # Sparse: only the headers of listed public workspaces carry listing ("public").
            Index("by_listing", Key("listing"), _CREATED),
        ),
    ),
    # Documents: a revision family item (sk "#family"), its versions (sk "v#00001"...) and one
    # counter item per scope (document_id "count#<scope>").
    TableSpec(
        "documents",
        Key("document_id"),
        Key("sk"),
        indexes=(
            # Sparse: only live (not deleted) family items carry live_scope.
            Index("by_scope", Key("live_scope"), _CREATED),
            # Sparse: only the families a patient created carry subject_id (deleted ones too); erasure finds
            # them here (workspaces/erasure.py). Keys only, so updating a family does not write to it.
            Index("by_subject", Key("subject_id"), _CREATED, include=()),
        ),
    ),
)

BUCKETS: tuple[BucketSpec, ...] = (
    BucketSpec("documents"),
    BucketSpec("checkpoints", lock_days=7 * 365),  # audit evidence outlives HIPAA's six years
    BucketSpec("artifacts"),
)


def table_spec(name: str) -> TableSpec:
    """The spec of the table with this logical name."""
    for spec in TABLES:
        if spec.name == name:
            return spec
    raise KeyError(f"no table named {name!r}")


def physical_table_name(prefix: str, logical: str) -> str:
    """The deployed name of a table: one rule for CDK, the dev server and the functions."""
    return f"{prefix}-{logical.replace('_', '-')}"


def physical_bucket_name(prefix: str, logical: str, suffix: str) -> str:
    """The deployed name of a bucket; ``suffix`` keeps it globally unique (account and region)."""
    return f"{prefix}-{logical.replace('_', '-')}-{suffix}"
