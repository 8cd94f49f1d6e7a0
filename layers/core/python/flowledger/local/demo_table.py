"""The dev server's demo table: ``demo-sales.csv`` in a public workspace "Demo", for continuity turns.

Stored through the workspace and document services a client's upload goes through (the same audit
entries, the same CSV-to-Parquet conversion), as the user ``demo``. The workspace is public, visible
and listed, so every local token can select the table by id or reach it with ``selection_mode all``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from flowledger.identity import Principal
from flowledger.services import Services
from flowledger.workspaces.documents import DocumentService
from flowledger.workspaces.models import DocumentCreate, WorkspaceCreate, WorkspaceView
from flowledger.workspaces.service import WorkspaceService

DEMO_OWNER = Principal(kind="user", id="demo", scopes=frozenset({"documents"}))
DEMO_WORKSPACE = "Demo"
DEMO_TABLE = "demo-sales.csv"
REGIONS = {"north": ("n1", "n2"), "south": ("s1", "s2"), "east": ("e1", "e2"), "west": ("w1", "w2")}
MONTHS = ("2026-01", "2026-02", "2026-03", "2026-04", "2026-05")
_PAGE = 100


@dataclass(frozen=True)
class DemoTable:
    """Where the demo table is; ``document_id`` is None when its user deleted it from the workspace."""

    workspace_id: str
    document_id: str | None
    created: bool


def demo_sales_csv() -> bytes:
    """40 rows (4 regions x 2 stores x 5 months), the same bytes on every call.

    The amounts follow a fixed formula rather than a random draw: a rebuilt store gives the same
    totals, so an example answer in the README stays true.
    """
    lines = ["region,store,month,amount"]
    for r, (region, stores) in enumerate(REGIONS.items()):
        for s, store in enumerate(stores):
            for m, month in enumerate(MONTHS):
                cents = 1_200_000 + r * 310_000 + s * 145_000 + m * 42_500 + ((r + 1) * (s + 2) * (m + 3) % 7) * 9_950
                lines.append(f"{region},{store},{month},{cents // 100}.{cents % 100:02d}")
    return ("\n".join(lines) + "\n").encode()


def ensure_demo_table(services: Services) -> DemoTable:
    """The demo table, created on a store that has no Demo workspace of the demo user yet.

    Found again by listing the demo user's workspaces, so a restored store is never seeded twice;
    a store whose user deleted the table keeps it deleted (``--reset`` brings it back).
    """
    workspaces, documents = WorkspaceService(services), DocumentService(services)
    existing = _demo_workspace(workspaces)
    if existing is not None:
        page = documents.page(DEMO_OWNER, existing.workspace_id, None, _PAGE, None)
        found = [d.document_id for d in page.documents if d.file_name == DEMO_TABLE]
        return DemoTable(existing.workspace_id, found[0] if found else None, created=False)
    workspace = workspaces.create(
        DEMO_OWNER, WorkspaceCreate(kind="public", name=DEMO_WORKSPACE, visible=True, listed=True)
    )
    upload = DocumentCreate(
        workspace_id=workspace.workspace_id,
        file_name=DEMO_TABLE,
        kind="csv",
        title="Demo sales by region, store and month",
        content_base64=base64.b64encode(demo_sales_csv()).decode(),
    )
    document = documents.create(DEMO_OWNER, upload).document
    return DemoTable(workspace.workspace_id, document.document_id, created=True)


def _demo_workspace(workspaces: WorkspaceService) -> WorkspaceView | None:
    """The oldest workspace named Demo that the demo user owns, if any."""
    mine: list[WorkspaceView] = []
    cursor: str | None = None
    while True:
        page = workspaces.page(DEMO_OWNER, _PAGE, cursor)
        mine += [w for w in page.workspaces if w.role == "owner" and w.name == DEMO_WORKSPACE]
        cursor = page.next_cursor
        # The listing gives the user's own workspaces first; once it reaches others' listed ones, stop.
        if cursor is None or any(w.role is None for w in page.workspaces):
            break
    return min(mine, key=lambda w: w.created_at) if mine else None
