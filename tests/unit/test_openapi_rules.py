"""The OpenAPI document states the rules the server enforces: a body the document calls valid is one the
server takes, and one it calls invalid is one the server refuses, for each rule of issue #31.

The server's verdict is the route model plus the screening every request passes (``request_text``);
the document's is its own component schema, checked as a client would (JSON Schema 2020-12).
"""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from flowledger import __version__
from flowledger.api.openapi import openapi_document
from flowledger.api.openapi_rules import server_rules
from flowledger.api.request_text import refuse_control_characters
from flowledger.chat.models import ChatRequest
from flowledger.errors import InvalidInput
from flowledger.pathways.models import CompareRequest
from flowledger.reasoning.models import StepCreate
from flowledger.workspaces.models import DocumentCreate, VersionCreate, VisibilityChange, WorkspaceCreate

DOCUMENT = openapi_document(__version__)
SCHEMAS = DOCUMENT["components"]["schemas"]
WS = "ws_01ARZ3NDEKTSV4RRFFQ69G5FAV"
SES = "ses_01ARZ3NDEKTSV4RRFFQ69G5FAV"
DOC = "dc_01ARZ3NDEKTSV4RRFFQ69G5FAV"
PW = "pw_0123456789abcdef0123456789"
SHA = "a" * 64
STEP = {"step_kind": "tool", "agent": "diagnosis", "summary_text": "Read the log"}


def server_takes(model: type[BaseModel], body: dict[str, Any]) -> bool:
    try:
        refuse_control_characters(body, ["body"])
        model.model_validate(body)
    except (InvalidInput, ValidationError):
        return False
    return True


def document_takes(model: type[BaseModel], body: dict[str, Any]) -> bool:
    validator = Draft202012Validator({**SCHEMAS[model.__name__], "components": DOCUMENT["components"]})
    return bool(validator.is_valid(body))


