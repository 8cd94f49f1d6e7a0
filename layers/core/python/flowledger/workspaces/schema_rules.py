"""The workspace and document models' validators, as JSON Schema, so the OpenAPI document states them.

Each is written as ``not`` what the validator refuses: JSON Schema checks it exactly, and client
generators, which read ``properties``, leave ``not`` alone. A property schema applies only to a
property that is sent, so ``{"type": "null"}`` there means "absent or null".
"""

from __future__ import annotations

from typing import Any

BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"  # b64decode(validate=True)
_NULL: dict[str, Any] = {"type": "null"}
_SET: dict[str, Any] = {"not": _NULL}

HIDDEN_KIND_SHOWN: dict[str, Any] = {
    "anyOf": [
        {"required": ["kind", side], "properties": {"kind": {"enum": ["personal", "group"]}, side: {"const": True}}}
        for side in ("visible", "listed")
    ]
    + [
        {
            "required": ["listed", "visible"],
            "properties": {"kind": {"const": "public"}, "listed": {"const": True}, "visible": {"const": False}},
        }
    ]
}
NOTHING_CHANGES: dict[str, Any] = {"properties": {"visible": _NULL, "listed": _NULL}}
NEITHER_INLINE_NOR_PRESIGNED: dict[str, Any] = {
    "anyOf": [{"properties": {"content_base64": _NULL, declared: _NULL}} for declared in ("size_bytes", "sha256")]
    + [
        {"required": ["content_base64", declared], "properties": {"content_base64": _SET, declared: _SET}}
        for declared in ("size_bytes", "sha256")
    ]
}
NOT_ONE_SCOPE: dict[str, Any] = {
    "anyOf": [
        {"properties": {"workspace_id": _NULL, "session_id": _NULL}},
        {"required": ["workspace_id", "session_id"], "properties": {"workspace_id": _SET, "session_id": _SET}},
    ]
}


def file_name_not_of_kind(extensions: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """A file name that does not end in its kind's extension after one character at least (``PurePath.suffix``)."""
    return {
        "anyOf": [
            {
                "required": ["kind", "file_name"],
                "properties": {
                    "kind": {"const": kind},
                    "file_name": {"not": {"pattern": "^[^/]+\\.(" + "|".join(map(_any_case, suffixes)) + ")$"}},
                },
            }
            for kind, suffixes in extensions.items()
        ]
    }


def _any_case(suffix: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" for c in suffix.lstrip("."))
