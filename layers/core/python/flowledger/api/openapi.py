"""The API's one OpenAPI document: every REST route, the chat routes, security and the error contract.

The REST part comes from the powertools Routers themselves; the chat app (Starlette, streamed by
Lambda Web Adapter) is described from the same pydantic models it serves. Every operation then
gets its security requirement (bearer with the route's scope, or SigV4) and the error responses
it can return, all in the one shape the error map produces.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from flowledger.api.access import SIGNED, Access, access_for, any_token, needs_scope, security_schemes
from flowledger.api.openapi_rules import state_rules
from flowledger.api.openapi_sse import sse_media_type
from flowledger.api.registry import CAPABILITY_MODULES, capability_routers
from flowledger.api.routes import RAW_BODY_EXTENSION, schema_resolver
from flowledger.chat.models import (
    MAX_QUERY_CHARS,
    MAX_SESSIONS_PAGE,
    RUN_PATTERN,
    SESSION_PATTERN,
    ChatRequest,
    ChatResult,
    ContentEvent,
    DoneEvent,
    ErrorEvent,
    RunPage,
    RunView,
    SessionPage,
    StartEvent,
    StatusEvent,
)

TITLE = "Flowledger"
ERROR_SCHEMA = {
    "type": "object",
    "description": "Every error: a stable code, a message, the request id to quote; `fields` on 422",
    "required": ["error", "message", "request_id"],
    "properties": {
        "error": {"type": "string", "description": "stable machine-readable code"},
        "message": {"type": "string"},
        "request_id": {"type": "string"},
        "fields": {
            "type": "array",
            "description": "where the body or parameters break the schema (never the input itself)",
            "items": {
                "type": "object",
                "required": ["loc", "type", "msg"],
                "properties": {
                    "loc": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                    "type": {"type": "string"},
                    "msg": {"type": "string"},
                },
            },
        },
    },
}
ERROR_DESCRIPTIONS = {
    400: "the body is not UTF-8 JSON, nests too deep, or names a key twice in one object (`duplicate_key`)",
    401: "no valid bearer token",
    403: "missing scope, a resource of another caller, or a missing or wrong SigV4 signature",
    404: "no such resource",
    409: "the resource's state does not allow this, or a stored item it reads needs repair (undecodable_item)",
    410: "the patient's data was erased (`erased`): what the request names is gone for good",
    413: "the body is over the size limit",
    415: "the body is not application/json",
    422: "the body or a parameter breaks the schema (a control character in text is `control_character`, naming where)",
    429: "too many requests; see Retry-After",
    500: "internal error; quote the request id",
    502: "the function failed to answer (crashed, or an unreadable response)",
    503: "a dependency is unavailable or contended; retry",
    504: "the function did not answer in time",
}
# Where a patient's erased data (subjects/erasure.py) answers 410: their flows, their own routes, their chat and
# uploads (a new flow, turn or upload naming an erased patient is refused too).
ERASABLE_PATHS = ("/api/reasoning", "/admin/v1/reasoning/flows", "/api/chat", "/api/documents")
# The error map sends Retry-After with every 429 and 503 (api/errors.error_headers): clients may rely on it.
RETRY_AFTER_STATUSES = frozenset({429, 503})
RETRY_AFTER_HEADER: dict[str, Any] = {
    "description": "seconds to wait before retrying",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}
SSE_EVENTS: tuple[type[BaseModel], ...] = (StartEvent, StatusEvent, ContentEvent, DoneEvent, ErrorEvent)


def openapi_document(version: str) -> dict[str, Any]:
    """The whole API as an OpenAPI 3.1 document."""
    app = schema_resolver(router for name in CAPABILITY_MODULES for router in capability_routers(name))
    document: dict[str, Any] = json.loads(
        app.get_openapi_json_schema(title=TITLE, version=version, security_schemes=security_schemes())
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        schemas.pop(name, None)  # the error map answers in ErrorBody instead
    schemas["ErrorBody"] = ERROR_SCHEMA
    _add_chat(document)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            _complete(path, method, operation)
    state_rules(document)
    return document


def _complete(path: str, method: str, operation: dict[str, Any]) -> None:
    """Security and every error response an operation can answer with."""
    access = access_for(path)
    if access is Access.IAM:
        operation["security"] = SIGNED
    elif access is Access.JWT:
        operation.setdefault("security", any_token())
    else:
        operation["security"] = []
    raw = operation.get(RAW_BODY_EXTENSION)
    if raw:
        operation["requestBody"] = {
            "required": True,
            "content": {kind: {"schema": schema} for kind, schema in raw.items()},
        }
    statuses = {429, 500, 502, 503, 504}
    # 409 on every authenticated operation: a stored item it reads may no longer decode (undecodable_item).
    if access is Access.JWT:
        statuses |= {401, 403, 404, 409}
    elif access is Access.IAM:
        statuses |= {403, 404, 409}
    if access is not Access.PUBLIC and path.startswith(ERASABLE_PATHS):
        statuses.add(410)
    if operation.get("parameters"):
        statuses.add(422)
    if "requestBody" in operation:
        statuses |= {400, 413, 415} if raw else {400, 413, 415, 422}
    responses = operation.setdefault("responses", {})
    responses.pop("422", None)
    for status in sorted(statuses):
        responses[str(status)] = {
            "description": ERROR_DESCRIPTIONS[status],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
            **({"headers": {"Retry-After": RETRY_AFTER_HEADER}} if status in RETRY_AFTER_STATUSES else {}),
        }


def _add_chat(document: dict[str, Any]) -> None:
    models: list[type[BaseModel]] = [ChatRequest, ChatResult, RunPage, RunView, SessionPage, *SSE_EVENTS]
    _, definitions = models_json_schema(
        [(m, "validation" if m is ChatRequest else "serialization") for m in models],
        ref_template="#/components/schemas/{model}",
    )
    document["components"]["schemas"].update(definitions.get("$defs", {}))
    ref = {m.__name__: {"$ref": f"#/components/schemas/{m.__name__}"} for m in models}
    events = ", ".join(f"`{m.model_fields['type'].default}` ({m.__name__})" for m in SSE_EVENTS)
    document["paths"]["/api/chat"] = {
        "post": {
            "tags": ["chat"],
            "summary": "One chat turn, streamed as Server-Sent Events (JSON with Accept: application/json)",
            "operationId": "chat_turn",
            "security": needs_scope("chat"),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref["ChatRequest"]}},
                "description": f"the question (1 to {MAX_QUERY_CHARS} characters) and an own session to continue",
            },
            "responses": {
                "200": {
                    "description": f"a stream of Server-Sent Events, each `event: <type>` / `data: <json>`, in "
                    f"order: {events}; or, with Accept: application/json, the turn's outcome as one JSON object",
                    # JSON first: client generators read a response as its first media type, and a
                    # generated client parses JSON (a stream needs an SSE reader of its own).
                    "content": {
                        "application/json": {"schema": ref["ChatResult"]},
                        "text/event-stream": sse_media_type(SSE_EVENTS),
                    },
                }
            },
        }
    }
    document["paths"]["/api/chat/sessions"] = {
        "get": {
            "tags": ["chat"],
            "summary": "The caller's chat sessions, most recently active first",
            "operationId": "list_sessions",
            "security": needs_scope("chat"),
            "parameters": [
                _parameter(
                    "query", "limit", {"type": "integer", "minimum": 1, "maximum": MAX_SESSIONS_PAGE, "default": 20}
                ),
                _parameter("query", "cursor", {"type": "string"}),
            ],
            "responses": {
                "200": {
                    "description": "a page of sessions",
                    "content": {"application/json": {"schema": ref["SessionPage"]}},
                }
            },
        }
    }
    document["paths"]["/api/chat/sessions/{session_id}/runs"] = {
        "get": {
            "tags": ["chat"],
            "summary": "The caller's own session's runs, newest first",
            "operationId": "list_session_runs",
            "security": needs_scope("chat"),
            "parameters": [
                _parameter("path", "session_id", {"type": "string", "pattern": SESSION_PATTERN}, required=True),
                _parameter("query", "limit", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
                _parameter("query", "cursor", {"type": "string"}),
            ],
            "responses": {
                "200": {"description": "a page of runs", "content": {"application/json": {"schema": ref["RunPage"]}}}
            },
        }
    }
    document["paths"]["/api/chat/runs/{run_id}/cancel"] = {
        "post": {
            "tags": ["chat"],
            "summary": "Cancel one of the caller's running turns (409 once it ended)",
            "operationId": "cancel_run",
            "security": needs_scope("chat"),
            "parameters": [_parameter("path", "run_id", {"type": "string", "pattern": RUN_PATTERN}, required=True)],
            "responses": {
                "200": {"description": "the cancelled run", "content": {"application/json": {"schema": ref["RunView"]}}}
            },
        }
    }


def _parameter(where: str, name: str, schema: dict[str, Any], required: bool = False) -> dict[str, Any]:
    return {"in": where, "name": name, "required": required, "schema": schema}
