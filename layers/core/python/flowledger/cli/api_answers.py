"""One line for an API's refusal, as the API shaped it: its message, and each field it names with why.

The API answers ``{"error": code, "message": ..., "fields": [{"loc": [...], "msg": ...}]}`` (see
``flowledger.api.errors``); a 422 is useless without its fields, so they are kept on the line.
"""

from __future__ import annotations

import json
from typing import Any

from flowledger.cli.text import shorten

MAX_FIELDS_SHOWN = 3  # the line stays readable; the rest are counted
MAX_TEXT_CHARS = 200  # a body that is not the API's JSON (a proxy's page, say)


def refusal_line(status: int, raw: bytes, reason: str) -> str:
    """``the server answered 422: the request does not match the schema: session_id: String should ...``."""
    return f"the server answered {status}: {refusal_message(raw, reason)}"


def refusal_message(raw: bytes, reason: str) -> str:
    """The body's ``message`` and fields, else its text, else the status's reason phrase."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("message"), str):
        return shorten(raw.decode(errors="replace").strip(), MAX_TEXT_CHARS) or reason
    fields = [field for field in body.get("fields") or [] if isinstance(field, dict)]
    shown = [field_line(field) for field in fields[:MAX_FIELDS_SHOWN]]
    if len(fields) > MAX_FIELDS_SHOWN:
        shown.append(f"and {len(fields) - MAX_FIELDS_SHOWN} more")
    return "; ".join([f"{body['message']}: {shown[0]}", *shown[1:]] if shown else [body["message"]])


def field_line(field: dict[str, Any]) -> str:
    """``document_ids[0]: String should match pattern ...``: where in the request, and what is wrong there."""
    path = ""
    for part in field.get("loc") or []:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return f"{path or 'the request'}: {field.get('msg') or field.get('type') or 'invalid'}"
