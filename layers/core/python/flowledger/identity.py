"""Who is acting: the caller's identity as the domain sees it, whichever door they came in by.

The HTTP layer (``flowledger.api.principals``) builds one from the request context; the domain
only reads it, to check scopes and patient ownership and to name the actor in the audit ledger.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Principal(BaseModel):
    """An authenticated caller: a bearer-token user (with scopes) or an IAM principal (admin)."""

    kind: Literal["user", "iam"]
    id: str
    scopes: frozenset[str] = frozenset()
    patient_id: str | None = None

    @property
    def actor(self) -> str:
        """How the audit ledger names this caller: the IAM ARN, or ``user:<sub>``."""
        return self.id if self.kind == "iam" else f"user:{self.id}"
