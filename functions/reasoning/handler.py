"""Lambda entrypoint: reasoning flows (/api/reasoning/..., /admin/v1/reasoning/flows...)."""

from flowledger.api.app import rest_handler
from flowledger.api.reasoning import router
from flowledger.api.reasoning_admin import router as admin_router

handler = rest_handler(router, admin_router, service="reasoning")
