"""The OTLP/HTTP receiver (reasoning.write): an agent's OpenTelemetry exporter sends its spans here and each
trace becomes a flow (``flowledger.otlp``). ``OTEL_EXPORTER_OTLP_ENDPOINT`` is ``<api>/api/otlp``: the exporter
adds ``/v1/traces`` itself.

``/v1/logs`` takes log records the same way: each becomes a step under its span's step (``otlp.events``).

The body is protobuf or JSON, gzip or not, and the answer comes in the request's own media type: 200 with
``partial_success`` naming every span refused and why whenever any was, 400 for a body that does not decode,
413 past :data:`~flowledger.otlp.decode.MAX_BODY_BYTES`, 415 for another media type or encoding, and 429/503
with ``Retry-After`` only when the whole request may be retried (nothing is ever written twice).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler.api_gateway import Response, Router
from aws_lambda_powertools.event_handler.openapi.types import (
    OpenAPIResponse,
    OpenAPIResponseContentModel,
    OpenAPIResponseContentSchema,
)

from flowledger.api.access import needs_scope
from flowledger.api.app import services_of
from flowledger.api.principals import iam_principal, require_scope
from flowledger.api.routes import RAW_BODY_EXTENSION
from flowledger.api.screening import body_bytes
from flowledger.identity import Principal
from flowledger.services import Services

if TYPE_CHECKING:
    from flowledger.otlp.receiver import Answer

router = Router()

TRACES_PATH = "/api/otlp/v1/traces"
LOGS_PATH = "/api/otlp/v1/logs"
# The same for the admin stage's IAM principals (SigV4, e.g. the ADOT collector's sigv4auth extension).
ADMIN_TRACES_PATH = "/admin/v1/otlp/v1/traces"
ADMIN_LOGS_PATH = "/admin/v1/otlp/v1/logs"
# OTLP/JSON is protobuf's JSON mapping of the same messages (hex ids): described as objects, not field by field.
_REQUEST_BODY = {
    "application/x-protobuf": {"type": "string", "format": "binary"},
    "application/json": {"type": "object", "description": "the export request in OTLP/JSON"},
}
_ANSWER: dict[str, OpenAPIResponseContentSchema | OpenAPIResponseContentModel] = {
    "application/x-protobuf": OpenAPIResponseContentSchema(schema={"type": "string", "format": "binary"}),
    "application/json": OpenAPIResponseContentSchema(
        schema={
            "type": "object",
            "description": "the export response in OTLP/JSON: `partialSuccess` when anything was refused",
        }
    ),
}
_RESPONSES: dict[int, OpenAPIResponse] = {
    200: {"description": "taken, with `partial_success` when anything was refused", "content": _ANSWER},
    400: {"description": "the body does not decode as an OTLP export request"},
    413: {"description": "the body is past the receiver's size limit"},
    415: {"description": "neither protobuf nor JSON, or an encoding other than gzip"},
}


@router.post(
    TRACES_PATH,
    summary="Receive OpenTelemetry spans (OTLP/HTTP): each trace becomes a flow, each span a step",
    description=(
        "An `ExportTraceServiceRequest` as `application/x-protobuf` or `application/json` (hex ids), optionally "
        "`Content-Encoding: gzip`. The answer is an `ExportTraceServiceResponse` in the same media type; "
        "`partial_success` names every span refused and why. A span sent again is not written again. "
        "Every request is receipted in the ledger: the SHA-256 of the body and the counts taken and refused."
    ),
    tags=["otlp"],
    security=needs_scope("reasoning.write"),
    # the body is OTLP, read by its own decoder rather than screened as JSON (routes.RAW_BODY_EXTENSION)
    openapi_extensions={RAW_BODY_EXTENSION: _REQUEST_BODY},
    responses=_RESPONSES,
)
def receive_traces() -> Response[bytes]:
    # Imported here: protobuf and the OTLP messages cost the reasoning function's other routes nothing.
    from flowledger.otlp.receiver import receive_traces as receive

    return _received(receive)


@router.post(
    LOGS_PATH,
    summary="Receive OpenTelemetry log records (OTLP/HTTP): each becomes a step under its span's step",
    description=(
        "An `ExportLogsServiceRequest`, sent as to the traces route. A `gen_ai.evaluation.result` event becomes a "
        "recorded evaluation of the step it judges (name, score and label; its explanation sealed); any other "
        "event a step of kind `event`, its body sealed. A record outside a span is refused, by its position, in "
        "`partial_success`. A record sent again is not written again; every request is receipted."
    ),
    tags=["otlp"],
    security=needs_scope("reasoning.write"),
    openapi_extensions={RAW_BODY_EXTENSION: _REQUEST_BODY},
    responses=_RESPONSES,
)
def receive_logs() -> Response[bytes]:
    from flowledger.otlp.receiver import receive_logs as receive

    return _received(receive)


@router.post(
    ADMIN_TRACES_PATH,
    summary="Receive OpenTelemetry spans signed with SigV4 (an IAM principal's agents): as the bearer route",
    tags=["otlp"],
    openapi_extensions={RAW_BODY_EXTENSION: _REQUEST_BODY},
    responses=_RESPONSES,
)
def receive_traces_signed() -> Response[bytes]:
    from flowledger.otlp.receiver import receive_traces as receive

    return _received(receive, signed=True)


@router.post(
    ADMIN_LOGS_PATH,
    summary="Receive OpenTelemetry log records signed with SigV4: as the bearer route",
    tags=["otlp"],
    openapi_extensions={RAW_BODY_EXTENSION: _REQUEST_BODY},
    responses=_RESPONSES,
)
def receive_logs_signed() -> Response[bytes]:
    from flowledger.otlp.receiver import receive_logs as receive

    return _received(receive, signed=True)


def _received(
    receive: Callable[[Services, Principal, bytes, str | None, str | None], Answer], signed: bool = False
) -> Response[bytes]:
    event = router.current_event.raw_event
    # the caller before anything of the body is read: a bearer token with reasoning.write, or an IAM principal
    principal = iam_principal(event) if signed else require_scope(event, "reasoning.write")
    headers = _headers(event)
    answer = receive(
        services_of(router), principal, body_bytes(event), headers.get("content-type"), headers.get("content-encoding")
    )
    return Response(200, answer.content_type, answer.body)


def _headers(event: dict[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
