"""The dev server's demo table, seeded through the real workspace and document services on moto."""

from __future__ import annotations

from flowledger.identity import Principal
from flowledger.local.demo_table import DEMO_OWNER, DEMO_TABLE, ensure_demo_table
from flowledger.services import Services
from flowledger.workspaces.documents import DocumentService
from flowledger.workspaces.models import WorkspaceCreate
from flowledger.workspaces.service import WorkspaceService

ANYONE = Principal(kind="user", id="dev-user", scopes=frozenset({"documents"}))


def demo_workspaces(services: Services) -> list[str]:
    page = WorkspaceService(services).page(DEMO_OWNER, 100, None)
    return [w.workspace_id for w in page.workspaces if w.name == "Demo" and w.owner == "demo"]


def test_the_demo_table_is_seeded_once_and_found_again(services: Services) -> None:
    first = ensure_demo_table(services)
    assert first.created and first.document_id
    again = ensure_demo_table(services)
    assert (again.workspace_id, again.document_id, again.created) == (first.workspace_id, first.document_id, False)
    assert demo_workspaces(services) == [first.workspace_id]


def test_any_local_user_can_read_the_converted_demo_table(services: Services) -> None:
    seeded = ensure_demo_table(services)
    assert seeded.document_id
    documents = DocumentService(services)
    family, version, parquet = documents.table(ANYONE, seeded.document_id)
    assert (family.file_name, version.conversion.row_count, parquet[:4]) == (DEMO_TABLE, 40, b"PAR1")
    listed = WorkspaceService(services).page(ANYONE, 100, None).workspaces
    assert [w.workspace_id for w in listed if w.name == "Demo"] == [seeded.workspace_id]  # public and listed


def test_a_demo_table_its_user_deleted_stays_deleted(services: Services) -> None:
    seeded = ensure_demo_table(services)
    assert seeded.document_id
    DocumentService(services).delete(DEMO_OWNER, seeded.document_id)
    after = ensure_demo_table(services)
    assert (after.workspace_id, after.document_id, after.created) == (seeded.workspace_id, None, False)


def public_demo(services: Services, owner_id: str) -> str:
    owner = Principal(kind="user", id=owner_id, scopes=frozenset({"documents"}))
    body = WorkspaceCreate(kind="public", name="Demo", visible=True, listed=True)
    return WorkspaceService(services).create(owner, body).workspace_id


def test_another_users_listed_workspace_named_demo_is_not_taken_for_the_demo(services: Services) -> None:
    theirs = public_demo(services, "mallory")  # made before the demo user's, and listed to everyone
    seeded = ensure_demo_table(services)
    assert seeded.created and seeded.workspace_id != theirs
    assert ensure_demo_table(services).workspace_id == seeded.workspace_id


def test_a_later_demo_workspace_of_the_demo_user_is_not_taken_for_the_seeded_one(services: Services) -> None:
    seeded = ensure_demo_table(services)
    public_demo(services, "demo")  # the oldest Demo the demo user owns is the seeded one
    again = ensure_demo_table(services)
    assert (again.workspace_id, again.document_id) == (seeded.workspace_id, seeded.document_id)
