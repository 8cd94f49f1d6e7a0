"""API Gateway Lambda authorizer for client routes: the JWT check in AWS.

The dev server's gateway runs the same :class:`TokenVerifier` and hands routes the same context.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerResponse,
    APIGatewayAuthorizerTokenEvent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from flowledger.api.tokens import TokenVerifier, authorizer_context, bearer_token
from flowledger.config import Settings
from flowledger.entrypoints import instrumented
from flowledger.errors import ConfigurationError, Unauthenticated
from flowledger.services import bootstrap

logger = Logger(service="authorizer")


class Unauthorized(Exception):
    """Raised with the exact message API Gateway turns into a 401 response."""

    def __init__(self) -> None:
        super().__init__("Unauthorized")


def token_verifier(settings: Settings) -> TokenVerifier:
    if not settings.jwks_url or not settings.jwt_issuer:
        raise ConfigurationError("FLOWLEDGER_JWKS_URL and FLOWLEDGER_JWT_ISSUER must be set for the authorizer")
    return TokenVerifier(settings.jwks_url, settings.jwt_issuer, settings.jwt_audience)


def authorize(event: APIGatewayAuthorizerTokenEvent, verifier: TokenVerifier) -> dict[str, Any]:
    """An allow policy carrying the caller's sub, scopes and patient id, or :class:`Unauthorized`.

    The policy allows every route of the API so that API Gateway's result cache (keyed on the
    token) stays valid across routes; each route checks its own scope.
    """
    try:
        verified = verifier.verify(bearer_token(event.authorization_token))
    except Unauthenticated as exc:
        logger.info("token rejected", extra={"reason": exc.message.split(":")[0]})
        raise Unauthorized() from None
    arn = event.parsed_arn
    policy = APIGatewayAuthorizerResponse(
        principal_id=verified.sub,
        region=arn.region,
        aws_account_id=arn.aws_account_id,
        api_id=arn.api_id,
        stage=arn.stage,
        context=authorizer_context(verified),
    )
    policy.allow_all_routes()
    return policy.asdict()


def authorizer_handler() -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The authorizer's Lambda entrypoint; the JWKS client (and its key cache) lives while warm."""

    def build() -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
        verifier = token_verifier(bootstrap().settings)
        return lambda event, context: authorize(APIGatewayAuthorizerTokenEvent(event), verifier)

    return instrumented("authorizer", build)
