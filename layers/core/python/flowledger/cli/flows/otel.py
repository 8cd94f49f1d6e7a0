"""`flowledger flows otel-export`: exported flows as OpenTelemetry spans, POSTed over OTLP/HTTP or written out.

The conversion is :mod:`flowledger.reasoning.otel` (records -> requests); this module reads the records,
gathers the headers and sends the requests. The whole input is checked before the first request goes
out (a bad line sends nothing); a 429, 502, 503 or 504 is retried with backoff (``Retry-After`` honoured),
any other refusal ends the command with one line naming the status. Header values are never printed:
they carry credentials.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote

from flowledger.cli import store
from flowledger.cli.failures import CommandFailed
from flowledger.cli.flows.export import MAX_LIMIT, add_window_options, window_from_args
from flowledger.cli.options import command, json_option, positive_int, store_option
from flowledger.cli.text import counted
from flowledger.errors import InvalidInput

if TYPE_CHECKING:
    import httpx
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from flowledger.reasoning.dataset import FlowRecord

LANGFUSE_TRACES_PATH = "/api/public/otel/v1/traces"
LANGFUSE_INGESTION_VERSION = "4"  # Langfuse: direct OTLP exporters send x-langfuse-ingestion-version: 4
RETRYABLE = frozenset({429, 502, 503, 504})  # OTLP/HTTP: the statuses a client retries
MAX_ATTEMPTS = 5
BACKOFF_SECONDS = 1.0  # doubles after each retry: 1, 2, 4, 8
MAX_RETRY_AFTER_SECONDS = 30.0
TIMEOUT_SECONDS = 30.0
STDIN_SPOOL_BYTES = 16 * 1024 * 1024
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


def add_command(flows: Any) -> None:
    """Add ``otel-export`` to the ``flows`` group."""
    parser = command(
        flows,
        "otel-export",
        "send flows to an OpenTelemetry backend (Phoenix, Langfuse) as GenAI spans over OTLP/HTTP",
        cmd_flows_otel_export,
        "One trace per flow: an invoke_agent span with one child span per step (chat, retrieval, execute_tool"
        " or the step kind), GenAI semantic conventions v1.41 with openinference.span.kind beside them. Ids"
        " derive from the flow and step ids, so a re-export sends the same spans again. The whole file is checked"
        " before anything is sent; a 429/502/503/504 is retried with backoff, any other refusal is exit 2."
        " Headers: OTEL_EXPORTER_OTLP_HEADERS (or OTEL_EXPORTER_OTLP_TRACES_HEADERS), then the Langfuse keys,"
        " then --header, the later winning. Without --input the flows are read from the store, through the"
        " closed-flow index, as `flows export` reads them (same window flags).",
    )
    parser.add_argument(
        "--input",
        metavar="FILE",
        help="read a flows file (JSONL, as `flows export --format raw` writes it; - reads stdin) instead of the store",
    )
    add_window_options(parser)
    store_option(parser)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--endpoint",
        metavar="URL",
        help="the OTLP/HTTP traces URL, path included: http://localhost:6006/v1/traces (Phoenix),"
        " https://cloud.langfuse.com/api/public/otel/v1/traces (Langfuse)",
    )
    target.add_argument(
        "--out",
        metavar="FILE",
        help="write the requests instead: OTLP/JSON, one ExportTraceServiceRequest a line (- for stdout)",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an HTTP header for every request (repeatable), e.g. 'authorization=Bearer ...'",
    )
    parser.add_argument(
        "--langfuse-public-key",
        metavar="KEY",
        help="with --langfuse-secret-key: send Authorization: Basic for Langfuse (default $LANGFUSE_PUBLIC_KEY,"
        f" used only when the endpoint ends with {LANGFUSE_TRACES_PATH})",
    )
    parser.add_argument(
        "--langfuse-secret-key", metavar="KEY", help="the Langfuse secret key (default $LANGFUSE_SECRET_KEY)"
    )
    parser.add_argument(
        "--project",
        default="flowledger",
        metavar="NAME",
        help="the Phoenix project the spans land in (resource attribute openinference.project.name;"
        " default flowledger)",
    )
    parser.add_argument(
        "--batch-spans", type=positive_int, default=512, metavar="N", help="at most N spans a request (default 512)"
    )
    parser.add_argument(
        "--batch-bytes",
        type=_at_least_64k,
        default=1_000_000,
        metavar="N",
        help="at most N bytes a request body (default 1000000, at least 65536)",
    )
    json_option(parser, "the counts and the destination")
    parser.set_defaults(options_problem=window_with_input, command_parser=parser)


def window_with_input(args: argparse.Namespace) -> str | None:
    """A window flag with --input: the flags choose flows of the store, --input names a file instead."""
    named = [flag for flag in ("since", "until", "outcome", "min_confidence") if getattr(args, flag) is not None]
    if args.limit != MAX_LIMIT:
        named.append("limit")
    if args.input is None or not named:
        return None
    flags = ", ".join("--" + flag.replace("_", "-") for flag in named)
    verb = "chooses" if len(named) == 1 else "choose"
    return f"{flags} {verb} flows of the store; with --input the file's flows are sent as they are"


def _at_least_64k(value: str) -> int:
    number = int(value)
    if number < 65536:
        raise argparse.ArgumentTypeError(f"{value} is below 65536 (a step span can take a few kilobytes)")
    return number


@dataclass
class Sent:
    """What the export did: requests and spans delivered, spans the receiver said it rejected."""

    flows: int
    requests: int = 0
    spans: int = 0
    rejected: int = 0


def cmd_flows_otel_export(args: argparse.Namespace) -> int:
    from flowledger.reasoning.otel import export_requests

    endpoint = _endpoint(args.endpoint) if args.endpoint else None
    headers = request_headers(args, os.environ, endpoint) if endpoint else {}
    if args.out and args.out != "-" and not Path(args.out).parent.is_dir():
        raise CommandFailed(f"{args.out}: no directory {Path(args.out).parent}")
    source = _checked_input(args.input) if args.input is not None else _store_input(args)
    with source as (flows, records):
        requests = export_requests(
            records(), project=args.project, max_spans=args.batch_spans, max_bytes=args.batch_bytes
        )
        if endpoint is not None:
            sent = _post_all(requests, endpoint, headers, Sent(flows))
            where = f"to {_shown(endpoint)}"
        else:
            sent = _write_all(requests, args.out, Sent(flows))
            where = "to stdout" if args.out == "-" else f"to {args.out}"
        sent.flows = flows or getattr(records, "count", 0)
    report = sys.stderr if args.out == "-" else sys.stdout
    if args.json:
        print(json.dumps({**sent.__dict__, "destination": where[3:]}), file=report)
    else:
        line = (
            f"{'sent' if endpoint else 'wrote'} {counted(sent.flows, 'flow')} as {counted(sent.spans, 'span')}"
            f" in {counted(sent.requests, 'request')} {where}"
        )
        print(
            line + (f"; the receiver rejected {counted(sent.rejected, 'span')}" if sent.rejected else ""), file=report
        )
    return 1 if sent.rejected else 0


# ---- input: the store's window, or a file checked whole before anything is sent ----


class _StoreRecords:
    """The window's records as the exporter reads them, counted as they pass (the store's are valid by construction)."""

    def __init__(self, records: Iterator[FlowRecord]) -> None:
        self._records = records
        self.count = 0

    def __call__(self) -> Iterator[FlowRecord]:
        for record in self._records:
            self.count += 1
            yield record


@contextlib.contextmanager
def _store_input(args: argparse.Namespace) -> Iterator[tuple[int, Callable[[], Iterator[FlowRecord]]]]:
    """The closed flows of the window flags, from the store ``--data-dir`` names (AWS without it)."""
    from flowledger.reasoning.export import closed_flow_records

    window = window_from_args(args)  # checked before the store is reached
    yield 0, _StoreRecords(closed_flow_records(store.services(args.data_dir), window))


@contextlib.contextmanager
def _checked_input(name: str) -> Iterator[tuple[int, Callable[[], Iterator[FlowRecord]]]]:
    """The number of flows in ``name`` and a reader of its records, once every line has been checked.

    Two passes over the file (stdin is spooled first), so a bad last line costs one record's memory
    and sends nothing.
    """
    from flowledger.reasoning.dataset import RecordInvalid, read_records

    try:
        with _opened(name) as stream:
            try:
                flows = sum(1 for _ in read_records(stream))
            except RecordInvalid as exc:
                raise CommandFailed(f"{'stdin' if name == '-' else name} {exc.message}") from None

            def records() -> Iterator[FlowRecord]:
                stream.seek(0)
                for _, record in read_records(stream):
                    yield record

            yield flows, records
    except OSError as exc:
        raise CommandFailed(f"{name}: {exc.strerror or type(exc).__name__}") from None


@contextlib.contextmanager
def _opened(name: str) -> Iterator[IO[bytes]]:
    if name != "-":
        with open(name, "rb") as file:
            yield file
        return
    with tempfile.SpooledTemporaryFile(max_size=STDIN_SPOOL_BYTES) as spool:
        while chunk := sys.stdin.buffer.read(1024 * 1024):
            spool.write(chunk)
        spool.seek(0)
        yield spool


# ---- headers ----


def parse_otlp_headers(text: str, source: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` as OTEL_EXPORTER_OTLP_HEADERS has it (values percent-encoded), keyed by lower-case name."""
    headers: dict[str, str] = {}
    for number, entry in enumerate(text.split(","), start=1):
        if not entry.strip():
            continue
        key, sep, value = entry.partition("=")
        headers.update(_header(key.strip(), unquote(value.strip()), sep, f"{source}: entry {number}"))
    return headers


