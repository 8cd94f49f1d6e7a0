"""Lambda entrypoint: the research backlog and claim triage admin routes."""

from flowledger.api.app import rest_handler
from flowledger.api.research import router

handler = rest_handler(router, service="research")
