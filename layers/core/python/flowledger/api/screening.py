"""What every REST request passes before a route sees it, in a fixed order.

1. the caller: a bearer principal with the route's scope (client routes) or an IAM principal (admin);
2. the size of the body, before anything parses it (413);
3. the body's encoding and media type: UTF-8 JSON only (400, 415);
4. the body's shape as JSON: parseable and at most ``MAX_JSON_DEPTH`` deep (400);
5. what people mean (``request_text.py``): each key once in an object (400), and no control
   characters in the body's text or the query parameters (422 naming where).

Only then does the route's schema validation run (422), so a caller without the scope never
learns the schema, and an 8 MiB array is never parsed. The Lambda handler runs this in AWS and,
because the dev server calls the same handler, locally too.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any

from flowledger.api.access import Access
from flowledger.api.principals import client_principal, iam_principal
from flowledger.api.request_text import parse_body, query_parameters, refuse_control_characters_in_query
from flowledger.api.routes import RouteSpec, match_route
from flowledger.errors import Forbidden, MalformedBody, PayloadTooLarge, UnsupportedMediaType
from flowledger.json_depth import json_depth

# Deeper than any body a route takes; deep enough that no legitimate client notices.
MAX_JSON_DEPTH = 32
JSON_MEDIA_TYPES = ("application/json",)


def screen_request(event: dict[str, Any], routes: Iterable[RouteSpec], max_body_bytes: int) -> None:
    """Raise the domain error a request deserves before its route runs; return when it may proceed."""
    route, _ = match_route(routes, str(event.get("httpMethod", "")).upper(), str(event.get("path", "")))
    if route is None:
        return  # the resolver answers 404 / 405 in the error contract
    if route.access is Access.JWT:
        principal = client_principal(event)
        if route.scope is not None and route.scope not in principal.scopes:
            raise Forbidden(f"this route needs the {route.scope!r} scope")
    elif route.access is Access.IAM:
        iam_principal(event)
    if not route.raw_body:  # a raw body is checked by the route's own decoder, against its own limits
        screen_body(body_bytes(event), _media_type(event), max_body_bytes)
    refuse_control_characters_in_query(query_parameters(event))
    _lowercase_media_type(event)


def _lowercase_media_type(event: dict[str, Any]) -> None:
    """Media types are case-insensitive, powertools' check is not: ``Application/JSON`` must pass it too."""
    for field in ("headers", "multiValueHeaders"):
        headers = event.get(field) or {}
        for key, value in headers.items():
            if key.lower() == "content-type":
                headers[key] = [_lowercased(v) for v in value] if isinstance(value, list) else _lowercased(value)


def _lowercased(content_type: str) -> str:
    media_type, separator, parameters = str(content_type).partition(";")
    return media_type.strip().lower() + separator + parameters


def screen_body(body: bytes, media_type: str, max_body_bytes: int) -> None:
    """Size, media type, encoding and nesting of a JSON body, checked before anything parses it."""
    if not body:
        return
    if len(body) > max_body_bytes:
        raise PayloadTooLarge(f"request body exceeds {max_body_bytes} bytes")
    if media_type.split(";", 1)[0].strip().lower() not in JSON_MEDIA_TYPES:
        raise UnsupportedMediaType("send the body as application/json")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedBody("the body is not valid UTF-8") from None
    if json_depth(text) > MAX_JSON_DEPTH:
        raise MalformedBody(f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        parse_body(text)
    except ValueError:
        raise MalformedBody("the body is not valid JSON") from None


def body_bytes(event: dict[str, Any]) -> bytes:
    """The body as the client sent it: API Gateway hands a binary one over base64-encoded."""
    body = event.get("body")
    if not body:
        return b""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise MalformedBody("the body is not valid base64") from None
    return str(body).encode("utf-8", errors="surrogatepass")


def _media_type(event: dict[str, Any]) -> str:
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    return headers.get("content-type", "")
