"""The witness as a Lambda behind a function URL (payload 2.0): the same checks as ``witness serve``.

Its state is a DynamoDB table keyed by origin and its key a KMS Ed25519 key (``infra/witness_stack.py``).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from functools import cache
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from flowledger.entrypoints import instrumented
from flowledger.errors import ConfigurationError
from flowledger.ledger.witnessing import MAX_REQUEST_BYTES
from flowledger.services import bootstrap
from flowledger.witness.keys import kms_witness_key
from flowledger.witness.service import Witness, answer, log_keys
from flowledger.witness.state import DynamoState


@cache
def deployed_witness() -> Witness:
    """The witness of this function's settings, made on the first request."""
    services = bootstrap()
    settings = services.settings
    if not (settings.witness_name and settings.witness_key_id and settings.witness_table and settings.witness_logs):
        raise ConfigurationError(
            "the witness needs FLOWLEDGER_WITNESS_NAME, _KEY_ID, _TABLE and _LOGS (infra/witness_stack.py sets them)"
        )
    key = kms_witness_key(services.aws.kms, settings.witness_key_id, settings.witness_name)
    state = DynamoState(services.aws.dynamodb, settings.witness_table)
    return Witness(key, log_keys(settings.witness_logs), state, time.time)


def handle(event: dict[str, Any], witness: Witness) -> dict[str, Any]:
    """A function URL event to its answer."""
    http = event.get("requestContext", {}).get("http", {})
    raw = event.get("body") or ""
    body: bytes | None = raw.encode() if isinstance(raw, str) else b""
    if event.get("isBase64Encoded"):
        try:
            body = base64.b64decode(raw) if len(raw) <= 2 * MAX_REQUEST_BYTES else None
        except ValueError:
            body = b""
    reply = answer(witness, str(http.get("method", "")), str(event.get("rawPath", "")), body)
    return {
        "statusCode": reply.status,
        "headers": {"Content-Type": reply.content_type, **reply.headers},
        "body": reply.body,
    }


def witness_handler() -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The witness function's entrypoint."""
    return instrumented("witness", lambda: lambda event, context: handle(event, deployed_witness()))
