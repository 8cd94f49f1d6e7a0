"""Lambda entrypoint: reasoning flows and the pathway library (/api/reasoning/..., /admin/v1/reasoning/...)."""

from flowledger.api.app import rest_handler
from flowledger.api.pathways import router as pathways_router
from flowledger.api.reasoning import router
from flowledger.api.reasoning_admin import router as admin_router

handler = rest_handler(router, admin_router, pathways_router, service="reasoning")
