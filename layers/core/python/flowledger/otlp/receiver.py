"""One OTLP/HTTP traces request from body to answer: decode it, write its traces as flows, receipt it in the
ledger, count what was refused, and answer in the request's own media type."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from flowledger.identity import Principal
from flowledger.otlp import METRIC_SERVICE, RECORDED_METRIC, REFUSED_METRIC
from flowledger.otlp.decode import encoded, media_type, parse_traces
from flowledger.otlp.ingest import ingest_traces, record_receipts
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
    kind = media_type(content_type)
    request = parse_traces(body, content_type, content_encoding)
    done = ingest_traces(services, principal, request)
    record_receipts(services, principal, body, kind, done)
    services.metrics.emit(RECORDED_METRIC, done.recorded, "Count", {"service": METRIC_SERVICE})
    services.metrics.emit(REFUSED_METRIC, len(done.refused), "Count", {"service": METRIC_SERVICE})
    response = ExportTraceServiceResponse()
    if done.refused:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=len(done.refused), error_message=done.error_message)
        )
    return Answer(kind, encoded(response, kind))
