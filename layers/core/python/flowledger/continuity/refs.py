"""Grounded refs: the safe, document-level record of what a turn's answer was grounded on.

Seed, Scope 1 "Extend grounded references": *persist document ID, scope and scope ID, file
name/extension, source kind, source version, last engine used, evidence status; do not persist raw
query results or secret-bearing source descriptors in conversation metadata*. Issue #14 adds the
revision family and coverage, and *at most 100 sources per turn*.

A ref is a closed model (``extra="forbid"``): a raw result, an S3 key or a presigned URL has no field
to go in, and the file name is refused when it carries a locator or a credential. The store keeps one
item per session, the refs of its latest grounded turn, on the ``runs`` table beside the session header.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Annotated, Any, Literal

from botocore.exceptions import ClientError
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StringConstraints,
    model_validator,
)

from flowledger.chat.models import RUN_PATTERN
from flowledger.chat.runs import SESSION_HEADER
from flowledger.continuity.request import MAX_SOURCES_PER_TURN, DocumentId
from flowledger.errors import Forbidden
from flowledger.ledger.events import timestamp
from flowledger.services import Services
from flowledger.store import items
from flowledger.store.decoding import decoded
from flowledger.workspaces.models import (
    EXTENSIONS,
    NARRATIVE_KINDS,
    SESSION_PATTERN,
    WORKSPACE_PATTERN,
    DocumentView,
    FileName,
)

GROUNDED_ITEM = "#grounded"

SourceKind = Literal["narrative", "tabular"]
Engine = Literal["narrative", "tabular", "history"]
EvidenceStatus = Literal["completed", "partial", "failed", "skipped"]
ScopeKind = Literal["workspace", "conversation"]

# What must never sit in a file name that is stored and shown again: a locator or a credential.
_LOCATOR_OR_SECRET = re.compile(
    r"://|X-Amz-|Signature=|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|\bsk-[A-Za-z0-9_-]{16,}|\bBearer\s", re.IGNORECASE
)
_SCOPE_ID = {"workspace": re.compile(WORKSPACE_PATTERN), "conversation": re.compile(SESSION_PATTERN)}
_FINGERPRINT = r"^[0-9a-f]{64}$"


def _no_locator_or_secret(value: str) -> str:
    if _LOCATOR_OR_SECRET.search(value):
        raise ValueError("a grounded ref keeps a file name, never a locator or a credential")
    return value


SafeFileName = Annotated[FileName, AfterValidator(_no_locator_or_secret)]


class GroundedRef(BaseModel):
    """One source of a grounded turn: where it lives, which version was read, how, and how completely.

    ``coverage`` is the share of the source the evidence covered: 1 exactly when ``completed``, strictly
    between 0 and 1 when ``partial``, 0 when ``failed`` or ``skipped`` (full coverage is never claimed
    when it was partial). ``plan_fingerprint`` (tabular only) names the stored plan of the run that read
    it, never its rows.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    document_id: DocumentId
    revision_family: DocumentId
    scope: ScopeKind
    scope_id: Annotated[str, StringConstraints(strict=True, max_length=64)]
    file_name: SafeFileName
    extension: Annotated[str, StringConstraints(strict=True, max_length=16)]
    source_kind: SourceKind
    source_version: Annotated[StrictInt, Field(ge=1)]
    last_engine: Engine
    evidence_status: EvidenceStatus
    coverage: Annotated[StrictFloat, Field(ge=0, le=1)]
    plan_fingerprint: Annotated[str, StringConstraints(strict=True, pattern=_FINGERPRINT)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> GroundedRef:
        # The documents service's id is its revision family: a ref by id resolves to the current version.
        if self.revision_family != self.document_id:
            raise ValueError("revision_family is the document id of the documents service")
        if not _SCOPE_ID[self.scope].fullmatch(self.scope_id):
            raise ValueError(f"scope_id is not a {self.scope} id")
        if self.extension != PurePath(self.file_name).suffix.lower():
            raise ValueError("extension is the file name's extension")
        kinds = [kind for kind, extensions in EXTENSIONS.items() if self.extension in extensions]
        if not kinds or (kinds[0] in NARRATIVE_KINDS) != (self.source_kind == "narrative"):
            raise ValueError(f"a {self.source_kind} source does not end in {self.extension or 'no extension'}")
        if self.plan_fingerprint is not None and self.source_kind != "tabular":
            raise ValueError("only a tabular source has a plan fingerprint")
        _check_coverage(self.evidence_status, float(self.coverage))
        return self

    @classmethod
    def from_document(
        cls,
        document: DocumentView,
        *,
        last_engine: Engine,
        evidence_status: EvidenceStatus,
        coverage: float,
        plan_fingerprint: str | None = None,
    ) -> GroundedRef:
        """The ref of a document as the documents service returned it, read at its current version."""
        if document.current_version is None:
            raise ValueError("a document with no completed version cannot ground an answer")
        scope, _, scope_id = document.scope.partition(":")
        return cls.model_validate(
            {
                "document_id": document.document_id,
                "revision_family": document.document_id,
                "scope": scope,
                "scope_id": scope_id,
                "file_name": document.file_name,
                "extension": PurePath(document.file_name).suffix.lower(),
                "source_kind": "narrative" if document.kind in NARRATIVE_KINDS else "tabular",
                "source_version": document.current_version,
                "last_engine": last_engine,
                "evidence_status": evidence_status,
                "coverage": float(coverage),
                "plan_fingerprint": plan_fingerprint,
            }
        )

    @property
    def scope_name(self) -> str:
        """The scope as the index and the workspaces code name it: ``workspace:<id>``, ``conversation:<id>``."""
        return f"{self.scope}:{self.scope_id}"


def _check_coverage(status: str, coverage: float) -> None:
    if status == "completed" and coverage != 1:
        raise ValueError("completed evidence covers the whole source (coverage 1)")
    if status == "partial" and not 0 < coverage < 1:
        raise ValueError("partial evidence has a coverage strictly between 0 and 1")
    if status in ("failed", "skipped") and coverage != 0:
        raise ValueError(f"{status} evidence covers nothing (coverage 0)")


class GroundedRefs(BaseModel):
    """The refs of one grounded turn of a session: at most ``MAX_SOURCES_PER_TURN``, each document once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: Annotated[str, StringConstraints(strict=True, pattern=SESSION_PATTERN)]
    run_id: Annotated[str, StringConstraints(strict=True, pattern=RUN_PATTERN)]
    refs: list[GroundedRef] = Field(max_length=MAX_SOURCES_PER_TURN)
    # The stored plan of each tabular ref, by the fingerprint the ref names: a follow-up refines it, a
    # replay reruns it. A plan is a bounded query description, never its rows.
    plans: dict[str, dict[str, Any]] = Field(default_factory=dict, max_length=MAX_SOURCES_PER_TURN)

    @model_validator(mode="after")
    def _each_document_once(self) -> GroundedRefs:
        ids = [ref.document_id for ref in self.refs]
        if len(set(ids)) != len(ids):
            raise ValueError("a grounded turn names each document once")
        named = {ref.plan_fingerprint for ref in self.refs if ref.plan_fingerprint}
        if set(self.plans) - named:
            raise ValueError("plans are kept only for the fingerprints the refs name")
        return self

    def plan_for(self, ref: GroundedRef) -> dict[str, Any] | None:
        """The stored plan of a tabular ref, or None."""
        return self.plans.get(ref.plan_fingerprint) if ref.plan_fingerprint else None


class GroundedRefStore:
    """The latest grounded turn's refs of each session: one item ``(session_id, "#grounded")`` on ``runs``.

    A write is one transaction: a condition that the session header names the writer as its owner, and
    the item's update, itself conditional on not replacing a later turn's refs (run ids sort by time), so
    a slow turn finishing late cannot overwrite what a newer turn grounded.
    """

    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.aws.dynamodb
        self._table = services.aws.table_name("runs")

    def put(self, owner: str, grounded: GroundedRefs) -> bool:
        """Store ``grounded`` as the session's latest; False when a later turn's refs are there already.

        :class:`Forbidden` when the session is not ``owner``'s (or was never used).
        """
        key = {"session_id": {"S": grounded.session_id}}
        values = items.to_item(
            {
                ":owner": owner,
                ":run": grounded.run_id,
                ":refs": [ref.model_dump(mode="json") for ref in grounded.refs],
                ":plans": grounded.plans,
                ":now": timestamp(self._s.clock()),
            }
        )
        header = {
            "ConditionCheck": {
                "TableName": self._table,
                "Key": {**key, "run_id": {"S": SESSION_HEADER}},
                "ConditionExpression": "#o = :owner",
                "ExpressionAttributeNames": {"#o": "owner"},
                "ExpressionAttributeValues": {":owner": values[":owner"]},
            }
        }
        # An update, not a put: the item's keys never change, so the by_run index is written only once.
        update = {
            "Update": {
                "TableName": self._table,
                "Key": {**key, "run_id": {"S": GROUNDED_ITEM}},
                "UpdateExpression": "SET #o = :owner, grounded_run_id = :run, refs = :refs, plans = :plans, "
                "updated_at = :now",
                "ConditionExpression": "(attribute_not_exists(session_id) OR #o = :owner) AND "
                "(attribute_not_exists(grounded_run_id) OR grounded_run_id <= :run)",
                "ExpressionAttributeNames": {"#o": "owner"},
                "ExpressionAttributeValues": values,
            }
        }
        try:
            self._db.transact_write_items(TransactItems=[header, update])
        except ClientError as exc:
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if reasons[:1] == ["ConditionalCheckFailed"]:
                raise Forbidden("this session belongs to another user") from None
            if reasons[1:2] == ["ConditionalCheckFailed"]:
                return False
            raise
        return True

    def get(self, owner: str, session_id: str) -> GroundedRefs | None:
        """The session's latest grounded refs, None when no turn grounded any; Forbidden for another's session."""
        item = self._db.get_item(
            TableName=self._table,
            ConsistentRead=True,
            Key={"session_id": {"S": session_id}, "run_id": {"S": GROUNDED_ITEM}},
        ).get("Item")
        if item is None:
            return None
        if item.get("owner", {}).get("S") != owner:
            raise Forbidden("this session belongs to another user")
        return decoded(item, _grounded_of, "grounded refs of session", session_id)


def _grounded_of(value: dict[str, Any]) -> GroundedRefs:
    return GroundedRefs.model_validate(
        {
            "session_id": value["session_id"],
            "run_id": value["grounded_run_id"],
            "refs": value["refs"],
            "plans": value.get("plans", {}),
        }
    )
