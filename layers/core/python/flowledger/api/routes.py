"""Route specs read from an OpenAPI document: path template, method, access, scope, serving function.

The handlers screen requests with them (scope before body), the local gateway routes with them and
CDK exposes exactly them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import Router

from flowledger.api.access import BEARER_SCHEME, Access, access_for, security_schemes

METHODS = ("get", "put", "post", "delete", "options", "head", "patch")
# An operation with this extension takes its body as bytes of the media types it maps to their schemas (OTLP's
# protobuf, say):
# the handler decodes it itself, so screening skips the JSON checks, and API Gateway passes the binary ones
# through base64-encoded (the API's binary media types are read from here).
RAW_BODY_EXTENSION = "x-flowledger-raw-body"


@dataclass(frozen=True)
class RouteSpec:
    path: str  # OpenAPI form, e.g. /api/reasoning/flows/{id}
    method: str
    access: Access
    scope: str | None = None  # the bearer scope a client route needs; None: any valid token
    function: str = ""  # the capability (Lambda function) that serves it
    raw_body: tuple[str, ...] = ()  # media types of a body the route decodes itself (RAW_BODY_EXTENSION)

    @property
    def pattern(self) -> re.Pattern[str]:
        return _template(self.path)


@cache
def _template(path: str) -> re.Pattern[str]:
    # Named groups, so the same pattern yields the path parameters API Gateway would pass.
    return re.compile("^" + re.sub(r"\\\{([^/]+?)\\\}", r"(?P<\1>[^/]+)", re.escape(path)) + "$")


def schema_resolver(routers: Iterable[Router]) -> APIGatewayRestResolver:
    """A resolver to read the routers' OpenAPI from, leaving the routers bound to the one that serves them.

    ``include_router`` re-points a router's request state at the including resolver, so including
    the live routers here would cut a built handler off from its own context; copies are included.
    """
    app = APIGatewayRestResolver(enable_validation=True)
    for router in routers:
        app.include_router(copy.copy(router))
    return app


def route_table(*routers: Router, function: str = "") -> list[RouteSpec]:
    """Every route of the routers with the authentication and scope that guard it (read from their OpenAPI)."""
    return list(_route_table(routers, function))


@cache
def _route_table(routers: tuple[Router, ...], function: str) -> tuple[RouteSpec, ...]:
    # Generating the OpenAPI costs some 35 ms, and the routers' routes are fixed once their modules are imported:
    # each process reads a set of routers once, however many handlers it builds over them.
    app = schema_resolver(routers)
    schema = app.get_openapi_schema(security_schemes=security_schemes()).model_dump(by_alias=True, exclude_none=True)
    return tuple(routes_of(schema.get("paths") or {}, function))


def routes_of(paths: dict[str, Any], function: str = "") -> list[RouteSpec]:
    """The route specs of an OpenAPI ``paths`` object."""
    routes = []
    for path, item in sorted(paths.items()):
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            scopes = [s for requirement in operation.get("security") or [] for s in requirement.get(BEARER_SCHEME, [])]
            routes.append(
                RouteSpec(
                    path=path,
                    method=method.upper(),
                    access=access_for(path),
                    scope=scopes[0] if scopes else None,
                    function=function,
                    raw_body=tuple(operation.get(RAW_BODY_EXTENSION) or ()),
                )
            )
    return routes


def binary_media_types(routes: Iterable[RouteSpec]) -> list[str]:
    """The media types API Gateway must pass through as bytes: every raw body type that is not JSON text."""
    return sorted({kind for route in routes for kind in route.raw_body if kind != "application/json"})


def match_route(routes: Iterable[RouteSpec], method: str, path: str) -> tuple[RouteSpec | None, list[str]]:
    """The route serving ``method path``, and the methods the path allows (for a 405's ``Allow``).

    As in API Gateway's resource tree, a literal segment shadows a parameter for every method:
    ``/pathways/compare`` is its own resource, so ``GET /pathways/compare`` is 405, never the
    ``GET /pathways/{pathway_id}`` route.
    """
    matching = [r for r in routes if r.pattern.match(path)]
    if not matching:
        return None, []
    resource = min({r.path for r in matching}, key=_specificity)
    allowed = [r for r in matching if r.path == resource]
    chosen = next((r for r in allowed if r.method == method), None)
    return chosen, [r.method for r in allowed]


def _specificity(template: str) -> tuple[bool, ...]:
    """Literal segments sort before parameters, segment by segment from the left."""
    return tuple(segment.startswith("{") for segment in template.split("/"))
