"""Lambda entrypoints: one decorator stack (logger with correlation id → metrics → tracer).

The stack is built on the first invocation, not at import: building the Tracer loads the X-Ray
SDK, which creates botocore clients, and nothing is created at import time in this codebase.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

METRICS_NAMESPACE = "Flowledger"
Result = TypeVar("Result")
Handler = Callable[[dict[str, Any], LambdaContext], Result]


def instrumented(
    service: str, build: Callable[[], Handler[Result]], *, correlation_id_path: str | None = None
) -> Handler[Result]:
    """A Lambda handler that, on first use, builds ``build()`` and wraps it in the decorator stack."""
    built: Handler[Result] | None = None

    def handler(event: dict[str, Any], context: LambdaContext) -> Result:
        nonlocal built
        if built is None:
            built = _decorate(service, build(), correlation_id_path)
        return built(event, context)

    return handler


def _decorate(service: str, body: Handler[Result], correlation_id_path: str | None) -> Handler[Result]:
    logger = Logger(service=service)
    metrics = Metrics(namespace=METRICS_NAMESPACE, service=service)
    tracer = Tracer(service=service)
    # log_event stays off: events carry chat text and PHI. Responses are not traced for the same reason.
    traced = tracer.capture_lambda_handler(body, capture_response=False)
    measured = metrics.log_metrics(traced)
    logged: Handler[Result] = logger.inject_lambda_context(
        measured, correlation_id_path=correlation_id_path, log_event=False
    )
    return logged
