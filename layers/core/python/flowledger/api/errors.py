"""The one place that turns exceptions into HTTP responses: ``{"error": code, "message": ...}``."""

from __future__ import annotations

import json
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
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as AwsConnectionError

from flowledger import errors

logger = Logger(child=True)

STATUS_BY_ERROR: dict[type[errors.FlowledgerError], HTTPStatus] = {
    errors.InvalidInput: HTTPStatus.UNPROCESSABLE_ENTITY,
    errors.Unauthenticated: HTTPStatus.UNAUTHORIZED,
    errors.Forbidden: HTTPStatus.FORBIDDEN,
    errors.NotFound: HTTPStatus.NOT_FOUND,
    errors.SubjectErased: HTTPStatus.GONE,
    errors.Conflict: HTTPStatus.CONFLICT,
    errors.PayloadTooLarge: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    errors.MalformedBody: HTTPStatus.BAD_REQUEST,
    errors.UnsupportedMediaType: HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
    errors.MethodNotAllowed: HTTPStatus.METHOD_NOT_ALLOWED,
    errors.UnknownJob: HTTPStatus.NOT_FOUND,
    errors.LedgerContention: HTTPStatus.SERVICE_UNAVAILABLE,
    errors.BacklogContention: HTTPStatus.SERVICE_UNAVAILABLE,
    errors.UpstreamUnavailable: HTTPStatus.SERVICE_UNAVAILABLE,
    errors.RateLimited: HTTPStatus.TOO_MANY_REQUESTS,
}

# Error codes AWS answers when it sheds load (DynamoDB; KMS ``ThrottlingException``/``LimitExceededException``):
# retrying later can succeed. Matched on the code, never on the message text.
THROTTLING_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TransactionConflictException",
        "LimitExceededException",
    }
)
# Cancellation reasons of a ``TransactWriteItems`` that was refused for capacity or a concurrent transaction.
THROTTLED_CANCELLATIONS = frozenset(
    {"ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded", "TransactionConflict"}
)
THROTTLED_RETRY_AFTER_SECONDS = 1


def status_for(exc: errors.FlowledgerError) -> HTTPStatus:
    """The status of a domain error: the closest mapped class in its MRO, else 400."""
    for cls in type(exc).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return HTTPStatus.BAD_REQUEST


def error_headers(exc: errors.FlowledgerError) -> dict[str, str] | None:
    """The headers an error's status calls for (``Retry-After`` on 429 and 503, ``Allow`` on 405)."""
    if isinstance(exc, (errors.RateLimited, errors.Throttled)):
        return {"Retry-After": str(exc.retry_after_seconds)}
    if isinstance(exc, errors.MethodNotAllowed):
        return {"Allow": ", ".join(exc.allowed)}
    if status_for(exc) is HTTPStatus.SERVICE_UNAVAILABLE:  # contention, an upstream model: all worth a retry
        return {"Retry-After": str(THROTTLED_RETRY_AFTER_SECONDS)}
    return None


def throttled(exc: ClientError) -> errors.Throttled | None:
    """The domain error of an AWS refusal for capacity (by its error code), or None for any other refusal."""
    error = exc.response.get("Error", {})
    code = error.get("Code", "")
    reasons = {reason.get("Code", "None") for reason in exc.response.get("CancellationReasons", [])}
    if code in THROTTLING_CODES or (code == "TransactionCanceledException" and reasons & THROTTLED_CANCELLATIONS):
        operation = exc.operation_name or "a call"
        return errors.Throttled(
            f"the data store is busy ({code} on {operation}); nothing was written, retry the request",
            THROTTLED_RETRY_AFTER_SECONDS,
        )
    return None


