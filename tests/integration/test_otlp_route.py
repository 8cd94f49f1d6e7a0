"""The OTLP routes through the deployed reasoning handler on moto: a protobuf body as API Gateway hands it over
(base64), the signed admin route, the stated size limit, and a contended ledger answered 503 with Retry-After,
whose retry writes each step once."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from flowledger.errors import LedgerContention
from flowledger.otlp.decode import MAX_BODY_BYTES
from flowledger.otlp.ingest import flow_id_of
from flowledger.reasoning.service import FlowService
from flowledger.services import Services

WRITER = {"sub": "agent-exporter", "scope": "reasoning.write", "patient_id": ""}
ADMIN_ARN = "arn:aws:iam::123456789012:role/collector"
Post = Callable[..., dict[str, Any]]


@pytest.fixture
def post(services: Services, load_function: Callable[[str], Any], rest_event: Any, lambda_context: Any) -> Post:
    handler = load_function("reasoning").handler

    def send(path: str, body: bytes, *, signed: bool = False, **headers: str) -> dict[str, Any]:
        event = rest_event(
            "POST",
            path,
            authorizer=None if signed else WRITER,
            user_arn=ADMIN_ARN if signed else None,
            headers={"Content-Type": "application/x-protobuf", **headers},
        )
        # API Gateway hands a binary media type over base64-encoded
        event.update(body=base64.b64encode(body).decode(), isBase64Encoded=True)
        return dict(handler(event, lambda_context))

    return send


def header(response: dict[str, Any], name: str) -> str:
    found = {**response.get("headers", {}), **{k: v[-1] for k, v in response.get("multiValueHeaders", {}).items()}}
    return str(found[name])


def answer_of(response: dict[str, Any]) -> ExportTraceServiceResponse:
    assert response["statusCode"] == 200, response["body"]
    assert header(response, "Content-Type") == "application/x-protobuf"
    body = response["body"]
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(base64.b64decode(body) if response["isBase64Encoded"] else body.encode())
    return answer


def test_a_gzipped_protobuf_body_handed_over_base64_becomes_a_flow(
    services: Services, post: Post, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    body = gzip.compress(request_of_a_trace.SerializeToString())
    answer = answer_of(post("/api/otlp/v1/traces", body, **{"Content-Encoding": "gzip"}))
    assert not answer.HasField("partial_success")
    trace = request_of_a_trace.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    flow, steps = FlowService(services).flow_with_steps(flow_id_of(trace))
    assert (flow.created_by, flow.source, len(steps)) == ("agent-exporter", "otlp", 5)


def test_the_signed_admin_route_writes_as_the_iam_principal(
    services: Services, post: Post, request_of_a_trace: ExportTraceServiceRequest
) -> None:
    answer_of(post("/admin/v1/otlp/v1/traces", request_of_a_trace.SerializeToString(), signed=True))
    trace = request_of_a_trace.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    flow, _ = FlowService(services).flow_with_steps(flow_id_of(trace))
    assert flow.created_by == ADMIN_ARN
    unsigned = post("/admin/v1/otlp/v1/traces", request_of_a_trace.SerializeToString())
    assert unsigned["statusCode"] == 403


def test_a_body_past_the_stated_size_is_413_and_nothing_is_written(services: Services, post: Post) -> None:
    response = post("/api/otlp/v1/traces", b"\x0a" * (MAX_BODY_BYTES + 1))
    assert (response["statusCode"], json.loads(response["body"])["error"]) == (413, "payload_too_large")
    assert services.aws.dynamodb.scan(TableName=services.aws.table_name("flows"))["Items"] == []


def test_a_contended_ledger_is_503_with_retry_after_and_the_retry_writes_each_step_once(
    services: Services,
    post: Post,
    request_of_a_trace: ExportTraceServiceRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = request_of_a_trace.SerializeToString()
    real = FlowService.add_steps

    def contended(*args: Any, **kwargs: Any) -> Any:
        raise LedgerContention("the chain stayed contended")

    monkeypatch.setattr(FlowService, "add_steps", contended)
    refused = post("/api/otlp/v1/traces", body)
    assert refused["statusCode"] == 503 and int(header(refused, "Retry-After")) > 0
    monkeypatch.setattr(FlowService, "add_steps", real)
    assert not answer_of(post("/api/otlp/v1/traces", body)).HasField("partial_success")
    trace = request_of_a_trace.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    _, steps = FlowService(services).flow_with_steps(flow_id_of(trace))
    assert len(steps) == 5
    events = json.dumps(services.aws.dynamodb.scan(TableName=services.aws.table_name("ledger"))["Items"])
    assert events.count("reasoning.step.created") == 5
