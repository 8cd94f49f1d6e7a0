"""Which authentication guards a path: one rule for API Gateway (CDK) and the local gateway."""

from __future__ import annotations

from enum import StrEnum


class Access(StrEnum):
    PUBLIC = "public"
    JWT = "jwt"  # client routes: bearer token checked by the Lambda authorizer
    IAM = "iam"  # admin routes: SigV4-signed with an IAM principal


ADMIN_PREFIX = "/admin/v1/"
CLIENT_PREFIX = "/api/"


def access_for(path: str) -> Access:
    """The authentication a request to ``path`` must pass before it reaches a function."""
    if path.startswith(ADMIN_PREFIX):
        return Access.IAM
    if path.startswith(CLIENT_PREFIX):
        return Access.JWT
    return Access.PUBLIC
