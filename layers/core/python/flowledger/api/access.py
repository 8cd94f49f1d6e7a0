"""Which authentication guards a path, and how a route declares it in the OpenAPI document.

One rule for API Gateway (CDK), the local gateway and the handlers' own screening: admin paths
need a SigV4-signed IAM principal, client paths a bearer token (and the scope the route declares).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.openapi.models import SecurityScheme


class Access(StrEnum):
    PUBLIC = "public"
    JWT = "jwt"  # client routes: bearer token checked by the Lambda authorizer
    IAM = "iam"  # admin routes: SigV4-signed with an IAM principal


ADMIN_PREFIX = "/admin/v1/"
CLIENT_PREFIX = "/api/"
# OpenAPI security scheme names; the scopes of a bearer requirement are the route's required scope.
BEARER_SCHEME = "bearerAuth"
SIGV4_SCHEME = "sigv4"


def security_schemes() -> dict[str, SecurityScheme]:
    """The two ways in, as OpenAPI security schemes."""
    # Imported here: the OpenAPI models cost a REST function ~130 ms at import, and only the
    # OpenAPI document (never a request) needs them.
    from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn, HTTPBearer

    return {
        BEARER_SCHEME: HTTPBearer(bearerFormat="JWT", description="RS256 JWT whose `scope` claim lists the scopes"),
        SIGV4_SCHEME: APIKey(
            **{
                "in": APIKeyIn.header,
                "name": "Authorization",
                "description": "AWS Signature Version 4 (service `execute-api`) made by an IAM principal",
                "x-amazon-apigateway-authtype": "awsSigv4",
            }
        ),
    }


# What a browser may send on a bearer or SigV4 call (answered to CORS preflights).
CORS_ALLOWED_HEADERS = (
    "authorization",
    "content-type",
    "accept",
    "x-amz-date",
    "x-amz-content-sha256",
    "x-amz-security-token",
)
CORS_EXPOSED_HEADERS = ("x-amzn-requestid", "retry-after")


def access_for(path: str) -> Access:
    """The authentication a request to ``path`` must pass before it reaches a function."""
    if path.startswith(ADMIN_PREFIX):
        return Access.IAM
    if path.startswith(CLIENT_PREFIX):
        return Access.JWT
    return Access.PUBLIC


def needs_scope(scope: str) -> list[dict[str, list[str]]]:
    """The ``security`` of a client route that needs ``scope`` (checked before its body is read)."""
    return [{BEARER_SCHEME: [scope]}]


def any_token() -> list[dict[str, list[str]]]:
    """The ``security`` of a client route open to any valid bearer token."""
    return [{BEARER_SCHEME: []}]


SIGNED: list[dict[str, list[str]]] = [{SIGV4_SCHEME: []}]
