"""Lambda entrypoint: reasoning flows and the pathway library (/api/reasoning/..., /admin/v1/reasoning/...)."""

from flowledger.api.registry import capability_handler

handler = capability_handler("reasoning")
