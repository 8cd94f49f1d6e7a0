"""The streaming chat app (ASGI, Starlette): Lambda Web Adapter runs it in AWS, the dev server mounts it.

``POST /api/chat`` streams the turn's events as Server-Sent Events, one frame per event as it
happens; with ``Accept: application/json`` it answers once with the same outcome as JSON. Both
consume the one event generator of the use case, and in both a client that goes away cancels its
run (it ends CANCELLED; a late model answer is dropped). The caller comes from the request context that
API Gateway (through Lambda Web Adapter) or the dev server's gateway put in ``x-amzn-request-context``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from functools import cache
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from flowledger.api.access import CORS_ALLOWED_HEADERS, CORS_EXPOSED_HEADERS
from flowledger.api.errors import error_body, error_extra, request_id_of, status_for
from flowledger.api.principals import require_scope
from flowledger.api.request_text import refuse_control_characters_in_query
from flowledger.api.screening import screen_body
from flowledger.chat.models import (
    MAX_SESSIONS_PAGE,
    RUN_PATTERN,
    SESSION_PATTERN,
    ChatEvent,
    ChatRequest,
    ChatResult,
    ContentEvent,
    DoneEvent,
    ErrorDetail,
    ErrorEvent,
    StartEvent,
    StatusEvent,
)
from flowledger.chat.runs import RunStore
from flowledger.chat.usecase import CancelToken, ChatApplicationUseCase
from flowledger.errors import FlowledgerError, InvalidInput
from flowledger.identity import Principal
from flowledger.services import Services, bootstrap

REQUEST_CONTEXT_HEADER = "x-amzn-request-context"
# Lambda Web Adapter forwards the invocation's context here, with its deadline in epoch milliseconds.
LAMBDA_CONTEXT_HEADER = "x-amzn-lambda-context"
# The chat app's routes (path, method): the app serves them and CDK exposes exactly these.
CHAT_ROUTES = (
    ("/api/chat", "POST"),
    ("/api/chat/sessions", "GET"),
    ("/api/chat/sessions/{session_id}/runs", "GET"),
    ("/api/chat/runs/{run_id}/cancel", "POST"),
)
STREAMING_ROUTES = {("/api/chat", "POST")}
logger = logging.getLogger("flowledger.chat")
_DONE = object()


def _context(request: Request) -> dict[str, Any]:
    try:
        context = json.loads(request.headers.get(REQUEST_CONTEXT_HEADER, "{}"))
    except json.JSONDecodeError:
        return {}
    return context if isinstance(context, dict) else {}


def lambda_deadline(request: Request, margin_seconds: float) -> float | None:
    """The invocation's deadline as a ``time.monotonic()`` value, ``margin_seconds`` early; None outside Lambda."""
    try:
        context = json.loads(request.headers.get(LAMBDA_CONTEXT_HEADER, "{}"))
    except json.JSONDecodeError:
        return None
    deadline_ms = context.get("deadline", context.get("deadline_ms")) if isinstance(context, dict) else None
    if not isinstance(deadline_ms, int | float) or isinstance(deadline_ms, bool):
        return None
    return time.monotonic() + (deadline_ms / 1000 - time.time()) - margin_seconds


def _error(request: Request, status: HTTPStatus, code: str, message: str, **extra: Any) -> JSONResponse:
    request_id = request_id_of({"requestContext": _context(request)})
    return JSONResponse(error_body(code, message, request_id, **extra), status_code=status.value)


def _principal(request: Request) -> Principal:
    return require_scope({"requestContext": _context(request)}, "chat")


def sse_frame(event: ChatEvent) -> bytes:
    return f"event: {event.type}\ndata: {event.model_dump_json()}\n\n".encode()


def final_body(events: list[ChatEvent]) -> dict[str, Any]:
    """The JSON variant: the same outcome the stream ends with, as one object."""
    fields: dict[str, Any] = {"status_codes": [e.code for e in events if isinstance(e, StatusEvent)]}
    for event in events:
        if isinstance(event, StartEvent):
            fields.update(session_id=event.session_id, run_id=event.run_id)
        elif isinstance(event, ContentEvent):
            fields["content"] = event.content
        elif isinstance(event, DoneEvent):
            fields.update(dict(event))  # its flow_id: confirmed once written (start's was only planned)
            del fields["type"]
        elif isinstance(event, ErrorEvent):
            fields["error"] = ErrorDetail(code=event.code, message=event.message)
            if event.run_id is not None:  # a turn's end (not a refusal before it): its flow, or null
                fields["flow_id"] = event.flow_id
    # Top-level fields a turn did not reach are left out; inside the content, null stays null, and so
    # does the flow id of a turn that ended: null there says its flow was not recorded.
    body = ChatResult(**fields).model_dump(mode="json")
    return {k: v for k, v in body.items() if v is not None or (k == "flow_id" and k in fields)}


