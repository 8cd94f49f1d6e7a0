"""OTLP/HTTP request bodies, as the OTLP specification defines them: binary protobuf
(``application/x-protobuf``) or JSON (``application/json``), either one gzip-compressed or not, decoded with the
``opentelemetry-proto`` package into the export request, and the answer encoded in the request's own type.

OTLP's JSON is protobuf's JSON mapping with two differences this module makes up for: trace and span ids are
hex strings (the mapping would read base64), and enum fields may be integers (which the mapping accepts).
Unknown fields are ignored, as the specification requires of a receiver.

What can be refused here is refused whole, before anything is read: a body past :data:`MAX_BODY_BYTES` (413)
or one that inflates past :data:`MAX_DECODED_BYTES`, a media type or encoding other than these (415), and a
body that does not decode (400). Refusing one span among good ones is the mapping's business, not this module's.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from flowledger.errors import MalformedBody, PayloadTooLarge, UnsupportedMediaType
from flowledger.json_depth import json_depth

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# As received. API Gateway hands a binary body to Lambda base64-encoded (4/3 of its size), and Lambda takes
# 6 MB a synchronous invocation: 4 MiB stays under both with room for the event's other fields.
MAX_BODY_BYTES = 4 * 1024 * 1024
# After gunzip: a small compressed body may not inflate without bound.
MAX_DECODED_BYTES = 16 * 1024 * 1024
# OTLP/JSON nests some ten levels to an attribute's value, and an AnyValue may nest arrays and maps in turn: deeper
# than this is no exporter's (and would cost the parser a RecursionError).
MAX_JSON_DEPTH = 64
# The fields of OTLP's JSON that hold ids as hex, by the message path that leads to them.
_TRACE_ID_FIELDS = ("traceId", "spanId", "parentSpanId")
_LINK_ID_FIELDS = ("traceId", "spanId")
_LOG_ID_FIELDS = ("traceId", "spanId")

Request = TypeVar("Request", bound=Message)


def media_type(content_type: str | None) -> str:
    """The body's media type (``application/x-protobuf`` or ``application/json``), parameters dropped."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind not in (PROTOBUF, JSON):
        raise UnsupportedMediaType(f"send OTLP as {PROTOBUF} or {JSON}, not {kind or 'no Content-Type'}")
    return kind


def inflated(body: bytes, content_encoding: str | None) -> bytes:
    """The body as sent before its ``Content-Encoding`` (gzip or none), within the size limits."""
    if len(body) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"an OTLP request may be {MAX_BODY_BYTES} bytes at most; this one is {len(body)}")
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding != "gzip":
        raise UnsupportedMediaType(f"send OTLP uncompressed or as gzip, not {encoding}")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, MAX_DECODED_BYTES + 1)
    except zlib.error:
        raise MalformedBody("the body is not valid gzip") from None
    if len(out) > MAX_DECODED_BYTES:
        raise PayloadTooLarge(f"an OTLP request may inflate to {MAX_DECODED_BYTES} bytes at most")
    if not inflater.eof:
        raise MalformedBody("the gzip body ends early")
    return out


def parse_traces(body: bytes, content_type: str | None, content_encoding: str | None) -> ExportTraceServiceRequest:
    """``POST /v1/traces``'s body as its export request."""
    return _parsed(ExportTraceServiceRequest(), body, content_type, content_encoding, _hex_ids_of_traces)


def parse_logs(body: bytes, content_type: str | None, content_encoding: str | None) -> ExportLogsServiceRequest:
    """``POST /v1/logs``'s body as its export request."""
    return _parsed(ExportLogsServiceRequest(), body, content_type, content_encoding, _hex_ids_of_logs)


def encoded(message: Message, kind: str) -> bytes:
    """An answer (an export response) in the media type the request came in."""
    if kind == PROTOBUF:
        serialized: bytes = message.SerializeToString()
        return serialized
    return json.dumps(json_format.MessageToDict(message), separators=(",", ":")).encode()


def _parsed(message: Request, body: bytes, content_type: str | None, content_encoding: str | None, ids: Any) -> Request:
    if len(body) > MAX_BODY_BYTES:  # first: an oversized body is 413 whatever else is wrong with it
        raise PayloadTooLarge(f"an OTLP request may be {MAX_BODY_BYTES} bytes at most; this one is {len(body)}")
    kind = media_type(content_type)
    raw = inflated(body, content_encoding)
    if kind == PROTOBUF:
        try:
            message.ParseFromString(raw)
        except DecodeError:
            raise MalformedBody("the body is not an OTLP protobuf export request") from None
        return message
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedBody("the body is not JSON") from None
    if json_depth(text) > MAX_JSON_DEPTH:
        raise MalformedBody(f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        raise MalformedBody("the body is not JSON") from None
    if not isinstance(document, dict):
        raise MalformedBody("an OTLP JSON export request is an object")
    ids(document)
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise MalformedBody(f"the body is not an OTLP JSON export request: {str(exc)[:200]}") from None
    return message


def _hex_ids_of_traces(document: dict[str, Any]) -> None:
    for r, resource in enumerate(_items(document, "resourceSpans")):
        for s, scope in enumerate(_items(resource, "scopeSpans")):
            for n, span in enumerate(_items(scope, "spans")):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]"
                _rewrite(span, _TRACE_ID_FIELDS, where)
                for k, link in enumerate(_items(span, "links")):
                    _rewrite(link, _LINK_ID_FIELDS, f"{where}.links[{k}]")


def _hex_ids_of_logs(document: dict[str, Any]) -> None:
    for r, resource in enumerate(_items(document, "resourceLogs")):
        for s, scope in enumerate(_items(resource, "scopeLogs")):
            for n, record in enumerate(_items(scope, "logRecords")):
                _rewrite(record, _LOG_ID_FIELDS, f"resourceLogs[{r}].scopeLogs[{s}].logRecords[{n}]")


def _items(parent: Any, key: str) -> list[Any]:
    value = parent.get(key) if isinstance(parent, dict) else None
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _rewrite(item: dict[str, Any], fields: tuple[str, ...], where: str) -> None:
    """Hex ids as the protobuf JSON mapping reads bytes (base64); an empty id stays empty."""
    for field in fields:
        value = item.get(field)
        if value is None or value == "":
            continue
        try:
            item[field] = base64.b64encode(bytes.fromhex(value)).decode() if isinstance(value, str) else value
        except ValueError:
            raise MalformedBody(f"{where}.{field} is not a hex id") from None
