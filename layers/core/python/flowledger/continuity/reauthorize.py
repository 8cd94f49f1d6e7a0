"""Every prior source checked again before it is reused, and once more just before publishing.

Seed, Scope 3 "Authorization and source freshness": *before any historical source reuse: revalidate
conversation ownership; revalidate group membership/public visibility; resolve the current source
version; fail or disclose stale evidence when the source changed*. Acceptance: *a changed or
unauthorized prior source is not reused silently*.

The current version is resolved through the revision family (the document id), so a re-uploaded
document is the same source at a newer version, never an archived revision that quietly stops
answering. A ref's recorded scope is never trusted on its own: reading the document goes through
``DocumentService.get``, which checks the caller against the document's own scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from flowledger.continuity.refs import GroundedRef, GroundedRefs
from flowledger.errors import Forbidden, NotFound
from flowledger.identity import Principal
from flowledger.workspaces.documents import DocumentService
from flowledger.workspaces.models import DocumentView
from flowledger.workspaces.service import WorkspaceService
from flowledger.workspaces.store import conversation_scope

MAX_NAMED_FILES = 10  # a disclosure names at most this many files per sentence, then counts the rest


class SourceStatus(StrEnum):
    REUSABLE = "reusable"  # readable, same version: its saved evidence may be reused
    CHANGED = "changed"  # readable, newer version: must rerun, and the answer says so
    UNAUTHORISED = "unauthorised"  # no longer readable by the caller: dropped, and the answer says so
    MISSING = "missing"  # deleted (or no longer where the ref says): dropped, and the answer says so


class OutcomeReason(StrEnum):
    """Why a source got its status: fixed codes, for the run record and the reasoning flow."""

    SAME_VERSION = "SAME_VERSION"
    NEW_VERSION = "NEW_VERSION"
    ACCESS_REVOKED = "ACCESS_REVOKED"  # membership revoked, public visibility withdrawn, or never readable
    DELETED = "DELETED"
    SCOPE_MISMATCH = "SCOPE_MISMATCH"


@dataclass(frozen=True)
class SourceOutcome:
    """One prior source after reauthorisation: its ref, its status and the version that is current now."""

    ref: GroundedRef
    status: SourceStatus
    reason: OutcomeReason
    current_version: int | None = None
    document: DocumentView | None = None  # the family as read now: set when the caller may still read it

    @property
    def reusable(self) -> bool:
        return self.status is SourceStatus.REUSABLE


def reauthorize(
    principal: Principal,
    grounded: GroundedRefs,
    workspaces: WorkspaceService,
    documents: DocumentService,
) -> list[SourceOutcome]:
    """The outcome of each prior source for ``principal``, in the refs' order.

    The conversation itself must still be the caller's: otherwise :class:`Forbidden` and no outcome at
    all (naming another user's files, even to say they are gone, would disclose them). Each source is
    read through the documents service (its family: current version and scope); one it cannot read is
    ``unauthorised`` when its scope is no longer readable, else ``missing``. Requests: one family read
    and one scope check per source, one more scope check per distinct scope of an unreadable source.
    """
    if not workspaces.may_read(principal, conversation_scope(grounded.session_id)):
        raise Forbidden("this session belongs to another user")
    readable: dict[str, bool] = {}
    outcomes: list[SourceOutcome] = []
    for ref in grounded.refs:
        try:
            family = documents.get(principal, ref.revision_family)
        except NotFound:
            scope = ref.scope_name
            if scope not in readable:
                readable[scope] = workspaces.may_read(principal, scope)
            if readable[scope]:
                outcomes.append(SourceOutcome(ref, SourceStatus.MISSING, OutcomeReason.DELETED))
            else:
                outcomes.append(SourceOutcome(ref, SourceStatus.UNAUTHORISED, OutcomeReason.ACCESS_REVOKED))
            continue
        if family.scope != ref.scope_name or family.current_version is None:
            outcomes.append(SourceOutcome(ref, SourceStatus.MISSING, OutcomeReason.SCOPE_MISMATCH))
        elif family.current_version != ref.source_version:
            outcomes.append(
                SourceOutcome(ref, SourceStatus.CHANGED, OutcomeReason.NEW_VERSION, family.current_version, family)
            )
        else:
            outcomes.append(
                SourceOutcome(ref, SourceStatus.REUSABLE, OutcomeReason.SAME_VERSION, family.current_version, family)
            )
    return outcomes


_SENTENCES = {
    SourceStatus.CHANGED: "These sources changed since the previous answer, so its results were not reused: {}.",
    SourceStatus.UNAUTHORISED: "These sources were left out because you no longer have access to them: {}.",
    SourceStatus.MISSING: "These sources were left out because they were deleted: {}.",
}


def disclosure(outcomes: Sequence[SourceOutcome]) -> str | None:
    """The sentence(s) the public answer carries about sources not reused as they were; None when all were.

    Fixed texts naming file names only (never ids, scopes or versions), in a fixed order: changed, then
    unauthorised, then missing; at most ``MAX_NAMED_FILES`` names per sentence, the rest counted.
    """
    sentences = []
    for status, sentence in _SENTENCES.items():
        names = [outcome.ref.file_name for outcome in outcomes if outcome.status is status]
        if names:
            sentences.append(sentence.format(_named(names)))
    return " ".join(sentences) or None


def _named(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED_FILES])
    rest = len(names) - MAX_NAMED_FILES
    return shown if rest <= 0 else f"{shown} and {rest} more"
