"""Lambda entrypoint: core routes (/health, /api/me, /admin/v1/me)."""

from flowledger.api.registry import capability_handler

handler = capability_handler("core")
