"""Every prior source reauthorised through the real WorkspaceService and DocumentService (moto):
membership revoked between turns, public visibility revoked, a version changed, a re-upload resolving
to the current revision, a deleted source, another user's conversation; and the disclosure texts."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pytest

from flowledger.chat.runs import RunStore
from flowledger.continuity.reauthorize import OutcomeReason, SourceOutcome, SourceStatus, disclosure, reauthorize
from flowledger.continuity.refs import GroundedRef, GroundedRefs
from flowledger.errors import Forbidden
from flowledger.identity import Principal
from flowledger.ids import new_id
from flowledger.services import Services
from flowledger.workspaces.documents import DocumentService
from flowledger.workspaces.models import (
    DocumentCreate,
    DocumentView,
    MemberChange,
    VersionCreate,
    VisibilityChange,
    WorkspaceCreate,
)
from flowledger.workspaces.service import WorkspaceService
from tests.unit.test_continuity_refs import ref_fields

CSV = b"region,amount\nnorth,3\nsouth,5\n"


def user(sub: str) -> Principal:
    return Principal(kind="user", id=sub, scopes=frozenset({"documents"}))


ANN, BOB = user("ann"), user("bob")


@dataclass
class World:
    services: Services
    workspaces: WorkspaceService
    documents: DocumentService

    def workspace(self, kind: str = "group", **visibility: bool) -> str:
        return self.workspaces.create(ANN, WorkspaceCreate(kind=kind, name="Team", **visibility)).workspace_id  # type: ignore[arg-type]

    def upload(self, workspace_id: str, name: str = "sales.csv", body: bytes = CSV) -> DocumentView:
        kind = "csv" if name.endswith(".csv") else "markdown"
        create = DocumentCreate(
            workspace_id=workspace_id, file_name=name, kind=kind, content_base64=base64.b64encode(body).decode()
        )
        return self.documents.create(ANN, create).document

    def session(self, owner: str) -> str:
        session_id = new_id("ses_")
        RunStore(self.services).create(session_id, new_id("run_"), owner, "q", "offline", True)
        return session_id

    def grounded(self, session_id: str, *documents: DocumentView) -> GroundedRefs:
        refs = [
            GroundedRef.from_document(
                d, last_engine="tabular" if d.kind == "csv" else "narrative", evidence_status="completed", coverage=1
            )
            for d in documents
        ]
        return GroundedRefs(session_id=session_id, run_id=new_id("run_"), refs=refs)

    def outcomes(self, principal: Principal, grounded: GroundedRefs) -> list[tuple[str, SourceStatus]]:
        found = reauthorize(principal, grounded, self.workspaces, self.documents)
        return [(o.ref.file_name, o.status) for o in found]


@pytest.fixture
def world(services: Services) -> World:
    return World(services, WorkspaceService(services), DocumentService(services))


def test_unchanged_sources_are_reusable(world: World) -> None:
    workspace_id = world.workspace()
    table, notes = world.upload(workspace_id), world.upload(workspace_id, "notes.md", b"# Notes\n\nThe walrus rule.")
    grounded = world.grounded(world.session("ann"), table, notes)
    found = reauthorize(ANN, grounded, world.workspaces, world.documents)
    assert [(o.status, o.reason, o.current_version) for o in found] == [
        (SourceStatus.REUSABLE, OutcomeReason.SAME_VERSION, 1)
    ] * 2
    assert disclosure(found) is None


def test_group_membership_revoked_between_turns(world: World) -> None:
    workspace_id = world.workspace()
    world.workspaces.set_member(ANN, workspace_id, "bob", MemberChange(role="viewer"))
    grounded = world.grounded(world.session("bob"), world.upload(workspace_id))
    assert world.outcomes(BOB, grounded) == [("sales.csv", SourceStatus.REUSABLE)]
    world.workspaces.revoke(ANN, workspace_id, "bob")
    found = reauthorize(BOB, grounded, world.workspaces, world.documents)
    assert [(o.status, o.reason) for o in found] == [(SourceStatus.UNAUTHORISED, OutcomeReason.ACCESS_REVOKED)]
    assert disclosure(found) == "These sources were left out because you no longer have access to them: sales.csv."


def test_public_workspace_visibility_revoked(world: World) -> None:
    workspace_id = world.workspace("public", visible=True)
    grounded = world.grounded(world.session("bob"), world.upload(workspace_id))
    assert world.outcomes(BOB, grounded) == [("sales.csv", SourceStatus.REUSABLE)]  # a reader, not a member
    world.workspaces.set_visibility(ANN, workspace_id, VisibilityChange(visible=False))
    assert world.outcomes(BOB, grounded) == [("sales.csv", SourceStatus.UNAUTHORISED)]
    owners = GroundedRefs(session_id=world.session("ann"), run_id=new_id("run_"), refs=grounded.refs)
    assert world.outcomes(ANN, owners) == [("sales.csv", SourceStatus.REUSABLE)]  # its owner still reads it


def test_source_version_changed_between_turns_and_the_reupload_resolves_to_the_current_revision(
    world: World,
) -> None:
    workspace_id = world.workspace()
    table = world.upload(workspace_id)
    grounded = world.grounded(world.session("ann"), table)
    replacement = VersionCreate(kind="csv", content_base64=base64.b64encode(CSV + b"east,7\n").decode())
    world.documents.add_version(ANN, table.document_id, replacement)
    [outcome] = reauthorize(ANN, grounded, world.workspaces, world.documents)
    # The ref by family id finds the re-upload: a newer version of the same source, not an archived one.
    assert (outcome.status, outcome.reason, outcome.current_version) == (
        SourceStatus.CHANGED,
        OutcomeReason.NEW_VERSION,
        2,
    )
    assert outcome.ref.source_version == 1
    assert disclosure([outcome]) == (
        "These sources changed since the previous answer, so its results were not reused: sales.csv."
    )
    current = world.grounded(grounded.session_id, world.documents.get(ANN, table.document_id))
    assert world.outcomes(ANN, current) == [("sales.csv", SourceStatus.REUSABLE)]


def test_a_deleted_source_is_missing_and_disclosed(world: World) -> None:
    workspace_id = world.workspace()
    table, notes = world.upload(workspace_id), world.upload(workspace_id, "notes.md", b"# Notes\n\nZebra.")
    grounded = world.grounded(world.session("ann"), table, notes)
    world.documents.delete(ANN, notes.document_id)
    found = reauthorize(ANN, grounded, world.workspaces, world.documents)
    assert [(o.ref.file_name, o.status, o.reason) for o in found] == [
        ("sales.csv", SourceStatus.REUSABLE, OutcomeReason.SAME_VERSION),
        ("notes.md", SourceStatus.MISSING, OutcomeReason.DELETED),
    ]
    assert disclosure(found) == "These sources were left out because they were deleted: notes.md."


def test_a_conversation_upload_follows_the_conversation_owner(world: World) -> None:
    session_id = world.session("ann")
    body = DocumentCreate(
        session_id=session_id, file_name="q.csv", kind="csv", content_base64=base64.b64encode(CSV).decode()
    )
    upload = world.documents.create(ANN, body).document
    grounded = world.grounded(session_id, upload)
    assert world.outcomes(ANN, grounded) == [("q.csv", SourceStatus.REUSABLE)]


def test_another_users_conversation_discloses_nothing(world: World) -> None:
    grounded = world.grounded(world.session("ann"), world.upload(world.workspace()))
    with pytest.raises(Forbidden):
        reauthorize(BOB, grounded, world.workspaces, world.documents)


def test_a_disclosure_names_at_most_ten_files_then_counts() -> None:
    gone = [
        SourceOutcome(
            GroundedRef.model_validate(ref_fields(file_name=f"t{n}.csv")), SourceStatus.MISSING, OutcomeReason.DELETED
        )
        for n in range(12)
    ]
    text = disclosure(gone)
    assert text is not None and text.endswith("t8.csv, t9.csv and 2 more.") and "t10.csv" not in text
