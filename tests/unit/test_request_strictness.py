"""Every scalar in a request body is strict: no bool for a number, no number for a string or bool.

Read from pydantic's core schemas, so a field added later without ``Strict*`` fails here before
a client finds that ``"confidence": false`` is stored as 0.0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from flowledger.chat.models import ChatRequest
from flowledger.continuity.request import SourceRequest
from flowledger.pathways.models import CompareRequest, ExtractRequest
from flowledger.reasoning.models import ConsentChange, FlowClose, FlowStart, StepCreate
from flowledger.research.models import ClaimMark, ClaimResolution, Completion, DeeperRequest, PullRequest
from flowledger.workspaces.models import DocumentCreate, MemberChange, VersionCreate, VisibilityChange, WorkspaceCreate

# The bodies the routes take (api/reasoning.py, research.py, pathways.py; chat_app.py).
REQUEST_BODIES: list[type[BaseModel]] = [
    FlowStart,
    StepCreate,
    FlowClose,
    ConsentChange,
    DeeperRequest,
    PullRequest,
    Completion,
    ClaimMark,
    ClaimResolution,
    ExtractRequest,
    CompareRequest,
    ChatRequest,
    SourceRequest,
    WorkspaceCreate,
    VisibilityChange,
    MemberChange,
    DocumentCreate,
    VersionCreate,
]
SCALARS = {"str", "int", "float", "bool"}


def lax_scalars(schema: Any, path: str = "") -> Iterator[str]:
    """Where in a core schema a str, int, float or bool is validated without ``strict``."""
    if isinstance(schema, list):
        for item in schema:
            yield from lax_scalars(item, path)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if isinstance(kind, str) and kind in SCALARS and not schema.get("strict"):
        yield f"{path or '<root>'}: {kind}"
    for key, value in schema.items():
        # JSON object keys are strings whatever the schema says; metadata holds no validators.
        if key in ("keys_schema", "metadata"):
            continue
        if key == "fields" and isinstance(value, dict):
            for name, field in value.items():
                yield from lax_scalars(field, f"{path}.{name}" if path else name)
        else:
            yield from lax_scalars(value, path)


@pytest.mark.parametrize("model", REQUEST_BODIES, ids=lambda m: m.__name__)
def test_every_scalar_of_a_request_body_is_strict(model: type[BaseModel]) -> None:
    assert list(lax_scalars(model.__pydantic_core_schema__)) == []


def test_a_lax_scalar_is_found() -> None:
    class Lax(BaseModel):
        flag: bool

    assert list(lax_scalars(Lax.__pydantic_core_schema__)) != []