def _header(key: str, value: str, sep: str, where: str) -> dict[str, str]:
    # The value is never echoed: it is usually a credential.
    if not sep or not _TOKEN.match(key):
        raise InvalidInput(f"{where} is not KEY=VALUE with a header name for KEY (its value is not shown)")
    if any(ch in value for ch in "\r\n\x00"):
        raise InvalidInput(f"{where}: the value of {key} holds a line break (its value is not shown)")
    return {key.lower(): value}


def request_headers(args: argparse.Namespace, environ: Mapping[str, str], endpoint: httpx.URL) -> dict[str, str]:
    """Every request's headers: the OTLP environment, then Langfuse's Basic auth, then ``--header``."""
    headers: dict[str, str] = {}
    for variable in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):  # the specific one wins
        headers.update(parse_otlp_headers(environ.get(variable, ""), variable))
    headers.update(_langfuse_headers(args, environ, endpoint))
    for number, given in enumerate(args.header, start=1):
        key, sep, value = given.partition("=")
        headers.update(_header(key.strip(), value.strip(), sep, f"--header number {number}"))
    headers["content-type"] = "application/x-protobuf"
    return headers


def _langfuse_headers(args: argparse.Namespace, environ: Mapping[str, str], endpoint: httpx.URL) -> dict[str, str]:
    public, secret = args.langfuse_public_key, args.langfuse_secret_key
    # Keys from the environment go only to a Langfuse endpoint: a Phoenix export must not carry them.
    if public is None and secret is None and endpoint.path.endswith(LANGFUSE_TRACES_PATH):
        public, secret = environ.get("LANGFUSE_PUBLIC_KEY") or None, environ.get("LANGFUSE_SECRET_KEY") or None
    if public is None and secret is None:
        return {}
    if not public or not secret:
        raise InvalidInput(
            "Langfuse needs both keys: --langfuse-public-key and --langfuse-secret-key"
            " (or LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY)"
        )
    token = base64.b64encode(f"{public}:{secret}".encode()).decode()
    return {"authorization": f"Basic {token}", "x-langfuse-ingestion-version": LANGFUSE_INGESTION_VERSION}


