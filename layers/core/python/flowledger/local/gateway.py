"""The dev server's stand-in for API Gateway: authenticate, fill the request context, route.

Client routes (``/api/...``) need a bearer token checked by the same :class:`TokenVerifier`
the Lambda authorizer uses; admin routes (``/admin/v1/...``) need a SigV4 signature. Routes
then read the caller from the request context exactly as they do behind API Gateway.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from aws_lambda_powertools.event_handler import HttpResolverLocal
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flowledger.api.access import Access, access_for
from flowledger.api.tokens import TokenVerifier, authorizer_context, bearer_token
from flowledger.errors import FlowledgerError, Forbidden, Unauthenticated
from flowledger.local.sigv4 import SigV4Verifier

API_GATEWAY_MAX_BODY = 10 * 1024 * 1024  # API Gateway's own payload limit
# Lambda Web Adapter passes API Gateway's request context to the ASGI app in this header.
REQUEST_CONTEXT_HEADER = b"x-amzn-request-context"

_request_context: ContextVar[dict[str, Any] | None] = ContextVar("flowledger_request_context", default=None)


class GatewayResolver(HttpResolverLocal):
    """HttpResolverLocal whose events carry the request context the gateway built."""

    def _to_proxy_event(self, event: dict[str, Any]) -> BaseProxyEvent:
        context = _request_context.get()
        if context is not None:
            event = {**event, "requestContext": context}
        return super()._to_proxy_event(event)


class LocalGateway:
    """ASGI app in front of the REST resolver and any mounted ASGI apps (the chat stream)."""

    def __init__(
        self,
        rest_app: ASGIApp,
        tokens: TokenVerifier,
        sigv4: SigV4Verifier,
        public_routes: dict[str, Callable[[], dict[str, Any]]] | None = None,
    ) -> None:
        self._rest_app = rest_app
        self._tokens = tokens
        self._sigv4 = sigv4
        self._public_routes = public_routes or {}
        self._mounts: list[tuple[str, ASGIApp]] = []

    def mount(self, prefix: str, app: ASGIApp) -> None:
        """Serve ``prefix`` and everything below it with ``app``, behind the same authentication."""
        self._mounts.append((prefix.rstrip("/"), app))

    def _app_for(self, path: str) -> ASGIApp:
        for prefix, app in self._mounts:
            if path == prefix or path.startswith(prefix + "/"):
                return app
        return self._rest_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._rest_app(scope, receive, send)
            return
        path = scope["path"]
        if scope["method"] == "GET" and path in self._public_routes:
            await _send_json(send, 200, self._public_routes[path]())
            return
        body = await _read_body(receive)
        if body is None:
            await _send_json(send, 413, {"error": "payload_too_large", "message": "request body over 10 MB"})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            context = await self._authenticate(scope, headers, body)
        except FlowledgerError as exc:
            status = 401 if isinstance(exc, Unauthenticated) else 403
            await _send_json(send, status, {"error": exc.code, "message": exc.message})
            return
        app = self._app_for(path)
        if app is not self._rest_app:
            scope = _with_request_context_header(scope, context)
        token = _request_context.set(context)
        try:
            await app(scope, _replay(body, receive), send)
        finally:
            _request_context.reset(token)

    async def _authenticate(self, scope: Scope, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        client = scope.get("client") or ("127.0.0.1", 0)
        context: dict[str, Any] = {
            "stage": "local",
            "requestId": str(uuid.uuid4()),
            "path": scope["path"],
            "httpMethod": scope["method"],
            "identity": {"sourceIp": client[0]},
        }
        access = access_for(scope["path"])
        if access is Access.JWT:
            # The verifier may fetch this server's own JWKS: never block the event loop on it.
            verified = await asyncio.to_thread(self._tokens.verify, bearer_token(headers.get("authorization")))
            context["authorizer"] = {"principalId": verified.sub, **authorizer_context(verified)}
        elif access is Access.IAM:
            if "authorization" not in headers:
                raise Forbidden("missing authentication token: admin routes need a SigV4 signature")
            query = scope.get("query_string", b"").decode("latin-1")
            url = f"http://{headers.get('host', 'localhost')}{scope.get('raw_path', b'').decode('latin-1')}"
            url = url.split("?", 1)[0] + (f"?{query}" if query else "")
            arn = self._sigv4.verify(scope["method"], url, headers, body)
            context["identity"].update(userArn=arn, caller=arn)
        return context


def _with_request_context_header(scope: Scope, context: dict[str, Any]) -> Scope:
    """Hand a mounted ASGI app the request context the way Lambda Web Adapter does in AWS.

    A client-sent header of the same name is dropped first, so it can never forge a principal.
    """
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != REQUEST_CONTEXT_HEADER]
    headers.append((REQUEST_CONTEXT_HEADER, json.dumps(context).encode()))
    return {**scope, "headers": headers}


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > API_GATEWAY_MAX_BODY:
            return None
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


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})