CASES: list[tuple[str, type[BaseModel], dict[str, Any], bool]] = [
    # visibility flags are for public workspaces; a listed one is visible
    ("group-visible", WorkspaceCreate, {"kind": "group", "name": "Team", "visible": True}, False),
    ("personal-listed", WorkspaceCreate, {"kind": "personal", "name": "Me", "listed": True}, False),
    ("group-hidden", WorkspaceCreate, {"kind": "group", "name": "Team", "visible": False, "listed": None}, True),
    ("public-listed-hidden", WorkspaceCreate, {"kind": "public", "name": "P", "listed": True, "visible": False}, False),
    ("public-listed", WorkspaceCreate, {"kind": "public", "name": "P", "listed": True}, True),
    ("name-all-space", WorkspaceCreate, {"kind": "group", "name": " \u3000 "}, False),
    ("change-nothing", VisibilityChange, {}, False),
    ("change-null", VisibilityChange, {"visible": None, "listed": None}, False),
    ("change-listed", VisibilityChange, {"visible": None, "listed": False}, True),
    # exactly one of workspace_id and session_id; a presigned upload declares size and hash
    ("no-scope", DocumentCreate, {"kind": "text", "file_name": "a.txt", "content_base64": "aGk="}, False),
    (
        "both-scopes",
        DocumentCreate,
        {"kind": "text", "file_name": "a.txt", "content_base64": "aGk=", "workspace_id": WS, "session_id": SES},
        False,
    ),
    (
        "inline",
        DocumentCreate,
        {"kind": "text", "file_name": "a.TXT", "content_base64": "aGk=", "session_id": SES},
        True,
    ),
    (
        "presigned-no-hash",
        DocumentCreate,
        {"kind": "pdf", "file_name": "a.pdf", "size_bytes": 9, "workspace_id": WS},
        False,
    ),
    (
        "presigned",
        DocumentCreate,
        {"kind": "pdf", "file_name": "a.pdf", "size_bytes": 9, "sha256": SHA, "workspace_id": WS},
        True,
    ),
    (
        "inline-and-size",
        DocumentCreate,
        {"kind": "text", "file_name": "a.txt", "content_base64": "aGk=", "size_bytes": 2, "workspace_id": WS},
        False,
    ),
    ("version-presigned-no-size", VersionCreate, {"kind": "csv", "sha256": SHA}, False),
    ("version-presigned", VersionCreate, {"kind": "csv", "sha256": SHA, "size_bytes": 3}, True),
    # comparing a pathway with itself
    ("compare-itself", CompareRequest, {"pathway_ids": [PW, PW]}, False),
    ("compare-two", CompareRequest, {"pathway_ids": [PW, PW[:-1] + "0"]}, True),
    # the chat turn's source fields
    ("prior-without-selected", ChatRequest, {"query": "q", "include_prior": True}, False),
    (
        "prior-selected",
        ChatRequest,
        {"query": "q", "selection_mode": "selected", "document_ids": [DOC], "include_prior": True},
        True,
    ),
    ("selected-nothing", ChatRequest, {"query": "q", "selection_mode": "selected"}, False),
    ("ids-without-selected", ChatRequest, {"query": "q", "document_ids": [DOC]}, False),
    ("compare-no-source", ChatRequest, {"query": "q", "action_mode": "compare", "targets": [DOC]}, False),
    (
        "compare-by-relevance",
        ChatRequest,
        {"query": "q", "action_mode": "compare", "source": DOC, "targets": [DOC[:-1] + "W"], "selection_mode": "all"},
        False,
    ),
    (
        "compare",
        ChatRequest,
        {"query": "q", "action_mode": "compare", "source": DOC, "targets": [DOC[:-1] + "W"]},
        True,
    ),
    ("targets-without-compare", ChatRequest, {"query": "q", "targets": [DOC]}, False),
    # text holds no C0 control character but tab, LF and CR, in keys and values alike
    ("escape-in-summary", StepCreate, {**STEP, "summary_text": "\x1b[31mred"}, False),
    ("tab-in-summary", StepCreate, {**STEP, "summary_text": "a\tb\r\nc"}, True),
    ("escape-in-key", StepCreate, {**STEP, "outputs": {"log\x1b": "x"}}, False),
    ("empty-key", StepCreate, {**STEP, "outputs": {"": "x"}}, False),
]


@pytest.mark.parametrize(("model", "body", "taken"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_document_takes_what_the_server_takes(model: type[BaseModel], body: dict[str, Any], taken: bool) -> None:
    assert server_takes(model, body) is taken
    assert document_takes(model, body) is taken


def test_a_query_parameter_may_hold_no_control_character_at_all() -> None:
    cursor = next(p for p in DOCUMENT["paths"]["/api/workspaces"]["get"]["parameters"] if p["name"] == "cursor")
    validator = Draft202012Validator(cursor["schema"])
    assert validator.is_valid("eyJrIjoxfQ") and not validator.is_valid("a\tb")


@pytest.mark.parametrize(
    ("method", "path", "says"),
    [
        ("get", "/api/workspaces", "cursor is not one this API returned"),
        ("get", "/admin/v1/audit/events", "cursor is not one this API returned"),
        ("get", "/api/documents", "exactly one of workspace_id and session_id"),
        ("post", "/api/reasoning/flows/{flow_id}/steps", "cannot be its own parent"),
        ("post", "/api/reasoning/flows/{flow_id}/steps:batch", "cannot be its own parent"),
        ("post", "/api/chat", "the compare source cannot also be one of its targets"),
    ],
)
def test_a_rule_json_schema_cannot_state_is_in_the_operation_description(method: str, path: str, says: str) -> None:
    operation = DOCUMENT["paths"][path][method]
    assert says in server_rules(operation)
    assert "Also enforced (422" in operation["description"]
    assert "breaks a rule stated above" in operation["responses"]["422"]["description"]


def test_the_400_response_names_a_repeated_key() -> None:
    assert "`duplicate_key`" in DOCUMENT["paths"]["/api/workspaces"]["post"]["responses"]["400"]["description"]