# ---- destinations ----


def _endpoint(url: str) -> httpx.URL:
    import httpx

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise InvalidInput("--endpoint is not a URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidInput("--endpoint must be an http:// or https:// URL with a host, the traces path included")
    return parsed


def _shown(url: httpx.URL) -> str:
    """The endpoint without user info or query string, either of which may hold a credential."""
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}{url.path}"


def _post_all(
    requests: Iterator[ExportTraceServiceRequest], endpoint: httpx.URL, headers: dict[str, str], sent: Sent
) -> Sent:
    import httpx

    from flowledger.reasoning.otel import request_span_count

    with httpx.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False) as client:
        for request in requests:
            spans = request_span_count(request)
            try:
                response = _post(client, endpoint, headers, request.SerializeToString())
            except httpx.HTTPError as exc:
                raise CommandFailed(
                    f"cannot reach {_shown(endpoint)} ({type(exc).__name__}){_progress(sent, counted)}"
                ) from None
            if not response.is_success:
                raise CommandFailed(_refusal(response, endpoint) + _progress(sent, counted))
            sent.rejected += _rejected_spans(response)
            sent.requests += 1
            sent.spans += spans
    return sent


def _post(client: httpx.Client, endpoint: httpx.URL, headers: dict[str, str], body: bytes) -> httpx.Response:
    """One request, retried while the receiver says it is busy (429, 502, 503, 504)."""
    delay = BACKOFF_SECONDS
    for attempt in range(1, MAX_ATTEMPTS + 1):
        response = client.post(endpoint, content=body, headers=headers)
        if response.status_code not in RETRYABLE or attempt == MAX_ATTEMPTS:
            return response
        time.sleep(_retry_after(response.headers.get("retry-after"), delay))
        delay *= 2
    raise AssertionError("unreachable: the last attempt returns")


