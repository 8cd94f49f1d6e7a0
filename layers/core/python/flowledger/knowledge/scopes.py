"""Knowledge scopes: which partition of the index a document lives in, and the bounds on each.

A scope is a string:

- ``global``: the operator's corpus (the demo documents, ``flowledger knowledge add``);
- ``workspace:<workspace_id>``: a personal, group or public workspace;
- ``conversation:<session_id>``: files uploaded in one chat.

Who may read a scope is decided by the workspaces code; the index only searches the scopes it is given.
The bounds below are constants, not settings: they size a process's memory and a lookup's requests,
so they are part of the design rather than something to tune per deployment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from flowledger.errors import Conflict, InvalidInput

GLOBAL = "global"

# A workspace or session id: letters, digits and ``_.-`` (never ``#`` or ``/``, which the keys use).
_SCOPE = re.compile(r"global|(?:workspace|conversation):[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# A document id given by the documents service (a revision family), or ``doc_`` + 16 hex from a path.
_DOCUMENT_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")

MAX_SCOPES_PER_LOOKUP = 100
"""A lookup names at most this many scopes: one BatchGetItem reads all their version markers."""

MAX_SCOPE_DOCUMENTS = 500
"""Documents one scope may hold; adding one more is a 409 (``ScopeFull``)."""

MAX_SCOPE_CHUNKS = 5_000
"""Chunks one scope may hold (about 4.5 MB of text); a document that would pass it is a 409."""

MAX_LOOKUP_CHUNKS = 20_000
"""Chunks one lookup may rank (the union of its scopes); more is a 422 naming the count: narrow the scopes."""


class ScopeFull(Conflict):
    """The scope holds as many documents or chunks as it may; nothing was written."""

    code = "scope_full"


def check_scope(value: str) -> str:
    """``value`` if it is a scope (``global``, ``workspace:ID``, ``conversation:ID``), else :class:`InvalidInput`."""
    if not isinstance(value, str) or not _SCOPE.fullmatch(value):
        raise InvalidInput(f"{value!r} is not a knowledge scope (global, workspace:ID or conversation:ID)")
    return value


def check_lookup_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    """The scopes of one lookup, each checked, duplicates dropped (first kept), at most ``MAX_SCOPES_PER_LOOKUP``."""
    if isinstance(scopes, str):  # a bare string would be searched letter by letter
        raise InvalidInput("scopes must be a list of scopes, not one string")
    unique = tuple(dict.fromkeys(check_scope(scope) for scope in scopes))
    if len(unique) > MAX_SCOPES_PER_LOOKUP:
        raise InvalidInput(f"a lookup searches at most {MAX_SCOPES_PER_LOOKUP} scopes, not {len(unique)}")
    return unique


def check_document_key(value: str) -> str:
    """``value`` if it can key a document (letters, digits, ``_`` and ``-``, at most 64), else :class:`InvalidInput`."""
    if not isinstance(value, str) or not _DOCUMENT_KEY.fullmatch(value):
        raise InvalidInput(f"{value!r} is not a document id (letters, digits, _ and -, at most 64)")
    return value


def partition(scope: str) -> str:
    """The ``pk`` of every item of one scope."""
    return f"scope#{scope}"


def partition_key(scope: str) -> dict[str, str]:
    """The ``pk`` of every item of one scope, as a DynamoDB attribute value."""
    return {"S": partition(scope)}


def body_prefix(scope: str, document_id: str) -> str:
    """Where a document's bodies are kept in the documents bucket.

    ``global`` keeps the layout of the single-corpus index (``documents/ID/``), so bodies stored before
    scopes existed stay where they are; other scopes get their own prefix, so the same id in two
    scopes never shares (or deletes) the other's bodies.
    """
    if scope == GLOBAL:
        return f"documents/{document_id}/"
    return f"scoped/{scope}/{document_id}/"