def create_app(
    services: Callable[[], Services] = bootstrap, use_case: Callable[[], ChatApplicationUseCase] | None = None
) -> Starlette:
    """The ASGI app; ``uvicorn --factory flowledger.api.chat_app:create_app`` serves it under LWA."""

    @cache
    def default_use_case() -> ChatApplicationUseCase:
        from flowledger.chat.wiring import build_use_case

        return build_use_case(services())

    turn = use_case or default_use_case

    async def chat(request: Request) -> Response:
        principal = _principal(request)
        body = await request.body()
        screen_body(body, request.headers.get("content-type", ""), services().settings.max_body_bytes)
        try:
            chat_request = ChatRequest.model_validate_json(body)
        except ValidationError as exc:
            fields = [{"loc": list(e["loc"]), "type": e["type"], "msg": e["msg"]} for e in exc.errors()]
            return _error(
                request,
                HTTPStatus.UNPROCESSABLE_ENTITY,
                "validation_error",
                "the request does not match the schema",
                fields=fields,
            )
        cancel = CancelToken()
        deadline = lambda_deadline(request, services().settings.diagnosis_deadline_margin_seconds)
        # The run is created here, before any stream: a refusal (another user's session) is an HTTP status.
        events = await run_in_threadpool(turn().run, principal, chat_request, cancel, deadline)
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse(final_body(await _collect(events, cancel, request)))
        return StreamingResponse(
            _stream(events, cancel),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def list_sessions(request: Request) -> Response:
        principal = _principal(request)
        limit = _limit(request, default=20, most=MAX_SESSIONS_PAGE)
        page = await run_in_threadpool(
            RunStore(services()).list_sessions, principal.id, limit, request.query_params.get("cursor")
        )
        return JSONResponse(page.model_dump(mode="json"))

    async def list_runs(request: Request) -> Response:
        principal = _principal(request)
        session_id = request.path_params["session_id"]
        if not _matches(SESSION_PATTERN, session_id):
            raise InvalidInput("session_id is not a session id")
        limit = _limit(request, default=20, most=100)
        page = await run_in_threadpool(
            RunStore(services()).list_runs, principal.id, session_id, limit, request.query_params.get("cursor")
        )
        return JSONResponse(page.model_dump(mode="json"))

    async def cancel_run(request: Request) -> Response:
        principal = _principal(request)
        run_id = request.path_params["run_id"]
        if not _matches(RUN_PATTERN, run_id):
            raise InvalidInput("run_id is not a run id")
        run = await run_in_threadpool(RunStore(services()).cancel, principal.id, run_id)
        return JSONResponse(run.model_dump(mode="json"))

    async def domain_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, FlowledgerError)
        return _error(request, status_for(exc), exc.code, exc.message, **error_extra(exc))

    async def unexpected(request: Request, exc: Exception) -> Response:
        request_id = request_id_of({"requestContext": _context(request)})
        logger.exception("unhandled chat error", extra={"request_id": request_id})
        message = "internal error; quote the request id when reporting it"
        return _error(request, HTTPStatus.INTERNAL_SERVER_ERROR, "internal_error", message)

    origins = services().settings.cors_origin_list
    middleware = (
        [
            Middleware(
                CORSMiddleware,
                allow_origins=sorted(origins),
                allow_methods=["GET", "POST"],
                allow_headers=list(CORS_ALLOWED_HEADERS),
                expose_headers=list(CORS_EXPOSED_HEADERS),
                max_age=600,
            )
        ]
        if origins
        else []
    )
    return Starlette(
        middleware=middleware,
        routes=[
            Route(path, endpoint, methods=[method])
            for (path, method), endpoint in zip(CHAT_ROUTES, (chat, list_sessions, list_runs, cancel_run), strict=True)
        ],
        exception_handlers={FlowledgerError: domain_error, Exception: unexpected},
    )


async def _stream(events: Any, cancel: CancelToken) -> AsyncIterator[bytes]:
    """Frames as the worker thread produces events. If the client goes away, the run is cancelled
    and the worker finishes it (as CANCELLED) on its own; nothing more is sent."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def work() -> None:
        try:
            for event in events:
                loop.call_soon_threadsafe(queue.put_nowait, event)
        except Exception as exc:  # surfaces in the stream as a generic error frame
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, _DONE)

    worker = loop.run_in_executor(None, work)
    try:
        while True:
            item = await queue.get()
            if item is _DONE:
                break
            if isinstance(item, Exception):
                yield sse_frame(ErrorEvent(code="internal_error", message="internal error"))
                break
            yield sse_frame(item)
    finally:
        if not worker.done():
            cancel.cancel()  # the client disconnected mid-run


async def _collect(events: Any, cancel: CancelToken, request: Request) -> list[ChatEvent]:
    """All of the turn's events, for the JSON variant. If the client goes away meanwhile, the run is
    cancelled, exactly as for a stream: the worker then ends it CANCELLED at its next check."""
    worker = asyncio.ensure_future(run_in_threadpool(list, events))
    watcher = asyncio.ensure_future(_cancel_on_disconnect(request, cancel))
    try:
        # The worker is awaited even after a disconnect: the run's one terminal write happens there.
        return await worker
    finally:
        watcher.cancel()


async def _cancel_on_disconnect(request: Request, cancel: CancelToken) -> None:
    # The body has been read, so the next message the server sends is the disconnect (or, once the
    # response is complete, a disconnect too late to matter: this task is cancelled before that).
    while (await request.receive())["type"] != "http.disconnect":
        pass
    cancel.cancel()


def _limit(request: Request, *, default: int, most: int) -> int:
    """The ``limit`` query parameter, 1..``most``; a 422 naming the bounds otherwise.

    Every query parameter is screened here first (the chat routes' one read of them), as the REST ones are.
    """
    refuse_control_characters_in_query(request.query_params.multi_items())
    try:
        limit = int(request.query_params.get("limit", str(default)))
    except ValueError:
        raise InvalidInput("limit must be a number") from None
    if not 1 <= limit <= most:
        raise InvalidInput(f"limit must be between 1 and {most}")
    return limit


def _matches(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None