def _retry_after(value: str | None, default: float) -> float:
    """``Retry-After`` in seconds when it is a number (capped), the backoff otherwise."""
    try:
        seconds = float(value) if value is not None else default
    except ValueError:
        return default  # an HTTP date: not worth a clock comparison here
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS) if seconds == seconds else default


def _refusal(response: httpx.Response, endpoint: httpx.URL) -> str:
    status = response.status_code
    hint = ""
    if status in (401, 403):
        hint = ": check the credentials (--header, the Langfuse keys, OTEL_EXPORTER_OTLP_HEADERS)"
    elif status == 404:
        hint = ": is the traces path right (…/v1/traces)?"
    elif status in RETRYABLE:
        hint = f" after {MAX_ATTEMPTS} attempts"
    return f"{_shown(endpoint)} refused the spans: HTTP {status} {response.reason_phrase}".rstrip() + hint


def _progress(sent: Sent, counted: Callable[[int, str], str]) -> str:
    if not sent.requests:
        return "; nothing was sent"
    return (
        f"; {counted(sent.requests, 'request')} ({counted(sent.spans, 'span')}) had gone through,"
        " and a re-export sends the same ids again"
    )


def _rejected_spans(response: httpx.Response) -> int:
    """The spans an OTLP partial success says were dropped; 0 when the body says nothing readable."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    if not response.content or "protobuf" not in response.headers.get("content-type", ""):
        return 0
    try:
        parsed = ExportTraceServiceResponse.FromString(response.content)
    except DecodeError:
        return 0
    return int(parsed.partial_success.rejected_spans)


def _write_all(requests: Iterator[ExportTraceServiceRequest], out: str, sent: Sent) -> Sent:
    from flowledger.reasoning.otel import request_span_count

    try:
        with contextlib.ExitStack() as stack:
            file = sys.stdout if out == "-" else stack.enter_context(open(out, "w", encoding="utf-8"))
            for request in requests:
                file.write(otlp_json(request) + "\n")
                sent.requests += 1
                sent.spans += request_span_count(request)
    except OSError as exc:
        raise CommandFailed(f"{out}: {exc.strerror or type(exc).__name__}") from None
    return sent


_HEX_IDS = ("traceId", "spanId", "parentSpanId")


def otlp_json(request: ExportTraceServiceRequest) -> str:
    """One request as OTLP/JSON on one line: lowerCamelCase keys, enums as numbers, ids in hex.

    protobuf's JSON mapping writes bytes as base64; OTLP/JSON wants trace and span ids in hex, so they
    are rewritten. The line can be POSTed as is to an OTLP/HTTP endpoint with Content-Type application/json.
    """
    from google.protobuf.json_format import MessageToDict

    body = MessageToDict(request, use_integers_for_enums=True)
    for resource in body.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return json.dumps(body, separators=(",", ":"))


def _hex_ids(item: dict[str, Any]) -> None:
    for key in _HEX_IDS:
        if key in item:
            item[key] = base64.b64decode(item[key]).hex()
