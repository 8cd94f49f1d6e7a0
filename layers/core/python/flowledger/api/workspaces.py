"""Workspace routes (scope ``documents``): create, list, read, members and visibility."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.event_handler.api_gateway import Response, Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from flowledger.api.access import needs_scope
from flowledger.api.app import services_of
from flowledger.api.principals import require_scope
from flowledger.identity import Principal
from flowledger.workspaces.models import (
    USER_PATTERN,
    WORKSPACE_PATTERN,
    MemberChange,
    MemberView,
    Revoked,
    VisibilityChange,
    WorkspaceCreate,
    WorkspacePage,
    WorkspaceView,
)
from flowledger.workspaces.service import WorkspaceService

router = Router()
SCOPE = "documents"
WorkspaceId = Annotated[str, Path(pattern=WORKSPACE_PATTERN)]
UserId = Annotated[str, Path(pattern=USER_PATTERN)]


def _caller() -> Principal:
    return require_scope(router.current_event.raw_event, SCOPE)


def _service() -> WorkspaceService:
    return WorkspaceService(services_of(router))


def _json(status: int, body: Any) -> Response[str]:
    return Response(status, content_types.APPLICATION_JSON, body.model_dump_json())


@router.post(
    "/api/workspaces",
    summary="Create a workspace (personal: one per user)",
    tags=["documents"],
    security=needs_scope(SCOPE),
    responses={201: {"description": "the new workspace", "content": {"application/json": {"model": WorkspaceView}}}},
)
def create_workspace(body: WorkspaceCreate) -> Response[str]:
    principal = _caller()
    return _json(201, _service().create(principal, body))


@router.get(
    "/api/workspaces",
    summary="The workspaces the caller may read: theirs, then the listed public ones",
    tags=["documents"],
    security=needs_scope(SCOPE),
)
def list_workspaces(
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
) -> WorkspacePage:
    principal = _caller()
    return _service().page(principal, limit, cursor)


@router.get("/api/workspaces/<workspace_id>", summary="One workspace", tags=["documents"], security=needs_scope(SCOPE))
def get_workspace(workspace_id: WorkspaceId) -> WorkspaceView:
    principal = _caller()
    return _service().get(principal, workspace_id)


@router.patch(
    "/api/workspaces/<workspace_id>",
    summary="Change a public workspace's visibility and listing (owners)",
    tags=["documents"],
    security=needs_scope(SCOPE),
)
def change_visibility(workspace_id: WorkspaceId, body: VisibilityChange) -> WorkspaceView:
    principal = _caller()
    return _service().set_visibility(principal, workspace_id, body)


@router.put(
    "/api/workspaces/<workspace_id>/members/<user_id>",
    summary="Add a member or change their role (owners)",
    tags=["documents"],
    security=needs_scope(SCOPE),
)
def put_member(workspace_id: WorkspaceId, user_id: UserId, body: MemberChange) -> MemberView:
    principal = _caller()
    return _service().set_member(principal, workspace_id, user_id, body)


@router.delete(
    "/api/workspaces/<workspace_id>/members/<user_id>",
    summary="Revoke a membership (owners)",
    tags=["documents"],
    security=needs_scope(SCOPE),
)
def revoke_member(workspace_id: WorkspaceId, user_id: UserId) -> Revoked:
    principal = _caller()
    return _service().revoke(principal, workspace_id, user_id)
