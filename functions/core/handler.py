"""Lambda entrypoint: core routes (/health, /api/me, /admin/v1/me)."""

from flowledger.api.app import rest_handler
from flowledger.api.core import router

handler = rest_handler(router, service="core")
