"""Builds a powertools resolver from capability Routers, and the Lambda handler around it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, CORSConfig
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver, Router
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from flowledger.api.access import CORS_ALLOWED_HEADERS, CORS_EXPOSED_HEADERS
from flowledger.api.errors import proxy_error, register_error_handlers
from flowledger.api.routes import route_table
from flowledger.api.screening import screen_request
from flowledger.entrypoints import instrumented
from flowledger.errors import FlowledgerError
from flowledger.services import Services, bootstrap

Resolver = TypeVar("Resolver", bound=ApiGatewayResolver)


def services_of(router: Router | ApiGatewayResolver) -> Services:
    """The services the entrypoint put in the resolver context for this request."""
    services = router.context.get("services")
    if not isinstance(services, Services):
        raise RuntimeError("no services in the resolver context; the entrypoint must append them")
    return services


def cors_config(origins: frozenset[str]) -> CORSConfig | None:
    """CORS headers on the functions' responses for the allowed origins (API Gateway answers preflights)."""
    if not origins:
        return None
    first, *others = sorted(origins)
    return CORSConfig(
        allow_origin=first,
        extra_origins=others,
        allow_headers=list(CORS_ALLOWED_HEADERS),
        expose_headers=list(CORS_EXPOSED_HEADERS),
        max_age=600,
    )


def build_resolver(
    routers: Sequence[Router], resolver: Callable[..., Resolver], cors: CORSConfig | None = None
) -> Resolver:
    """A validating resolver with the error map and the given routers."""
    app = resolver(enable_validation=True, cors=cors)
    register_error_handlers(app)
    for router in routers:
        app.include_router(router)
    return app


def rest_handler(
    *routers: Router, service: str, services: Callable[[], Services] | None = None
) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The Lambda entrypoint of one REST capability: screen the request, then resolve it.

    ``services`` defaults to the function's ``bootstrap()`` (looked up per call, so tests can swap it).
    """

    def build() -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
        settings = (services() if services is not None else bootstrap()).settings
        app = build_resolver(routers, APIGatewayRestResolver, cors_config(settings.cors_origin_list))
        routes = route_table(*routers, function=service)

        def resolve(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
            current = services() if services is not None else bootstrap()
            try:
                screen_request(event, routes, current.settings.max_body_bytes)
            except FlowledgerError as exc:
                return proxy_error(exc, event)
            app.append_context(services=current)
            return app.resolve(event, context)

        return resolve

    return instrumented(service, build, correlation_id_path=correlation_paths.API_GATEWAY_REST)
