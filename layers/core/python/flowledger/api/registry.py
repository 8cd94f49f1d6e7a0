"""The REST capabilities: one Lambda function each in AWS, all together in the dev server."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from flowledger.api import core

# capability name -> its router; the function folder is functions/<name>/.
REST_CAPABILITIES: dict[str, Router] = {
    "core": core.router,
}
