"""The console user pool's pre token generation trigger (V1 event): adds ``scope`` and ``patient_id``.

Cognito calls it before it issues (or refreshes) an id token and merges
``response.claimsOverrideDetails.claimsToAddOrOverride`` into it. The V1 event works on every pool
tier and customises the id token only, which is the token the console sends as its bearer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from flowledger.api.group_scopes import id_token_claims
from flowledger.entrypoints import instrumented

logger = Logger(service="token_claims")


def add_token_claims(event: dict[str, Any]) -> dict[str, Any]:
    """The event with the user's scopes and patient id added to its response, as Cognito expects it back."""
    request = event.get("request") or {}
    groups = (request.get("groupConfiguration") or {}).get("groupsToOverride") or []
    attributes = request.get("userAttributes") or {}
    claims = id_token_claims(groups, attributes)
    # Cognito sends the response's fields as null; anything already there (another claim) is kept.
    response = event.get("response") or {}
    details = response.get("claimsOverrideDetails") or {}
    details["claimsToAddOrOverride"] = {**(details.get("claimsToAddOrOverride") or {}), **claims}
    response["claimsOverrideDetails"] = details
    event["response"] = response
    # Names and ids stay out of the logs (PHI): only what kind of token was made.
    logger.info(
        "id token claims added",
        extra={
            "trigger": event.get("triggerSource"),
            "scope": claims.get("scope", ""),
            "has_patient_id": "patient_id" in claims,
        },
    )
    return event


def token_claims_handler() -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The trigger's Lambda entrypoint."""
    return instrumented("token_claims", lambda: lambda event, context: add_token_claims(event))
