"""The REST capabilities: one Lambda function each in AWS, all together in the dev server."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.typing import LambdaContext

from flowledger.api import audit, core, pathways, reasoning, reasoning_admin, research
from flowledger.api.app import rest_handler
from flowledger.api.routes import RouteSpec, route_table

# capability name -> its routers; the function folder is functions/<name>/.
REST_CAPABILITIES: dict[str, tuple[Router, ...]] = {
    "core": (core.router,),
    "audit": (audit.router,),
    "reasoning": (reasoning.router, reasoning_admin.router, pathways.router),
    "research": (research.router,),
}


@cache
def rest_routes() -> tuple[RouteSpec, ...]:
    """Every REST route of every capability, each naming the function that serves it."""
    return tuple(r for name, routers in REST_CAPABILITIES.items() for r in route_table(*routers, function=name))


def capability_handler(name: str) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The Lambda handler of one REST capability: what ``functions/<name>/handler.py`` deploys."""
    return rest_handler(*REST_CAPABILITIES[name], service=name)
