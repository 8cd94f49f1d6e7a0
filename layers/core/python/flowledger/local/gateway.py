"""The dev server's stand-in for API Gateway.

For each request it does what API Gateway does in AWS, in the same order: answer CORS preflights,
find the route (404, 405), bound the body, authenticate (a bearer token checked by the same
:class:`TokenVerifier` the Lambda authorizer uses, or a SigV4 signature for admin routes), then
turn the request into the REST proxy event AWS would send and invoke the route's function with
it. The streaming chat app is mounted as Lambda Web Adapter runs it: an ASGI app that gets the
request context in a header. One log line per request: method, path, status, milliseconds.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flowledger.api.access import CORS_ALLOWED_HEADERS, CORS_EXPOSED_HEADERS, Access
from flowledger.api.errors import error_body, error_headers, status_for
from flowledger.api.routes import RouteSpec, binary_media_types, match_route
from flowledger.api.tokens import TokenVerifier, authorizer_context, bearer_token
from flowledger.errors import FlowledgerError, Forbidden, MethodNotAllowed, NotFound, PayloadTooLarge
from flowledger.local.console import is_console_path
from flowledger.local.functions import FunctionTimeout
from flowledger.local.sigv4 import SigV4Verifier
from flowledger.local.startup import StartupGate

API_GATEWAY_MAX_BODY = 10 * 1024 * 1024  # API Gateway's own payload limit
# Lambda Web Adapter passes API Gateway's request context to the ASGI app in this header.
REQUEST_CONTEXT_HEADER = b"x-amzn-request-context"
CORS_MAX_AGE_SECONDS = 600
access_log = logging.getLogger("flowledger.access")
gateway_log = logging.getLogger("flowledger.local")

Page = Callable[[], tuple[str, bytes]]  # (content type, body) of a public page the gateway serves itself
# Answered while the start is still finishing (startup.py): liveness, the API's description, the metrics.
EARLY_PATHS = frozenset({"/health", "/docs", "/openapi.json", "/.well-known/jwks.json", "/metrics"})
LOOPBACK_ADDRESSES = frozenset({"127.0.0.1", "::1", "localhost"})


class Functions(Protocol):
    """Runs a REST function on a proxy event: worker processes in ``serve``, or a direct call in tests."""

    async def invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any]: ...


@dataclass
class LocalGateway:
    """ASGI app in front of the REST functions and the mounted streaming apps."""

    routes: Sequence[RouteSpec]
    functions: Functions
    tokens: TokenVerifier
    sigv4: SigV4Verifier
    cors_origins: frozenset[str] = frozenset()
    pages: dict[str, Page] = field(default_factory=dict)
    console: ASGIApp | None = None  # the static web console at /console/ (local/console.py)
    # Pages only a caller on this machine may read (``/metrics``): 403 for any other address.
    loopback_pages: dict[str, Page] = field(default_factory=dict)
    gate: StartupGate | None = None  # requests outside EARLY_PATHS wait here until the start is done
    # The embedded store's durability (local/durability.py), added to ``/health`` as ``store``.
    store_health: Callable[[], dict[str, Any]] | None = None
    _mounts: dict[str, ASGIApp] = field(default_factory=dict)
    _mounted_routes: list[RouteSpec] = field(default_factory=list)

    def mount(self, function: str, app: ASGIApp, routes: Sequence[RouteSpec]) -> None:
        """Serve ``routes`` with the ASGI ``app`` (as LWA would), behind the same authentication."""
        self._mounts[function] = app
        self._mounted_routes.extend(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; websockets are not served
        started = time.perf_counter()
        request = _Request.of(scope)
        status = 0

        async def respond(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                # The functions add CORS headers themselves when they know the origins; never twice.
                headers += [h for h in self._response_headers(request) if h[0] not in present]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self._handle(request, scope, receive, respond)
        except FlowledgerError as exc:
            await _send_error(respond, exc, request.request_id)
        except Exception:
            # A worker that died or a response that could not be read: the contract's 502, not a bare 500.
            gateway_log.exception("request %s failed in the gateway", request.request_id)
            if status == 0:
                body = error_body("bad_gateway", "the function failed to answer", request.request_id)
                await _send_json(respond, 502, body)
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            # Never the query string or the body: either may hold PHI.
            access_log.info("%s %s %d %.1f ms", request.method, request.path, status, elapsed)

    async def _handle(self, request: _Request, scope: Scope, receive: Receive, send: Send) -> None:
        if self.gate is not None and not self.gate.ready and request.path not in EARLY_PATHS:
            await self.gate.wait()
        if request.method == "OPTIONS" and "access-control-request-method" in request.headers:
            await self._preflight(request, send)
            return
        if self.console is not None and is_console_path(request.path) and request.method in ("GET", "HEAD"):
            await self.console(scope, receive, send)
            return
        if request.method == "GET" and request.path in self.loopback_pages:
            if request.client_ip not in LOOPBACK_ADDRESSES:
                raise Forbidden(f"{request.path} answers only callers on this machine")
            content_type, body = self.loopback_pages[request.path]()
            await _send(send, 200, body, content_type)
            return
        page = self.pages.get(request.path) if request.method == "GET" else None
        if page is not None:
            content_type, body = page()
            await _send(send, 200, body, content_type)
            return
        route, allowed = match_route([*self.routes, *self._mounted_routes], request.method, request.path)
        if route is None:
            if allowed:
                raise MethodNotAllowed(f"{request.path} does not allow {request.method}", sorted(set(allowed)))
            raise NotFound(f"no route for {request.path}")
        body = await _read_body(receive, request.content_length)
        context = await self._authenticate(request, route, body)
        app = self._mounts.get(route.function)
        if app is not None:
            await app(_with_request_context_header(scope, context), _replay(body, receive), send)
            return
        try:
            response = await self.functions.invoke(route.function, proxy_event(request, route, context, body))
        except FunctionTimeout:
            await _send_json(send, 504, error_body("gateway_timeout", "the function timed out", request.request_id))
            return
        if request.path == "/health" and self.store_health is not None:
            response = _with_store(response, self.store_health())
        await _send_proxy_response(send, response)

    async def _preflight(self, request: _Request, send: Send) -> None:
        """Answer a CORS preflight without credentials, as API Gateway's OPTIONS mock does."""
        origin = request.headers.get("origin", "")
        if origin not in self.cors_origins:
            raise Forbidden(f"origin {origin or '(none)'} is not allowed")
        _, allowed = match_route([*self.routes, *self._mounted_routes], "", request.path)
        if not allowed:
            raise NotFound(f"no route for {request.path}")
        headers = [
            (b"access-control-allow-methods", ", ".join(sorted(set(allowed))).encode()),
            (b"access-control-allow-headers", ", ".join(CORS_ALLOWED_HEADERS).encode()),
            (b"access-control-max-age", str(CORS_MAX_AGE_SECONDS).encode()),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    def _response_headers(self, request: _Request) -> list[tuple[bytes, bytes]]:
        headers = [(b"x-amzn-requestid", request.request_id.encode())]
        origin = request.headers.get("origin")
        if origin and origin in self.cors_origins:
            headers += [
                (b"access-control-allow-origin", origin.encode()),
                (b"access-control-expose-headers", ", ".join(CORS_EXPOSED_HEADERS).encode()),
                (b"vary", b"Origin"),
            ]
        return headers

    async def _authenticate(self, request: _Request, route: RouteSpec, body: bytes) -> dict[str, Any]:
        context: dict[str, Any] = {
            "stage": "local",
            "requestId": request.request_id,
            "resourcePath": route.path,
            "path": request.path,
            "httpMethod": request.method,
            "accountId": "000000000000",
            "apiId": "local",
            "protocol": request.protocol,
            "requestTimeEpoch": int(time.time() * 1000),
            "identity": {"sourceIp": request.client_ip, "userAgent": request.headers.get("user-agent")},
        }
        if route.access is Access.JWT:
            # The verifier may fetch this server's own JWKS: never block the event loop on it.
            verified = await asyncio.to_thread(self.tokens.verify, bearer_token(request.headers.get("authorization")))
            context["authorizer"] = {"principalId": verified.sub, **authorizer_context(verified)}
        elif route.access is Access.IAM:
            if "authorization" not in request.headers:
                raise Forbidden("missing authentication token: admin routes need a SigV4 signature")
            url = f"http://{request.headers.get('host', 'localhost')}{request.raw_path}"
            if request.query:
                url += f"?{request.query}"
            arn = self.sigv4.verify(request.method, url, request.headers, body)
            context["identity"].update(userArn=arn, caller=arn)
        return context


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    raw_path: str
    query: str
    headers: dict[str, str]
    multi_headers: dict[str, list[str]]
    client_ip: str
    protocol: str
    request_id: str

    @classmethod
    def of(cls, scope: Scope) -> _Request:
        multi: dict[str, list[str]] = {}
        for key, value in scope["headers"]:
            multi.setdefault(key.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        client = scope.get("client") or ("127.0.0.1", 0)
        return cls(
            method=scope["method"].upper(),
            path=scope["path"],
            raw_path=(scope.get("raw_path") or scope["path"].encode()).decode("latin-1"),
            query=scope.get("query_string", b"").decode("latin-1"),
            headers={k: v[-1] for k, v in multi.items()},
            multi_headers=multi,
            client_ip=client[0],
            protocol=f"HTTP/{scope.get('http_version', '1.1')}",
            request_id=str(uuid.uuid4()),
        )

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("content-length", "")
        return int(value) if value.isdigit() else None


def proxy_event(request: _Request, route: RouteSpec, context: dict[str, Any], body: bytes) -> dict[str, Any]:
    """The API Gateway REST proxy event (payload 1.0) AWS would send the function for this request."""
    pairs = parse_qsl(request.query, keep_blank_values=True)
    multi_query: dict[str, list[str]] = {}
    for key, value in pairs:
        multi_query.setdefault(key, []).append(value)
    match = route.pattern.match(request.path)
    parameters = match.groupdict() if match else {}
    text, encoded = _as_text(body, request.headers.get("content-type", ""), route)
    return {
        "resource": route.path,
        "path": request.path,
        "httpMethod": request.method,
        "headers": request.headers,
        "multiValueHeaders": request.multi_headers,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": parameters or None,
        "stageVariables": None,
        "requestContext": context,
        "body": text if body else None,
        "isBase64Encoded": encoded,
    }


def _as_text(body: bytes, content_type: str, route: RouteSpec) -> tuple[str, bool]:
    """The body as the event carries it. API Gateway passes a body of the API's binary media types, or one it
    cannot treat as text, base64-encoded (``isBase64Encoded``); the function decodes it."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind not in binary_media_types([route]):
        try:
            return body.decode("utf-8"), False
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode("ascii"), True


def _with_request_context_header(scope: Scope, context: dict[str, Any]) -> Scope:
    """Hand a mounted ASGI app the request context the way Lambda Web Adapter does in AWS.

    A client-sent header of the same name is dropped first, so it can never forge a principal.
    """
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != REQUEST_CONTEXT_HEADER]
    headers.append((REQUEST_CONTEXT_HEADER, json.dumps(context).encode()))
    return {**scope, "headers": headers}


async def _read_body(receive: Receive, declared: int | None) -> bytes:
    if declared is not None and declared > API_GATEWAY_MAX_BODY:
        raise PayloadTooLarge("request body over 10 MB")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > API_GATEWAY_MAX_BODY:
            raise PayloadTooLarge("request body over 10 MB")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """Hand the already-read body to the app once, then the server's own messages (disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _with_store(response: dict[str, Any], store: dict[str, Any]) -> dict[str, Any]:
    """The function's ``/health`` answer with the embedded store's durability added (``store``)."""
    if response.get("statusCode") != 200 or response.get("isBase64Encoded"):
        return response
    try:
        body = json.loads(response.get("body") or "")
    except ValueError:
        return response
    if not isinstance(body, dict):
        return response
    return {**response, "body": json.dumps({**body, "store": store})}


async def _send_proxy_response(send: Send, response: dict[str, Any]) -> None:
    body = response.get("body") or ""
    payload = base64.b64decode(body) if response.get("isBase64Encoded") else str(body).encode()
    headers: list[tuple[bytes, bytes]] = []
    for key, value in (response.get("headers") or {}).items():
        headers.append((key.lower().encode("latin-1"), str(value).encode("latin-1")))
    for key, values in (response.get("multiValueHeaders") or {}).items():
        if key in (response.get("headers") or {}):
            continue
        headers += [(key.lower().encode("latin-1"), str(v).encode("latin-1")) for v in values]
    headers = [h for h in headers if h[0] != b"content-length"]
    headers.append((b"content-length", str(len(payload)).encode()))
    await send({"type": "http.response.start", "status": int(response.get("statusCode", 502)), "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _send_error(send: Send, exc: FlowledgerError, request_id: str) -> None:
    extra = [(k.lower().encode(), v.encode()) for k, v in (error_headers(exc) or {}).items()]
    payload = json.dumps(error_body(exc.code, exc.message, request_id)).encode()
    await _send(send, status_for(exc).value, payload, "application/json", extra)


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    await _send(send, status, json.dumps(body).encode(), "application/json")


async def _send(
    send: Callable[[Message], Awaitable[None]],
    status: int,
    payload: bytes,
    content_type: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *(extra or [])]})
    await send({"type": "http.response.body", "body": payload})
