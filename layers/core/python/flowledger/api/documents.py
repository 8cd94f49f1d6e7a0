"""Document routes (scope ``documents``): upload, replace, complete a presigned upload, list, read, delete."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.event_handler.api_gateway import Response, Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from flowledger.api.access import needs_scope
from flowledger.api.app import services_of
from flowledger.api.principals import require_scope
from flowledger.identity import Principal
from flowledger.workspaces.documents import DocumentService
from flowledger.workspaces.models import (
    DOCUMENT_PATTERN,
    SESSION_PATTERN,
    WORKSPACE_PATTERN,
    Deleted,
    DocumentCreate,
    DocumentPage,
    DocumentView,
    UploadAnswer,
    VersionCreate,
    VersionPage,
)

router = Router()
SCOPE = "documents"
DocumentId = Annotated[str, Path(pattern=DOCUMENT_PATTERN)]
Version = Annotated[int, Path(ge=1, le=99_999)]
CREATED = {
    201: {"description": "stored, or awaiting its PUT", "content": {"application/json": {"model": UploadAnswer}}}
}


def _caller() -> Principal:
    return require_scope(router.current_event.raw_event, SCOPE)


def _service() -> DocumentService:
    return DocumentService(services_of(router))


def _json(status: int, body: Any) -> Response[str]:
    return Response(status, content_types.APPLICATION_JSON, body.model_dump_json())


@router.post(
    "/api/documents",
    summary="Upload a document into a workspace or a conversation (inline, or a presigned S3 PUT)",
    tags=["documents"],
    security=needs_scope(SCOPE),
    responses={
        201: {"description": "stored, or awaiting its PUT", "content": {"application/json": {"model": UploadAnswer}}}
    },
)
def create_document(body: DocumentCreate) -> Response[str]:
    principal = _caller()
    return _json(201, _service().create(principal, body))


@router.get(
    "/api/documents",
    summary="The live documents of one workspace or conversation, newest first",
    tags=["documents"],
    security=needs_scope(SCOPE),
)
def list_documents(
    workspace_id: Annotated[str | None, Query(pattern=WORKSPACE_PATTERN)] = None,
    session_id: Annotated[str | None, Query(pattern=SESSION_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
) -> DocumentPage:
    principal = _caller()
    return _service().page(principal, workspace_id, session_id, limit, cursor)


@router.get("/api/documents/<document_id>", summary="One document", tags=["documents"], security=needs_scope(SCOPE))
def get_document(document_id: DocumentId) -> DocumentView:
    principal = _caller()
    return _service().get(principal, document_id)


@router.delete(
    "/api/documents/<document_id>",
    summary="Delete a document (out of the index and the listings; versions are kept)",
    tags=["documents"],
    security=needs_scope(SCOPE),
)
def delete_document(document_id: DocumentId) -> Deleted:
    principal = _caller()
    return _service().delete(principal, document_id)


@router.get(
    "/api/documents/<document_id>/versions",
    summary="Every version of a document",
    tags=["documents"],
    security=needs_scope(SCOPE),
)
def list_versions(document_id: DocumentId) -> VersionPage:
    principal = _caller()
    return _service().versions(principal, document_id)


@router.post(
    "/api/documents/<document_id>/versions",
    summary="Replace a document: a new version in the same revision family",
    tags=["documents"],
    security=needs_scope(SCOPE),
    responses={
        201: {"description": "stored, or awaiting its PUT", "content": {"application/json": {"model": UploadAnswer}}}
    },
)
def add_version(document_id: DocumentId, body: VersionCreate) -> Response[str]:
    principal = _caller()
    return _json(201, _service().add_version(principal, document_id, body))


@router.post(
    "/api/documents/<document_id>/versions/<version>/complete",
    summary="Verify a presigned upload (size, SHA-256), convert or index it and make it current",
    tags=["documents"],
    security=needs_scope(SCOPE),
)
def complete_version(document_id: DocumentId, version: Version) -> UploadAnswer:
    principal = _caller()
    return _service().complete(principal, document_id, version)
