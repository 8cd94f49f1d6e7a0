"""Opaque page cursors: a JSON value, URL-safe base64 encoded."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from flowledger.errors import InvalidInput


def encode_cursor(position: Any) -> str:
    """The cursor a caller hands back to resume after ``position`` (any JSON value)."""
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode()


def decode_cursor(cursor: str) -> Any:
    """The position in a cursor; 422 (``InvalidInput``) when it is not one this API returned.

    Callers still check the decoded value's shape: a cursor is client input.
    """
    try:
        return json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, TypeError, binascii.Error):
        raise InvalidInput("cursor is not one this API returned") from None
