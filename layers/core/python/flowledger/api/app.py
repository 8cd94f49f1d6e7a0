"""Builds a powertools resolver from capability Routers, and the Lambda handler around it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver, Response, Router
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from flowledger.api.errors import register_error_handlers
from flowledger.entrypoints import instrumented
from flowledger.errors import PayloadTooLarge
from flowledger.services import Services, bootstrap

Resolver = TypeVar("Resolver", bound=ApiGatewayResolver)


def services_of(router: Router | ApiGatewayResolver) -> Services:
    """The services the entrypoint put in the resolver context for this request."""
    services = router.context.get("services")
    if not isinstance(services, Services):
        raise RuntimeError("no services in the resolver context; the entrypoint must append them")
    return services


def limit_body_size(app: ApiGatewayResolver, next_middleware: NextMiddleware) -> Response[Any]:
    """Reject bodies over the configured limit with 413 before any route parses them."""
    body = app.current_event.body or ""
    if len(body.encode()) > services_of(app).settings.max_body_bytes:
        raise PayloadTooLarge(f"request body exceeds {services_of(app).settings.max_body_bytes} bytes")
    return next_middleware(app)


def build_resolver(routers: Sequence[Router], resolver: Callable[..., Resolver]) -> Resolver:
    """A validating resolver with the error map, the body limit and the given routers."""
    app = resolver(enable_validation=True)
    register_error_handlers(app)
    app.use(middlewares=[limit_body_size])
    for router in routers:
        app.include_router(router)
    return app


def rest_handler(*routers: Router, service: str) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The Lambda entrypoint of one REST capability."""

    def build() -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
        app = build_resolver(routers, APIGatewayRestResolver)

        def resolve(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
            app.append_context(services=bootstrap())
            return app.resolve(event, context)

        return resolve

    return instrumented(service, build, correlation_id_path=correlation_paths.API_GATEWAY_REST)
