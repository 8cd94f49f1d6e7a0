"""Who is calling: read from the API Gateway request context, never from the request body.

In AWS the Lambda authorizer (client routes) or IAM auth (admin routes) fill the request context;
locally the dev server's gateway fills it the same way after the same checks.
"""

from __future__ import annotations

from typing import Any

from flowledger.errors import Forbidden, Unauthenticated
from flowledger.identity import Principal


def client_principal(event: dict[str, Any]) -> Principal:
    """The bearer-token principal of a client route; 401 when the authorizer set none."""
    authorizer = (event.get("requestContext") or {}).get("authorizer") or {}
    sub = authorizer.get("sub")
    if not sub:
        raise Unauthenticated("missing bearer token")
    return Principal(
        kind="user",
        id=sub,
        scopes=frozenset(str(authorizer.get("scope", "")).split()),
        patient_id=authorizer.get("patient_id") or None,
    )


def require_scope(event: dict[str, Any], scope: str) -> Principal:
    """The caller, if their token carries ``scope``; 403 otherwise."""
    principal = client_principal(event)
    if scope not in principal.scopes:
        raise Forbidden(f"this route needs the {scope!r} scope")
    return principal


def iam_principal(event: dict[str, Any]) -> Principal:
    """The IAM principal (user or role ARN) of a SigV4-signed admin request; 403 when absent."""
    identity = (event.get("requestContext") or {}).get("identity") or {}
    arn = identity.get("userArn")
    if not arn:
        raise Forbidden("admin routes need a SigV4-signed request from an IAM principal")
    return Principal(kind="iam", id=arn)
