"""One OTLP/HTTP request from body to answer: decode it, write its traces as flows (spans, or log records under
their spans), receipt it in the ledger, count what was refused, and answer in the request's own media type."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from flowledger.identity import Principal
from flowledger.otlp import METRIC_SERVICE, RECORDED_METRIC, REFUSED_METRIC
from flowledger.otlp.decode import encoded, media_type, parse_logs, parse_traces
from flowledger.otlp.ingest import Ingested, ingest_logs, ingest_traces, record_receipts
from flowledger.services import Services


@dataclass(frozen=True)
class Answer:
    """The 200 answer's media type and bytes."""

    content_type: str
    body: bytes


def receive_traces(
    services: Services, principal: Principal, body: bytes, content_type: str | None, content_encoding: str | None
) -> Answer:
    """Take one ``POST /v1/traces``: every span written or refused by name, and a receipt of the request."""
    request = parse_traces(body, content_type, content_encoding)  # the size first, then the media type...
    done = ingest_traces(services, principal, request)
    response = ExportTraceServiceResponse()
    if done.refused:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=len(done.refused), error_message=done.error_message)
        )
    return _answered(services, principal, "traces", body, content_type, done, response)


def receive_logs(
    services: Services, principal: Principal, body: bytes, content_type: str | None, content_encoding: str | None
) -> Answer:
    """Take one ``POST /v1/logs``: every record written under its span or refused by name, and a receipt."""
    done = ingest_logs(services, principal, parse_logs(body, content_type, content_encoding))
    response = ExportLogsServiceResponse()
    if done.refused:
        response.partial_success.CopyFrom(
            ExportLogsPartialSuccess(rejected_log_records=len(done.refused), error_message=done.error_message)
        )
    return _answered(services, principal, "logs", body, content_type, done, response)


def _answered(
    services: Services,
    principal: Principal,
    signal: str,
    body: bytes,
    content_type: str | None,
    done: Ingested,
    response: Message,
) -> Answer:
    """Receipt the request, count what was refused, and encode the answer in the request's media type."""
    kind = media_type(content_type)  # the parse checked it already
    record_receipts(services, principal, signal, body, kind, done)
    dimensions = {"service": METRIC_SERVICE}
    services.metrics.emit(RECORDED_METRIC, done.recorded, "Count", dimensions)
    services.metrics.emit(REFUSED_METRIC, len(done.refused), "Count", dimensions)
    return Answer(kind, encoded(response, kind))
