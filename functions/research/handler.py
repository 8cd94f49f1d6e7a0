"""Lambda entrypoint: the research backlog and claim triage admin routes."""

from flowledger.api.registry import capability_handler

handler = capability_handler("research")
