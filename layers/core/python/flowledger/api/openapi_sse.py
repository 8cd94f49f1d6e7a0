"""The chat stream in the OpenAPI document: a stream of typed events, not a string.

OpenAPI 3.1 has no schema for one item of a stream; 3.2 adds ``itemSchema`` beside ``schema``
(which then covers the whole stream). In a 3.1 document ``itemSchema`` is not allowed, so the
event schema is written twice: as ``schema``, which tools reading 3.1 (schemathesis among them)
apply to each event, and as ``x-itemSchema``, the 3.2 keyword under an extension name, ready to be
renamed when the document moves to 3.2. ``x-sse-events`` maps each event name to its payload.

One event is what an SSE parser yields for a frame: ``event`` (its type) and ``data`` (its JSON
payload, as text; ``contentMediaType``/``contentSchema`` say what the text holds).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def event_type(model: type[BaseModel]) -> str:
    """The ``event:`` name of an event model (its ``type`` field's default)."""
    return str(model.model_fields["type"].default)


def sse_media_type(events: tuple[type[BaseModel], ...]) -> dict[str, Any]:
    """The ``text/event-stream`` media type object of a stream of ``events`` (component schemas by name)."""
    item = {"oneOf": [_frame(model) for model in events]}
    return {
        "schema": item,
        "x-itemSchema": item,
        "x-sse-events": {event_type(m): {"$ref": f"#/components/schemas/{m.__name__}"} for m in events},
    }


def _frame(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "object",
        "title": f"{model.__name__}Frame",
        "required": ["event", "data"],
        "properties": {
            "event": {"const": event_type(model)},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": f"#/components/schemas/{model.__name__}"},
            },
            "id": {"type": "string"},
            "retry": {"type": "integer", "minimum": 0},
        },
    }
