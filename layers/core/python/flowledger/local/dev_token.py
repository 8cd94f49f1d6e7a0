"""The local developer's token: every scope, for half a day; what ``serve`` prints and ``chat`` sends.

A module of its own so that ``flowledger chat`` mints it without importing the dev server.
"""

from __future__ import annotations

from flowledger.api.tokens import SCOPES
from flowledger.local.datadir import DEV_USER, DataDir

DEV_TOKEN_TTL_SECONDS = 12 * 3600


def development_token(directory: DataDir) -> str:
    """A token with every scope for the local developer (printed by ``serve``)."""
    return directory.token(DEV_USER, sorted(SCOPES), ttl_seconds=DEV_TOKEN_TTL_SECONDS)