def unavailable(exc: ClientError) -> errors.UpstreamUnavailable | None:
    """The domain error of an AWS answer of 503 (the dev server's store when it cannot save), else None."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = exc.response.get("Error", {}).get("Code", "")
    if status != HTTPStatus.SERVICE_UNAVAILABLE and code not in ("ServiceUnavailable", "ServiceUnavailableException"):
        return None
    operation = exc.operation_name or "a call"
    return errors.UpstreamUnavailable(f"the data store is unavailable ({code or status} on {operation}); retry later")


def error_body(code: str, message: str, request_id: str, **extra: Any) -> dict[str, Any]:
    """The one error shape every route answers with (documented as ``ErrorBody`` in the OpenAPI)."""
    return {"error": code, "message": message, "request_id": request_id, **extra}


def request_id_of(event: dict[str, Any]) -> str:
    return str((event.get("requestContext") or {}).get("requestId") or "unknown")


def error_extra(exc: errors.FlowledgerError) -> dict[str, Any]:
    """The fields an error locates (a refused control character's place), for the body's ``fields``."""
    fields = getattr(exc, "fields", None)
    return {"fields": fields} if isinstance(fields, list) else {}


def proxy_error(exc: errors.FlowledgerError, event: dict[str, Any]) -> dict[str, Any]:
    """A domain error as an API Gateway proxy response, for refusals made before the resolver runs."""
    return {
        "statusCode": status_for(exc).value,
        "headers": {"Content-Type": content_types.APPLICATION_JSON, **(error_headers(exc) or {})},
        "body": json.dumps(error_body(exc.code, exc.message, request_id_of(event), **error_extra(exc))),
        "isBase64Encoded": False,
    }


def register_error_handlers(app: ApiGatewayResolver) -> None:
    """Install the exception map on a resolver."""

    def respond(
        status: HTTPStatus, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
    ) -> Response[Any]:
        return Response(
            status_code=status.value,
            content_type=content_types.APPLICATION_JSON,
            body=error_body(code, message, request_id_of(app.current_event.raw_event), **extra),
            headers=headers,
        )

    @app.exception_handler(errors.FlowledgerError)
    def _domain(exc: errors.FlowledgerError) -> Response[Any]:
        return respond(status_for(exc), exc.code, exc.message, error_headers(exc))

    @app.exception_handler(RequestValidationError)
    def _validation(exc: RequestValidationError) -> Response[Any]:
        # Locations and messages only: the offending input may hold PHI, so it is never echoed.
        fields = [{"loc": list(e["loc"]), "type": e["type"], "msg": e.get("msg", "")} for e in exc.errors()]
        return respond(
            HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error", "the request does not match the schema", fields=fields
        )

    @app.exception_handler(RequestUnsupportedContentType)
    def _content_type(exc: RequestUnsupportedContentType) -> Response[Any]:
        return respond(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", "send the body as application/json")

    @app.exception_handler(ServiceError)
    def _service(exc: ServiceError) -> Response[Any]:
        status = HTTPStatus(exc.status_code)
        return respond(status, status.phrase.lower().replace(" ", "_"), str(exc.msg) if exc.msg else status.phrase)

    def internal_error() -> Response[Any]:
        request_id = request_id_of(app.current_event.raw_event)
        logger.exception("unhandled error", extra={"request_id": request_id})
        return respond(
            HTTPStatus.INTERNAL_SERVER_ERROR, "internal_error", "internal error; quote the request id when reporting it"
        )

    @app.exception_handler(ClientError)
    def _aws(exc: ClientError) -> Response[Any]:
        # Throttling, or a store that cannot save, can outlive botocore's own retries: a 503 the caller
        # can retry, not a 500.
        domain = throttled(exc) or unavailable(exc)
        if domain is None:
            return internal_error()
        return respond(status_for(domain), domain.code, domain.message, error_headers(domain))

    @app.exception_handler([HTTPClientError, AwsConnectionError])
    def _unreachable(exc: HTTPClientError | AwsConnectionError) -> Response[Any]:
        # A timeout or a dropped connection (after botocore's retries). Any write is one transaction: it was
        # applied whole or not at all, so the caller retries (with its idempotency key where the route takes one).
        domain = errors.UpstreamUnavailable(
            f"a backing service did not answer ({type(exc).__name__}); retry the request"
        )
        return respond(status_for(domain), domain.code, domain.message, error_headers(domain))

    @app.exception_handler(Exception)
    def _unexpected(exc: Exception) -> Response[Any]:
        return internal_error()
