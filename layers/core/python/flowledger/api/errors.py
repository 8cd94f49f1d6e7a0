"""The one place that turns exceptions into HTTP responses: ``{"error": code, "message": ...}``."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver, Response
from aws_lambda_powertools.event_handler.exceptions import ServiceError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from flowledger import errors

logger = Logger(child=True)

STATUS_BY_ERROR: dict[type[errors.FlowledgerError], HTTPStatus] = {
    errors.InvalidInput: HTTPStatus.UNPROCESSABLE_ENTITY,
    errors.Unauthenticated: HTTPStatus.UNAUTHORIZED,
    errors.Forbidden: HTTPStatus.FORBIDDEN,
    errors.NotFound: HTTPStatus.NOT_FOUND,
    errors.Conflict: HTTPStatus.CONFLICT,
    errors.PayloadTooLarge: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    errors.UnknownJob: HTTPStatus.NOT_FOUND,
    errors.LedgerContention: HTTPStatus.SERVICE_UNAVAILABLE,
    errors.BacklogContention: HTTPStatus.SERVICE_UNAVAILABLE,
    errors.UpstreamUnavailable: HTTPStatus.SERVICE_UNAVAILABLE,
    errors.RateLimited: HTTPStatus.TOO_MANY_REQUESTS,
}


def status_for(exc: errors.FlowledgerError) -> HTTPStatus:
    """The status of a domain error: the closest mapped class in its MRO, else 400."""
    for cls in type(exc).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return HTTPStatus.BAD_REQUEST


def error_response(
    status: HTTPStatus, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response[Any]:
    return Response(
        status_code=status.value,
        content_type=content_types.APPLICATION_JSON,
        body={"error": code, "message": message, **extra},
        headers=headers,
    )


def register_error_handlers(app: ApiGatewayResolver) -> None:
    """Install the exception map on a resolver."""

    @app.exception_handler(errors.FlowledgerError)
    def _domain(exc: errors.FlowledgerError) -> Response[Any]:
        headers = {"Retry-After": str(exc.retry_after_seconds)} if isinstance(exc, errors.RateLimited) else None
        return error_response(status_for(exc), exc.code, exc.message, headers)

    @app.exception_handler(RequestValidationError)
    def _validation(exc: RequestValidationError) -> Response[Any]:
        # Locations and messages only: the offending input may hold PHI, so it is never echoed.
        fields = [{"loc": list(e["loc"]), "type": e["type"], "msg": e.get("msg", "")} for e in exc.errors()]
        return error_response(
            HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error", "the request does not match the schema", fields=fields
        )

    @app.exception_handler(RequestUnsupportedContentType)
    def _content_type(exc: RequestUnsupportedContentType) -> Response[Any]:
        return error_response(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", "send the body as application/json"
        )

    @app.exception_handler(ServiceError)
    def _service(exc: ServiceError) -> Response[Any]:
        status = HTTPStatus(exc.status_code)
        return error_response(
            status, status.phrase.lower().replace(" ", "_"), str(exc.msg) if exc.msg else status.phrase
        )

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response[Any]:
        request_id = (app.current_event.raw_event.get("requestContext") or {}).get("requestId", "unknown")
        logger.exception("unhandled error", extra={"request_id": request_id})
        return error_response(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            "internal_error",
            "internal error; quote the request id when reporting it",
            request_id=request_id,
        )
