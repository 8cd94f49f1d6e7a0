"""The REST capabilities: one Lambda function each in AWS, all together in the dev server."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache
from typing import Any

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.utilities.typing import LambdaContext

from flowledger.api.app import rest_handler
from flowledger.api.routes import RouteSpec, route_table

# capability name -> the modules of its routers; the function folder is functions/<name>/. Names,
# not imports: a function loads only its own routers (the reasoning routes pull in numpy, say).
CAPABILITY_MODULES: dict[str, tuple[str, ...]] = {
    "core": ("flowledger.api.core",),
    "audit": ("flowledger.api.audit",),
    "reasoning": (
        "flowledger.api.reasoning",
        "flowledger.api.reasoning_admin",
        "flowledger.api.reasoning_steps",
        "flowledger.api.pathways",
        "flowledger.api.pathway_list",
        "flowledger.api.otlp",
    ),
    "research": ("flowledger.api.research",),
    "subjects": ("flowledger.api.subjects",),
    "documents": ("flowledger.api.workspaces", "flowledger.api.documents"),
}


def capability_routers(name: str) -> tuple[Router, ...]:
    """The routers of one capability, imported on first use."""
    return tuple(importlib.import_module(module).router for module in CAPABILITY_MODULES[name])


@cache
def rest_routes() -> tuple[RouteSpec, ...]:
    """Every REST route of every capability, each naming the function that serves it."""
    return tuple(r for name in CAPABILITY_MODULES for r in route_table(*capability_routers(name), function=name))


def capability_handler(name: str) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The Lambda handler of one REST capability: what ``functions/<name>/handler.py`` deploys."""
    return rest_handler(*capability_routers(name), service=name)
