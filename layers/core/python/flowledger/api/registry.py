"""The REST capabilities: one Lambda function each in AWS, all together in the dev server."""

from __future__ import annotations

from dataclasses import dataclass

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import Router

from flowledger.api import audit, core, pathways, reasoning, reasoning_admin, research
from flowledger.api.access import Access, access_for

# capability name -> its routers; the function folder is functions/<name>/.
REST_CAPABILITIES: dict[str, tuple[Router, ...]] = {
    "core": (core.router,),
    "audit": (audit.router,),
    "reasoning": (reasoning.router, reasoning_admin.router, pathways.router),
    "research": (research.router,),
}


@dataclass(frozen=True)
class RouteSpec:
    path: str  # OpenAPI form, e.g. /api/reasoning/flows/{id}
    method: str
    access: Access


def route_table(*routers: Router) -> list[RouteSpec]:
    """Every route of the routers with the authentication that guards it (read from their OpenAPI)."""
    app = APIGatewayRestResolver(enable_validation=True)
    for router in routers:
        app.include_router(router)
    paths = app.get_openapi_schema().paths or {}
    return [
        RouteSpec(path=path, method=method.upper(), access=access_for(path))
        for path, item in sorted(paths.items())
        for method in ("get", "post", "put", "patch", "delete")
        if getattr(item, method) is not None
    ]
